"""`ctgscore splits` through `ctgscore.cli.main.main`: JSON output, partitions and the report."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.text_stats import distinct_n
from splits.aspects import from_aspects
from splits.divergence import divergence


@pytest.fixture
def cli_main():
    """The real `ctgscore` dispatcher, in process."""
    from ctgscore.cli.main import main

    return main


ASPECTS = {"sentiment": ["Positive", "Negative"], "pronoun": ["plural", "singular"], "tense": ["Present", "Past"]}


def make_corpus(path, layout, rows_per_combo=6):
    """A small scored corpus: every Yelp-like combination, predictions right except for the
    `tense` aspect of Negative rows, a perplexity per row."""
    uni = from_aspects(ASPECTS)
    recs = []
    for i, combo in enumerate(uni.combos):
        d = dict(zip(uni.aspects, combo))
        for r in range(rows_per_combo):
            pred_tense = d["tense"] if d["sentiment"] == "Positive" else ("Past" if d["tense"] == "Present" else "Present")
            recs.append({
                "id": f"c{i}r{r}", "text": f"w{r} w{r} x y z {'a b' * (i % 3)}", "perplexity": float(10 + i + r),
                "pred_sentiment": d["sentiment"], "pred_pronoun": d["pronoun"], "pred_tense": pred_tense, **{"_" + k: v for k, v in d.items()},
            })
    cols = {k: [r[k] for r in recs] for k in ("id", "text", "perplexity", "pred_sentiment", "pred_pronoun", "pred_tense")}
    if layout == "map":
        cols["attributes"] = pa.array([[(a, r["_" + a]) for a in ASPECTS] for r in recs], type=pa.map_(pa.string(), pa.string()))
    else:
        for a in ASPECTS:
            cols[a] = [r["_" + a] for r in recs]
    pq.write_table(pa.table(cols), path)
    return recs


def test_cli_writes_splits_json(cli_main, tmp_path):
    out = tmp_path / "acd.json"
    code = cli_main(["splits", "--aspects", json.dumps(ASPECTS), "--protocol", "acd", "--seed", "4", "--output", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    uni = from_aspects(ASPECTS)
    assert len(data["splits"]) == 10
    for s in data["splits"]:
        seen = [uni.index_of(c) for c in s["seen"]]
        assert len(seen) == 4 and len(s["unseen"]) == 4 and uni.is_eligible(seen)
        assert s["divergence"] == pytest.approx(divergence(uni, seen)) == pytest.approx(0.5)
    sig = data["signature"]
    assert sig["protocol"] == "acd" and sig["seed"] == 4 and sig["alpha"] == 0.1 and "string" in sig


def test_cli_climb_with_named_dataset_and_bad_input(cli_main, tmp_path, capsys):
    out = tmp_path / "fy.json"
    assert cli_main(["splits", "--aspects", "Fyelp", "--protocol", "fewshot", "--search", "climb", "--restarts", "32",
                     "--seed", "2", "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["splits"]) == 2 and data["signature"]["search"] == "climb" and data["signature"]["restarts"] == 32
    assert all(len(s["seen"]) == 5 for s in data["splits"])
    assert cli_main(["splits", "--aspects", '{"sentiment": ["a"]}', "--protocol", "acd", "--output", str(out)]) == 2
    assert "at least 2 aspects" in capsys.readouterr().err
    assert cli_main(["splits", "--corpus", str(tmp_path / "missing.parquet"), "--protocol", "acd", "--output", str(out)]) == 2  # a missing input is a usage mistake
    assert "missing.parquet" in capsys.readouterr().err


@pytest.mark.parametrize("layout", ["map", "columns"])
def test_cli_corpus_partitions_and_report(cli_main, tmp_path, layout):
    corpus = tmp_path / "corpus.parquet"
    recs = make_corpus(corpus, layout)
    out = tmp_path / "holdout.json"
    parts = tmp_path / "parts"
    code = cli_main(["splits", "--corpus", str(corpus), "--protocol", "holdout", "--output", str(out),
                     "--partition-dir", str(parts), "--iid-fraction", "0.25", "--report"])
    assert code == 0
    data = json.loads(out.read_text())
    assert len(data["splits"]) == 8
    manifest = json.loads((parts / "manifest.json").read_text())
    assert len(manifest["splits"]) == 8
    for n, split in enumerate(data["splits"]):
        held = tuple(split["unseen"][0][a] for a in sorted(ASPECTS))
        folder = parts / f"holdout_{n:02d}"
        tables = {p: pq.read_table(folder / f"{p}.parquet") for p in ("train", "test_iid", "test_comp")}
        ids = {p: t.column("id").to_pylist() for p, t in tables.items()}
        assert sum(len(v) for v in ids.values()) == len(recs)
        assert set(ids["train"]).isdisjoint(ids["test_iid"])
        want_comp = [r["id"] for r in recs if tuple(r["_" + a] for a in sorted(ASPECTS)) == held]
        assert ids["test_comp"] == want_comp
        assert 0 < len(ids["test_iid"]) < len(ids["train"])
        assert tables["train"].schema.names == pq.read_table(corpus).schema.names
    # the iid choice is a property of the row id, the same in every split
    iid_sets = [set(pq.read_table(parts / f"holdout_{n:02d}" / "test_iid.parquet").column("id").to_pylist()) for n in range(8)]
    all_iid = set.union(*iid_sets)
    for n, split in enumerate(data["splits"]):
        held = tuple(split["unseen"][0][a] for a in sorted(ASPECTS))
        assert iid_sets[n] == {r["id"] for r in recs if r["id"] in all_iid and tuple(r["_" + a] for a in sorted(ASPECTS)) != held}

    rep = json.loads(out.with_suffix(".report.json").read_text())
    assert rep["n_splits"] == 8
    for n, split in enumerate(data["splits"]):
        held = {a: split["unseen"][0][a] for a in ASPECTS}
        rows = [r for r in recs if all(r["_" + a] == v for a, v in held.items())]
        other = [r for r in recs if r not in rows]
        acc_comp = np.mean([1.0, 1.0, 1.0 if held["sentiment"] == "Positive" else 0.0])
        acc_iid = np.mean([1.0, 1.0, np.mean([r["_sentiment"] == "Positive" for r in other])])
        s = rep["splits"][n]
        assert s["comp"]["accuracy"] == pytest.approx(acc_comp)
        assert s["iid"]["accuracy"] == pytest.approx(acc_iid)
        assert s["gap"] == pytest.approx((acc_iid - acc_comp) / acc_iid)
        assert s["comp"]["perplexity"] == pytest.approx(np.mean([r["perplexity"] for r in rows]))
        assert s["iid"]["dist3"] == pytest.approx(np.mean([distinct_n(r["text"].split(), 3) for r in other]))
        assert s["comp"]["accuracy_per_aspect"]["tense"] == (1.0 if held["sentiment"] == "Positive" else 0.0)
    assert "| tense |" in out.with_suffix(".report.md").read_text()


def test_duplicates_flag_keeps_the_originals_ordered_lists(tmp_path, cli_main):
    """`--duplicates ordered` keeps seen lists that differ only in order (CompMCTG weights its
    averages by them); the default keeps each distinct set once. Both hold the same sets."""
    results = {}
    for mode in ("sets", "ordered"):
        out = tmp_path / f"{mode}.json"
        assert cli_main(["splits", "--aspects", "Yelp", "--protocol", "fewshot", "--seed", "0",
                         "--duplicates", mode, "-o", str(out), "--no-progress"]) == 0
        splits = json.loads(out.read_text())["splits"]
        results[mode] = [frozenset(json.dumps(c, sort_keys=True) for c in s["seen"]) for s in splits]
    assert len(set(results["sets"])) == len(results["sets"])  # distinct sets only
    assert len(results["ordered"]) > len(set(results["ordered"]))  # repeats kept as lists
    assert set(results["ordered"]) == set(results["sets"])


@pytest.mark.parametrize(("args", "fragment"), [
    (["--aspects", '{"a": ["x", "y"], "b": ["u", "v"]}', "--protocol", "fewshot", "--seen-size", "-1"],
     "seen_size must be a whole number from 1 to 3 (the 4 attribute combinations less one), got -1"),  # was an internal error
    (["--aspects", '{"a": ["x", "y"], "b": ["u", "v"]}', "--protocol", "acd", "--seen-size", "4"], "got 4"),
    (["--aspects", '{"a": [1, 2], "b": ["u", "v"]}', "--protocol", "acd"], "aspect 'a': value 1 is not a non-empty string"),
    (["--aspects", '{"a": [null, "z"], "b": ["u", "v"]}', "--protocol", "acd"], "aspect 'a': value None is not"),
    (["--aspects", '{"a": [" ", "z"], "b": ["u", "v"]}', "--protocol", "acd"], "aspect 'a': value ' ' is not"),
])
def test_aspect_values_and_seen_sizes_that_mean_nothing_are_usage_errors(tmp_path, args, fragment):
    from ctgscore.testing.cli import assert_user_error, run_cli_in_process

    proc = run_cli_in_process(["splits", *args, "-o", str(tmp_path / "s.json")])
    assert_user_error(proc, 2, fragment)

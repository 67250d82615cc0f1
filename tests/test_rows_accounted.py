"""Nothing lost without a word, command by command (README, docs/security.md, docs/meta_eval.md
"Rows left out"): every input row comes out scored or with an error reason (`score`, the job),
and a statistics command that leaves rows out counts them under a reason, so that rows in =
rows used + the rows left out per reason, on the console, in `--json` and in the report it
writes. Each command gets a small input that mixes clean rows with the defects that apply to
it: a null, empty or blank key (dataset, system, doc_id), NaN / +inf / -inf or a string where a
number belongs, a null or duplicate id, shards whose columns differ (a column one shard lacks,
`system` as integers in another), a score column that is all null, a human column one dataset
lacks, a system of one dataset only."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import types

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ctgscore
from scoring.errors import InputError
from tests.job_support import constraints_report_args

NAN, INF = float("nan"), float("inf")


def adds_up(summary: dict) -> bool:
    return summary["rows_in"] == summary["rows_used"] + sum(summary["rows_left_out"].values())


# ----- score: rows out == rows in ------------------------------------------------------------
DEFECTIVE = pa.table({  # shard a: clean rows beside defective ones
    "id": ["a1", "a2", "a3", "a4", "a5", "a6", "a7", ""],
    "text": ["good text one.", "good text two.", None, "", "   ", "fine", "also fine", "an empty id"],
    "dataset": ["d", "d", None, "", "d", "d", " ", "d"],
    "system": ["s1", "s2", "s1", "s1", None, "", "s1", "s1"],
    "doc_id": ["x", None, "x", "x", "x", "x", "", "x"],
    "human_q": [1.0, 2.0, NAN, INF, -INF, 1.0, 1.0, 1.0],
})
LEAN = pa.table({"id": ["b1", "b2"], "text": ["shard b text", "shard b two"]})  # lacks every other column


def write_dump(folder, *tables) -> str:
    folder.mkdir()
    for name, table in zip("abcdef", tables):
        pq.write_table(table, folder / f"{name}.parquet")
    return str(folder)


def test_score_gives_every_row_back_and_names_the_field_of_each_error(tmp_path, cli):
    dump = write_dump(tmp_path / "dump", DEFECTIVE, LEAN)
    out = tmp_path / "out.parquet"
    proc = cli(["score", "-m", "text_stats", "-i", dump, "-o", out, "--max-error-rate", "1", "--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    result = pq.read_table(out).to_pandas()
    rows_in = DEFECTIVE.num_rows + LEAN.num_rows
    assert summary["rows"] == len(result) == rows_in
    assert result["id"].tolist() == DEFECTIVE.column("id").to_pylist() + LEAN.column("id").to_pylist()
    errors = dict(zip(result["id"], result["error"]))
    assert errors["a3"] == "null field 'text'" and errors["a4"] == errors["a5"] == "empty field 'text'"
    assert [i for i, e in errors.items() if isinstance(e, str)] == ["a3", "a4", "a5"]
    assert summary["errors"] == sum(summary["error_reasons"].values()) == 3
    scored = result[result["error"].isna()]
    assert scored["text_stats_words"].notna().all() and len(scored) == rows_in - 3  # missing keys are no error here
    # carried columns as stored, the lean shard's as null; a rating of inf or -inf is carried, not dropped
    by_id = result.set_index("id")
    assert by_id.loc["a4", "human_q"] == INF and by_id.loc["a5", "human_q"] == -INF and math.isnan(by_id.loc["a3", "human_q"])
    assert by_id.loc[["b1", "b2"], ["dataset", "system", "human_q"]].isna().all().all()


@pytest.mark.parametrize("second, message", [
    (pa.table({"id": ["b1", None], "text": ["x", "y"]}), "b.parquet: row 1: null field 'id'"),
    (pa.table({"id": ["b1", "a1"], "text": ["x", "y"]}), "b.parquet: row 1: duplicate id 'a1', also row 0 of "),
    (pa.table({"id": ["b1", "b2"], "text": ["x", "y"], "system": [1, 2]}), "b.parquet: column 'system' is int64, expected string"),
    (pa.table({"id": ["b1", "b2"], "text": ["x", "y"], "human_q": ["1", "high"]}),
     "b.parquet: column 'human_q' is string, expected float64"),
    (pa.table({"id": ["b1", "b2"], "text": ["x", "y"], "extra": ["p", "q"]}),
     "b.parquet: column 'extra' is string here, double in "),
])
def test_score_names_the_shard_and_its_own_row_of_a_bad_id_or_column(tmp_path, cli, second, message):
    """One output file holds one row per id, so a bad id fails `score` (exit 1, as docs/schema.md
    says); of a folder, the message names the shard and the row in it, never a row number of
    the shards joined nor only the folder."""
    first = pa.table({"id": ["a1", "a2"], "text": ["t one", "t two"], "human_q": [1.0, 2.0], "extra": [0.5, 1.5]})
    dump = write_dump(tmp_path / "dump", first, second)
    proc = cli(["score", "-m", "text_stats", "-i", dump, "-o", tmp_path / "o.parquet", "--json"])
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert f"{dump}/{message}" in error, error
    assert not (tmp_path / "o.parquet").exists()


def test_score_keeps_an_empty_id_as_a_row(tmp_path, cli):
    dump = write_dump(tmp_path / "dump", DEFECTIVE)
    proc = cli(["score", "-m", "text_stats", "-i", f"{dump}/a.parquet", "-o", tmp_path / "o.parquet",
                "--max-error-rate", "1", "--json"])
    assert proc.returncode == 0, proc.stderr
    result = pq.read_table(tmp_path / "o.parquet").to_pandas().set_index("id")
    assert result.loc["", "text_stats_words"] == 3


# ----- meta and compare: rows in = used + left out per reason ----------------------------------
@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    """Two datasets of three systems on four documents, then one defective row each, then a
    second shard with no human column and integer systems; a score column all null in both."""
    rng = np.random.default_rng(0)
    rows = [dict(id=f"{d}-{doc}-{s}", dataset=d, system=s, doc_id=f"x{doc}", m=float(rng.normal(k)),
                 human_q=float(rng.normal(k)))
            for d in ("d1", "d2") for doc in range(4) for k, s in enumerate(("s0", "s1", "s2"))]
    defects = [dict(dataset=None), dict(dataset=""), dict(system=None), dict(system=""), dict(doc_id=None),
               dict(doc_id=" "), dict(m=NAN), dict(m=INF), dict(m=-INF), dict(human_q=NAN), dict(human_q=INF),
               dict(dataset="d2", system="only_d2")]
    for n, defect in enumerate(defects):
        rows.append({**dict(id=f"bad{n}", dataset="d1", system="s0", doc_id="x0", m=0.5, human_q=0.5), **defect})
    folder = tmp_path_factory.mktemp("scores")
    first = pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)
    pq.write_table(first.append_column("m_empty", pa.array([None] * len(rows), pa.float64())), folder / "a.parquet")
    pq.write_table(pa.table({"id": ["e1", "e2", "e3"], "dataset": ["d3", "d3", None], "system": [1, 2, 1],
                             "doc_id": ["x9", "x9", "x9"], "m": [0.1, 0.2, 0.3],
                             "m_empty": pa.array([None] * 3, pa.float64())}), folder / "b.parquet")
    return {"path": str(folder), "rows": len(rows) + 3, "frame": pd.DataFrame(rows)}


def test_meta_accounts_for_every_row(scores, tmp_path, cli):
    out = tmp_path / "report"
    args = ["meta", "-s", scores["path"], "-o", out, "--resamples", "0", "--methods", "spearman", "--no-checklist",
            "--metrics", "m", "m_empty", "--no-progress"]
    proc = cli(args + ["--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows"] == scores["rows"] == summary["rows_in"] and adds_up(summary)
    assert summary["rows_left_out"] == {"no dataset": 3}  # None and "" in shard a, None in shard b
    where = f"{scores['path']}/a.parquet: column 'dataset', row 24"  # bad0, after the 24 clean rows
    assert summary["rows_left_out_first"] == {"no dataset": where}
    results = json.loads((out / "results.json").read_text())
    account = results["input"]
    assert account["rows_in"] == scores["rows"] and adds_up(account) and account["rows_used"] == summary["rows_used"]
    groups = {g["name"]: g for g in results["groups"]}
    assert sum(g["rows"] for g in groups.values()) == account["rows_used"]
    # rows without a system or doc_id stay at sample level; a NaN or infinite value leaves its row
    # out of that correlation only, and each table gives its n
    frame = scores["frame"]
    d1 = frame[frame["dataset"] == "d1"]
    finite = np.isfinite(d1["m"]) & np.isfinite(d1["human_q"])
    (sample,) = [c for c in groups["d1"]["correlations"] if c["level"] == "sample" and c["metric"] == "m"]
    assert sample["n"] == int(finite.sum())
    for name in ("d1", "d2", "d3"):  # a score column all null is named, not dropped in silence
        assert groups[name]["omitted"]["column m_empty"].startswith("0 finite values")
    assert account["rows_left_out_first"] == {"no dataset": where}
    line = f"3 of 39 rows left out of every group (3 no dataset); 36 used; first no dataset: {where}"
    assert line in (out / "report.md").read_text()
    assert f"  left out: {line}" in cli(args).stdout.splitlines()


def test_meta_names_a_human_column_that_one_dataset_lacks(scores, tmp_path, cli):
    frame = scores["frame"].copy()
    extra = frame[frame["dataset"] == "d1"].assign(dataset="d3", human_q=NAN)
    extra["id"] = extra["id"] + "-3"
    path = tmp_path / "s.parquet"
    both = pd.concat([frame, extra]).assign(note="a string where a score would be")
    pq.write_table(pa.Table.from_pandas(both, preserve_index=False), path)
    proc = cli(["meta", "-s", path, "-o", tmp_path / "r", "--resamples", "0", "--methods", "spearman",
                "--no-checklist", "--no-progress", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["columns_not_numeric"] == {"note": "str"}  # named, not read as scores
    groups = {g["name"]: g for g in json.loads((tmp_path / "r" / "results.json").read_text())["groups"]}
    assert groups["d3"]["humans"] == [] and "column human_q" in groups["d3"]["omitted"]
    assert groups["d3"]["rows"] == len(extra)  # the rows are counted in their group all the same


def test_meta_and_load_scores_name_a_duplicate_id_by_file_and_row(scores, tmp_path, cli):
    """An id twice in a scores file was named without its file or rows."""
    frame = scores["frame"]
    path = tmp_path / "dup.parquet"
    pq.write_table(pa.Table.from_pandas(pd.concat([frame, frame.iloc[[3]]]), preserve_index=False), path)
    proc = cli(["meta", "-s", path, "-o", tmp_path / "r", "--resamples", "0", "--no-progress", "--json"])
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"] == \
        f"metric run 'dup': id {frame['id'][3]!r} appears twice ({path} row 3, {path} row {len(frame)})"
    folder = tmp_path / "nulls"
    write_dump(folder, pa.table({"id": ["a", "b"], "m": [1.0, 2.0]}), pa.table({"id": ["c", None, None], "m": [1.0, 2.0, 3.0]}))
    with pytest.raises(InputError, match=rf"metric run 'nulls': a null id appears twice \({folder}/b\.parquet row 1, {folder}/b\.parquet row 2\)"):
        ctgscore.load_scores(str(folder))


def test_compare_accounts_for_every_row(scores, tmp_path, cli):
    args = ["compare", "-s", scores["path"], "--columns", "m", "--resamples", "50", "--tests", "bootstrap",
            "--no-progress"]
    proc = cli(args + ["--json", "-o", tmp_path / "board.json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows"] == scores["rows"] == summary["rows_in"] and adds_up(summary)
    left = summary["rows_left_out"]
    assert left == {"no dataset": 3, "no system": 2, "no doc_id": 2}
    shard_a = f"{scores['path']}/a.parquet"  # the defects follow the 24 clean rows of shard a
    first = {"no dataset": f"{shard_a}: column 'dataset', row 24", "no system": f"{shard_a}: column 'system', row 26",
             "no doc_id": f"{shard_a}: column 'doc_id', row 28"}
    assert summary["rows_left_out_first"] == first
    assert summary["rows"] == summary["rows_used"] + sum(left.values())
    board = json.loads((tmp_path / "board.json").read_text())
    assert board["rows"]["rows_left_out"] == left and adds_up(board["rows"])
    assert board["rows"]["rows_left_out_first"] == first
    # a document whose score is NaN or infinite for some system is dropped from that comparison, counted
    d1 = [c for c in board["comparisons"] if c["dataset"] == "d1"]
    assert d1 and all(c["n_units_dropped"] >= 1 for c in d1)
    # a system of one dataset only is ranked there and nowhere else
    ranked = {(r["dataset"], r["system"]) for r in board["leaderboard"]}
    assert ("d2", "only_d2") in ranked and ("d1", "only_d2") not in ranked
    assert {system for dataset, system in ranked if dataset == "d3"} == {"1", "2"}  # integer systems, as text
    md = cli(args + ["-o", tmp_path / "board.md"])
    line = "7 of 39 rows left out of every group (3 no dataset, 2 no system, 2 no doc_id)"
    assert line in (tmp_path / "board.md").read_text() and line in md.stdout


# ----- load_scores: every stored row, as stored ------------------------------------------------
def test_load_scores_returns_every_row_of_shards_that_differ(tmp_path):
    run = tmp_path / "scores" / "run"
    run.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a", "b", ""], "m": [1.0, NAN, INF], "system": ["s", None, ""],
                             "human_q": [1.0, 2.0, -INF]}), run / "x.parquet")
    pq.write_table(pa.table({"id": ["c", "d"], "m": pa.array([None, None], pa.float64()), "system": [1, 2]}),
                   run / "y.parquet")
    frame = ctgscore.load_scores(str(tmp_path / "scores"))
    assert len(frame) == 5 and sorted(frame["id"]) == ["", "a", "b", "c", "d"]
    by_id = frame.set_index("id")
    assert math.isnan(by_id.loc["c", "human_q"]) and by_id.loc["", "human_q"] == -INF  # a column one shard lacks: NaN
    assert by_id.loc[["c", "d"], "m"].isna().all() and by_id.loc["", "m"] == INF
    assert pd.isna(by_id.loc["b", "system"]) and by_id.loc["", "system"] == ""  # keys as stored


# ----- constraints report --------------------------------------------------------------------
def test_constraints_report_counts_rows_without_a_system(tmp_path, cli):
    """A null or blank system beside named systems was merged into a system called "default"."""
    constraint = json.dumps({"task": "keyword", "label": ["apple"]})
    ids = ["k1", "k2", "k3", "k4", "k5", "k6"]
    args = constraints_report_args(
        tmp_path, {"id": ids, "text": ["an apple", "pear", "apple pie", "apple", "apple x", "apples"],
                   "constraint": [constraint] * 6, "system": ["A", "A", None, "", " ", "B"]},
        {"id": ids, "codi_success": [1.0, 0.0, 1.0, NAN, 1.0, 1.0],
         "codi_toxicity": pa.array([None] * 6, pa.float64()), "error": [None] * 6})
    proc = cli(args + ["--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["rows_in"], summary["rows_used"], summary["rows_left_out"]) == (6, 3, {"no system": 3})
    where = f"{tmp_path / 'in.parquet'}: column 'system', row 2 (id 'k3')"
    assert summary["rows_left_out_first"] == {"no system": where}
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    assert results["systems"] == ["A", "B"] and results["rows"] == {k: v for k, v in summary.items() if k.startswith("rows")}
    accuracy = {r["system"]: r for r in results["results"] if r["measure"] == "accuracy"}
    assert accuracy["A"]["n_rows"] + accuracy["B"]["n_rows"] == 3 and accuracy["A"]["value"] == 0.5
    line = f"3 of 6 rows left out of every group (3 no system); 3 used; first no system: {where}"
    assert line in cli(args).stdout
    assert "3 of 6 rows left out of every group (3 no system)" in (tmp_path / "report" / "report.md").read_text()


def test_constraints_report_names_an_infinite_score(tmp_path, cli):
    """NaN is a row that could not be scored (a failure, counted); an infinite success is no score
    at all: exit 1 naming the scores row, its id and the column."""
    constraint = json.dumps({"task": "keyword", "label": ["apple"]})
    args = constraints_report_args(tmp_path, {"id": ["k1", "k2"], "text": ["apple", "pear"],
                                              "constraint": [constraint] * 2, "system": ["A", "A"]},
                                   {"id": ["k1", "k2"], "codi_success": [1.0, INF], "error": [None, None]})
    proc = cli(args + ["--json"])
    assert proc.returncode == 1
    assert "scores row 1 (id 'k2'): codi_success = inf is not 0 or 1" in json.loads(proc.stdout)["error"]


def test_constraints_report_without_any_system_is_one_system(tmp_path, cli):
    constraint = json.dumps({"task": "keyword", "label": ["apple"]})
    args = constraints_report_args(tmp_path, {"id": ["k1", "k2"], "text": ["apple", "pear"],
                                              "constraint": [constraint] * 2, "system": [None, ""]},
                                   {"id": ["k1", "k2"], "codi_success": [1.0, 0.0], "error": [None, None]})
    proc = cli(args + ["--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["rows_in"], summary["rows_used"], summary["rows_left_out"]) == (2, 2, {})
    assert json.loads((tmp_path / "report" / "results.json").read_text())["systems"] == ["default"]


# ----- compmctg ------------------------------------------------------------------------------
COMBOS = [("Positive", "Present"), ("Positive", "Past"), ("Negative", "Present"), ("Negative", "Past")]
ASPECTS = {"sentiment": ["Positive", "Negative"], "tense": ["Present", "Past"]}


def test_compmctg_accounts_for_every_scored_row(tmp_path, cli):
    """Rows of no dataset, of a dataset no --splits names, not in the dump, or of a combination on
    no side of a split vanished from the table without a word."""
    ids = [f"r{i}" for i in range(8)]
    attributes = [dict(zip(("sentiment", "tense"), COMBOS[i % 4])) for i in range(8)]
    datasets = ["toy"] * 8
    for row_id, dataset, attrs in [("n1", None, COMBOS[1]), ("n2", " ", COMBOS[1]), ("o1", "other", COMBOS[1]),
                                   ("m1", "toy", None), ("c1", "toy", ("Neutral", "Past"))]:
        ids.append(row_id)
        datasets.append(dataset)
        attributes.append(None if attrs is None else dict(zip(("sentiment", "tense"), attrs)))
    in_dump = [i for i, a in enumerate(attributes) if a is not None]
    pq.write_table(pa.table({"id": [ids[i] for i in in_dump],
                             "attributes": pa.array([attributes[i] for i in in_dump], pa.map_(pa.string(), pa.string()))}),
                   tmp_path / "dump.parquet")
    accuracy = [float(i % 2) for i in range(len(ids))]
    perplexity = [10.0 + i for i in range(len(ids))]
    accuracy[1], perplexity[0] = NAN, INF
    pq.write_table(pa.table({"id": ids, "dataset": datasets, "attribute_accuracy_sentiment": accuracy,
                             "attribute_accuracy_tense": [1.0] * len(ids), "perplexity": perplexity}),
                   tmp_path / "scores.parquet")
    as_dicts = lambda combos: [dict(zip(("sentiment", "tense"), c)) for c in combos]  # noqa: E731
    (tmp_path / "holdout.json").write_text(json.dumps({
        "signature": {"protocol": "holdout", "aspects": ASPECTS}, "aspects": ASPECTS,
        "splits": [{"seen": as_dicts(COMBOS[:3]), "unseen": as_dicts(COMBOS[3:]), "divergence": 0.5}]}))
    args = ["compmctg", "--dump", tmp_path / "dump.parquet", "--scores", tmp_path / "scores.parquet",
            "--splits", f"toy={tmp_path / 'holdout.json'}", "-o", tmp_path / "table.json"]
    proc = cli(args + ["--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_left_out"] == {"no dataset": 2, "dataset not given --splits": 1,
                                        "no attributes in the dump": 1, "combination in no split": 1}
    assert summary["rows_in"] == 13 and adds_up(summary) and summary["rows_used"] == 8
    assert summary["rows_left_out_first"]["no attributes in the dump"] == f"{tmp_path / 'scores.parquet'}: id 'm1'"
    table = json.loads((tmp_path / "table.json").read_text())
    assert table["rows"] == {k: v for k, v in summary.items() if k.startswith("rows")}
    (split,) = table["datasets"]["toy"]["protocols"][0]["per_split"]
    assert split["rows_iid"] + split["rows_comp"] == summary["rows_used"]  # the used rows are those on a side
    assert split["infinite_left_out"] == {"perplexity": 1}
    assert "5 of 13 rows left out of every group" in cli(args).stdout
    assert "5 of 13 rows left out of every group" in (tmp_path / "table.md").read_text()


# ----- splits --corpus -----------------------------------------------------------------------
def corpus_shard(rows) -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "text": ["x"] * len(rows), "sentiment": [r[1] for r in rows],
                     "tense": [r[2] for r in rows]})


CLEAN = [(f"r{i}-{k}", s, t) for i, (s, t) in enumerate([(s, t) for s in ("Pos", "Neg", "Neu")
                                                          for t in ("Past", "Present", "Future")]) for k in range(2)]


def test_splits_partitions_hold_every_corpus_row(tmp_path, cli):
    corpus = write_dump(tmp_path / "corpus", corpus_shard(CLEAN[:10]), corpus_shard(CLEAN[10:]))
    proc = cli(["splits", "--corpus", corpus, "--protocol", "holdout", "-o", tmp_path / "h.json",
                "--partition-dir", tmp_path / "parts", "--json"])
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "parts" / "manifest.json").read_text())
    assert manifest["splits"] and all(sum(s["rows"].values()) == len(CLEAN) for s in manifest["splits"])


@pytest.mark.parametrize("bad, message", [(("z1", "Pos", None), "row 1: field 'tense' is empty"),
                                          (("z1", "", "Past"), "row 1: field 'sentiment' is empty")])
def test_splits_names_the_shard_and_row_of_a_missing_aspect(tmp_path, cli, bad, message):
    corpus = write_dump(tmp_path / "corpus", corpus_shard(CLEAN), corpus_shard([("z0", "Pos", "Past"), bad]))
    proc = cli(["splits", "--corpus", corpus, "--protocol", "holdout", "-o", tmp_path / "h.json", "--json"])
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"] == f"{corpus}/b.parquet: {message}"


# ----- convert -------------------------------------------------------------------------------
def test_convert_counts_every_row_read(tmp_path, cli):
    lines = [{"uid": "r1", "generation": "fine", "system": "s1", "human_q": 1.0},
             {"uid": None, "generation": "null id", "system": "s1"},
             {"uid": "", "generation": "empty id", "system": "s1"},
             {"uid": "r1", "generation": "dup id", "system": "s1"},
             {"uid": "r5", "generation": None, "system": "s1"},
             {"uid": "r9", "generation": "int system", "system": 3},
             {"uid": "r10", "generation": "null system", "system": None},
             {"uid": "r11", "generation": "no system"}]
    text = "\n".join(json.dumps(line) for line in lines)
    text += '\n{"uid": "r6", "generation": "nan", "human_q": NaN}\n{"uid": "r7", "generation": "inf", "human_q": Infinity}'
    text += '\n{"uid": "r12", "generation": "-inf", "human_q": -Infinity}\n{"uid": "r8", "generation": "s", "human_q": "high"}'
    text += "\nnot json\n"
    (tmp_path / "in.jsonl").write_text(text)
    proc = cli(["convert", "-i", tmp_path / "in.jsonl", "--map", "text=generation", "--map", "id=uid",
                "-o", tmp_path / "out.parquet", "--report", tmp_path / "report.json", "--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_read"] == 13 == summary["rows_written"] + sum(summary["dropped"].values())
    assert summary["dropped"] == {"line is not valid JSON": 1, "no id": 2,
                                  "duplicate id (the first row with it is kept)": 1, "no text": 1}
    assert summary["examples"]["no id"] == [2, 3] and summary["examples"]["line is not valid JSON"] == [13]
    assert sum(summary["warnings"].values()) == 4  # NaN, inf, -inf, "high": kept as null, with a warning
    out = pq.read_table(tmp_path / "out.parquet").to_pandas().set_index("id")
    assert len(out) == summary["rows_written"] and out.loc[["r6", "r7", "r12", "r8"], "human_q"].isna().all()
    assert out.loc["r9", "system"] == "3" and out.loc[["r10", "r11"], "system"].isna().all()
    assert json.loads((tmp_path / "report.json").read_text())["dropped"] == summary["dropped"]


def test_convert_a_parquet_folder_whose_shards_differ(tmp_path, cli):
    folder = write_dump(tmp_path / "in",
                        pa.table({"id": ["a", "b", None], "text": ["x", "y", "z"], "system": ["s", "t", "u"],
                                  "human_q": [1.0, NAN, 2.0]}),
                        pa.table({"id": ["c", "a"], "text": ["x", "y"], "system": [1, 2]}))
    proc = cli(["convert", "-i", folder, "-o", tmp_path / "out.parquet", "--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_read"] == 5 == summary["rows_written"] + sum(summary["dropped"].values())
    assert summary["dropped"] == {"no id": 1, "duplicate id (the first row with it is kept)": 1}
    out = pq.read_table(tmp_path / "out.parquet").to_pandas()
    assert out["id"].tolist() == ["a", "b", "c"] and out["system"].tolist() == ["s", "t", "1"]
    # a row number of a folder names its shard and the row in it
    assert summary["files"] == [{"file": f"{folder}/a.parquet", "first_row": 1}, {"file": f"{folder}/b.parquet", "first_row": 4}]
    console = cli(["convert", "-i", folder, "-o", tmp_path / "out2.parquet"]).stdout
    assert f"duplicate id (the first row with it is kept) (e.g. row 5: {folder}/b.parquet row 2)" in console
    assert f"no id (e.g. row 3: {folder}/a.parquet row 3)" in console


# ----- the job and the leaderboard: one small run on the shared Ray ------------------------------
@pytest.fixture(scope="module")
def refresh(tmp_path_factory, ray_address):
    """`ctgscore leaderboard` (the scoring job, then compare) once over a dump of defective
    rows: two shards of different columns, and three bad shards (integer systems, a null id,
    an id twice), which the job skips and names."""
    from ctgscore.testing.cli import run_cli

    root = tmp_path_factory.mktemp("refresh")
    texts = [" ".join(["w"] * (3 + k + doc % 2)) for doc in range(4) for k in range(2)]
    clean = pa.table({"id": [f"c{i}" for i in range(8)], "text": texts, "system": ["sA", "sB"] * 4,
                      "doc_id": [f"d{i // 2}" for i in range(8)], "dataset": ["toy"] * 8})
    defective = DEFECTIVE  # its keys, in the clean rows' names
    for column, values in (("dataset", ["toy", "toy", None, "", "toy", "toy", " ", "toy"]),
                           ("system", ["sA", "sB", "sA", "sA", None, "", "sA", "sA"]),
                           ("doc_id", ["d0", None, "d0", "d0", "d0", "d0", "", "d0"])):
        defective = defective.set_column(defective.schema.get_field_index(column), column, pa.array(values))
    write_dump(root / "data", clean, defective, LEAN, pa.table({"id": ["i1"], "text": ["int"], "system": [7]}),
               pa.table({"id": ["n1", None], "text": ["null id", "here"]}),  # bad shards, each named
               pa.table({"id": ["u1", "u1"], "text": ["one id", "twice"]}))
    temp = tempfile.mkdtemp(prefix="ctgacc-", dir="/tmp")
    (root / "job.yaml").write_text("input: data\noutput: out\nmetrics:\n  - name: text_stats\nbatch_size: 8\n"
                                   "skip_bad_shards: true\nmax_error_rate: 1\n"
                                   f"pool: {{min_size: 1, max_size: 1, num_cpus: 0.5}}\nray: {{temp_dir: {temp}}}\n")
    proc = run_cli(["leaderboard", root / "job.yaml", "-o", root / "board", "--columns", "text_stats_words",
                    "--resamples", "50", "--trials", "50", "--no-progress", "--json"], cwd=root,
                   env={"RAY_ADDRESS": ray_address})
    shutil.rmtree(temp, ignore_errors=True)
    return {"root": root, "proc": proc, "rows": clean.num_rows + DEFECTIVE.num_rows + LEAN.num_rows}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_job_gives_every_row_back_and_names_its_bad_shard(refresh):
    proc, root = refresh["proc"], refresh["root"]
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((root / "out" / "manifest.json").read_text())
    bad = {entry["file"].rsplit("/", 1)[-1]: entry for entry in manifest["bad_shards"]}
    assert sorted(bad) == ["d.parquet", "e.parquet", "f.parquet"], manifest["bad_shards"]
    assert "'system'" in json.dumps(bad["d.parquet"]) and "null field 'id'" in json.dumps(bad["e.parquet"])
    assert "duplicate id 'u1'" in json.dumps(bad["f.parquet"])
    run = manifest["metrics"]["text_stats"]
    assert run["rows_in"] == run["rows_out"] == refresh["rows"]
    frame = ctgscore.load_scores(str(root / "out"))
    assert len(frame) == refresh["rows"]
    errors = frame.set_index("id")["error"].dropna().to_dict()
    assert set(errors) == {"a3", "a4", "a5"} and all("'text'" in e for e in errors.values())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_leaderboard_accounts_for_every_scored_row(refresh):
    proc, root = refresh["proc"], refresh["root"]
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    saved = json.loads((root / "board" / "leaderboard.json").read_text())
    rows = saved["rows"]
    assert rows["rows_in"] == refresh["rows"] and adds_up(rows)
    # no dataset: a3 (null), a4 (""), a7 (" ") and the lean shard's b1, b2 (other rows have one);
    # no system: a5 (null), a6 (""); no doc_id: a2. Used: the 8 clean rows, a1 and the empty id
    assert rows["rows_left_out"] == {"no dataset": 5, "no system": 2, "no doc_id": 1}
    assert rows["rows_used"] == 10
    assert {k: summary[k] for k in ("rows_in", "rows_used", "rows_left_out")} == \
        {k: rows[k] for k in ("rows_in", "rows_used", "rows_left_out")}


# ----- the first row of every reason, named in its part ----------------------------------------
@pytest.fixture
def two_parts(tmp_path):
    """A scores folder of two parts: a.parquet clean, b.parquet with no dataset at its row 1 and
    no system at its row 3 (other rows have both)."""
    folder = tmp_path / "two_parts"
    folder.mkdir()
    rng = np.random.default_rng(3)
    a = [("a", "d", f"x{doc}", s) for doc in range(3) for s in ("s0", "s1")]
    b = [("b", "d", "x3", "s0"), ("b", None, "x3", "s1"), ("b", "d", "x4", "s0"), ("b", "d", "x4", None),
         ("b", "d", "x4", "s1")]
    for name, rows in (("a", a), ("b", b)):
        pq.write_table(pa.table({"id": [f"{part}{n}" for n, (part, *_) in enumerate(rows)],
                                 "dataset": [r[1] for r in rows], "doc_id": [r[2] for r in rows],
                                 "system": [r[3] for r in rows], "m": rng.normal(size=len(rows)),
                                 "human_q": rng.normal(size=len(rows))}), folder / f"{name}.parquet")
    part = folder / "b.parquet"
    return {"path": folder, "first": {"no dataset": f"{part}: column 'dataset', row 1",
                                      "no system": f"{part}: column 'system', row 3"}}


def test_compare_names_the_first_row_of_every_reason_in_its_part(two_parts, tmp_path, cli):
    args = ["compare", "-s", two_parts["path"], "--columns", "m", "--resamples", "30", "--trials", "30",
            "--no-progress"]
    proc = cli(args + ["--json", "-o", tmp_path / "board.json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_left_out"] == {"no dataset": 1, "no system": 1}
    assert summary["rows_left_out_first"] == two_parts["first"]
    assert json.loads((tmp_path / "board.json").read_text())["rows"]["rows_left_out_first"] == two_parts["first"]
    first = "; ".join(f"first {reason}: {where}" for reason, where in two_parts["first"].items())
    line = f"2 of 11 rows left out of every group (1 no dataset, 1 no system); 9 used; {first}"
    proc = cli(args + ["-o", tmp_path / "board.md"])
    assert f"  left out: {line}" in proc.stdout.splitlines()
    assert line in (tmp_path / "board.md").read_text()


def test_leaderboard_names_the_first_row_of_every_reason_in_its_part(two_parts, tmp_path, cli, monkeypatch):
    from ray_jobs import score_corpus

    manifest = {"output": str(two_parts["path"]), "metrics": {"stub": {"rows_scored": 0, "rows_cached": 11}}}
    monkeypatch.setattr(score_corpus, "load_config", lambda path, overrides=None: types.SimpleNamespace())
    monkeypatch.setattr(score_corpus, "run_job", lambda config: manifest)
    monkeypatch.setattr(score_corpus, "error_rate_exceeded", lambda manifest: [])
    (tmp_path / "job.yaml").write_text("stub: true\n")
    board = tmp_path / "board"
    args = ["leaderboard", tmp_path / "job.yaml", "-o", board, "--columns", "m", "--resamples", "30",
            "--trials", "30", "--no-progress"]
    proc = cli(args)
    assert proc.returncode == 0, proc.stderr
    first = "; ".join(f"first {reason}: {where}" for reason, where in two_parts["first"].items())
    line = f"2 of 11 rows left out of every group (1 no dataset, 1 no system); 9 used; {first}"
    assert f"  left out: {line}" in proc.stdout.splitlines()
    document = json.loads((board / "leaderboard.json").read_text())
    assert document["rows"] == {"rows_in": 11, "rows_used": 9, "rows_left_out": {"no dataset": 1, "no system": 1},
                                "rows_left_out_first": two_parts["first"]}
    assert json.loads(cli(args + ["--json"]).stdout)["rows_left_out_first"] == two_parts["first"]


def test_meta_names_the_first_row_it_leaves_out(two_parts, tmp_path, cli):
    """meta names the row in its part too (its runs joined on id, the row found by its id)."""
    out = tmp_path / "report"
    args = ["meta", "-s", two_parts["path"], "-o", out, "--resamples", "0", "--methods", "spearman",
            "--no-checklist", "--metrics", "m", "--no-progress"]
    proc = cli(args + ["--json"])
    assert proc.returncode == 0, proc.stderr
    where = two_parts["first"]["no dataset"]
    assert json.loads(proc.stdout)["rows_left_out_first"] == {"no dataset": where}
    assert json.loads((out / "results.json").read_text())["input"]["rows_left_out_first"] == {"no dataset": where}
    line = f"1 of 11 rows left out of every group (1 no dataset); 10 used; first no dataset: {where}"
    assert line in (out / "report.md").read_text()
    assert f"  left out: {line}" in cli(args).stdout.splitlines()


def test_compare_systems_on_a_frame_names_the_first_row_of_every_reason(two_parts):
    from meta_eval import compare

    frame = pd.concat([pd.read_parquet(two_parts["path"] / f"{name}.parquet") for name in "ab"], ignore_index=True)
    got = compare.compare_systems(frame, ["m"], n_resamples=30, trials=30, seed=1)
    assert got.rows.left_out == {"no dataset": 1, "no system": 1}
    assert got.rows.first == {"no dataset": "the rows: column 'dataset', row 7",
                              "no system": "the rows: column 'system', row 9"}


def test_meta_names_the_row_in_the_part_of_its_metric_run(tmp_path, cli):
    """Two metric runs (r1: two parts, r2: one file) joined on id: the row is named in r1, the
    first run of those with the most rows, in its part and file order (not by id)."""
    rng = np.random.default_rng(5)
    ids = [f"z{n}" for n in range(8)]  # z5 and z7 have no dataset: z7 comes first in r1's files, z5 by id
    dataset = ["d", "d", "d", "d", "d", None, "d", None]
    base = dict(system=["s0", "s1"] * 4, doc_id=[f"x{n // 2}" for n in range(8)], human_q=rng.normal(size=8))

    def table(rows, metric):
        return pa.table({"id": [ids[k] for k in rows], "dataset": [dataset[k] for k in rows],
                         **{key: [values[k] for k in rows] for key, values in base.items()},
                         metric: rng.normal(size=len(rows))})

    (tmp_path / "scores" / "r1").mkdir(parents=True)
    (tmp_path / "scores" / "r2").mkdir()
    pq.write_table(table([0, 1, 2, 3], "m"), tmp_path / "scores" / "r1" / "a.parquet")
    pq.write_table(table([7, 5, 4, 6], "m"), tmp_path / "scores" / "r1" / "b.parquet")
    pq.write_table(table([7, 6, 5, 4, 3, 2, 1, 0], "n"), tmp_path / "scores" / "r2" / "all.parquet")
    proc = cli(["meta", "-s", tmp_path / "scores", "-o", tmp_path / "report", "--resamples", "0", "--methods",
                "spearman", "--no-checklist", "--metrics", "m", "n", "--no-progress", "--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_left_out"] == {"no dataset": 2}
    assert summary["rows_left_out_first"] == {"no dataset": f"{tmp_path / 'scores' / 'r1' / 'b.parquet'}: column 'dataset', row 0"}


def test_meta_names_a_row_of_an_id_in_two_shards_in_its_shard(tmp_path, cli):
    """Where an id repeats across shards the rows join on (id, shard): the one left out is named
    in its own shard's part, not in the other shard's row of the same id."""
    from tests.test_job_output_shards import _job_output

    out = _job_output(tmp_path)
    part = out / "ppl" / "sub" / "b" / "part-0000000000-0000000009-abc.parquet"
    for label in ("ppl", "words", "only_a"):
        for shard in ("a", "sub/b"):
            path = out / label / shard / part.name
            if path.exists():
                t = pq.read_table(path)
                ids = t["id"].to_pylist()
                dataset = [None if (i, shard) == ("r1", "sub/b") else "d" for i in ids]  # r1 is row 1 of shard a
                pq.write_table(t.append_column("dataset", pa.array(dataset, pa.string())), path)
    proc = cli(["--json", "meta", "-s", out, "-o", tmp_path / "report", "--resamples", "0", "--no-checklist",
                "--no-compare-systems", "--methods", "pearson", "--human-columns", "human_q", "--metrics", "words"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_left_out"] == {"no dataset": 1}
    assert summary["rows_left_out_first"] == {"no dataset": f"{part}: column 'dataset', row 0"}

"""attribute_accuracy over rows with attribute combinations, and the CompMCTG results table on a
small synthetic case against a by-hand computation of A_i, A_c and G."""

from __future__ import annotations

import statistics

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.registry import build_metric

COMBOS = [("Positive", "Present"), ("Positive", "Past"), ("Negative", "Present"), ("Negative", "Past")]
# rows per combination: (sentiment, tense, perplexity)
ROWS = [COMBOS[0], COMBOS[1], COMBOS[2], COMBOS[2], COMBOS[3], COMBOS[3], COMBOS[1]]


@pytest.fixture(scope="module")
def classifiers(tmp_path_factory):
    from ctgscore.testing.tiny_classifier import build_tiny_classifier

    root = tmp_path_factory.mktemp("attr")
    # zero head weights + bias: the sentiment model always says "pos", the tense model "Past"
    return {
        "sentiment": str(build_tiny_classifier(root / "sent", ["neg", "pos"], bias=[0.0, 5.0])),
        "tense": str(build_tiny_classifier(root / "tense", ["Present", "Past"], bias=[0.0, 5.0])),
    }


def _rows():
    return [{"id": f"r{i}", "text": "the happy child plays with a ball in the park",
             "attributes": [("sentiment", s), ("tense", t)]} for i, (s, t) in enumerate(ROWS)]


def test_attribute_accuracy_per_aspect_with_label_maps(classifiers):
    metric = build_metric("attribute_accuracy", {"classifiers": classifiers,
                                                 "label_maps": {"sentiment": {"Positive": "pos", "Negative": "neg"}}})
    rows = _rows() + [{"id": "none", "text": "no attributes here"},
                      {"id": "one", "text": "only tense", "attributes": {"tense": "Present"}},
                      {"id": "bad", "text": "unknown gold", "attributes": {"tense": "Future"}}]
    out = metric.score_rows(rows)
    for (sentiment, tense), result in zip(ROWS, out):
        assert result["attribute_accuracy_sentiment"] == float(sentiment == "Positive")
        assert result["attribute_accuracy_tense"] == float(tense == "Past")
        assert result["attribute_accuracy"] == (float(sentiment == "Positive") + float(tense == "Past")) / 2
    assert out[7]["skipped"] == "no attributes" and out[7]["error"] is None
    assert out[8]["attribute_accuracy_sentiment"] is None and out[8]["attribute_accuracy"] == 0.0
    assert "Future" in out[9]["error"]
    single = build_metric("attribute_accuracy", {"classifiers": {"tense": classifiers["tense"]}})
    assert single.score_rows([{"id": "a", "text": "x y", "attribute": "Past"}])[0]["attribute_accuracy"] == 1.0
    other = build_metric("attribute_accuracy", {"classifiers": {"tense": classifiers["sentiment"]}})
    assert other.signature().digest != single.signature().digest


def _split(seen, protocol):
    unseen = [c for c in COMBOS if c not in seen]
    as_dicts = lambda combos: [{"sentiment": s, "tense": t} for s, t in combos]  # noqa: E731
    return {"seen": as_dicts(seen), "unseen": as_dicts(unseen), "divergence": 0.5}


def _splits_json(protocol, seens):
    return {"signature": {"protocol": protocol, "aspects": {"sentiment": ["Positive", "Negative"], "tense": ["Present", "Past"]}},
            "aspects": {"sentiment": ["Positive", "Negative"], "tense": ["Present", "Past"]},
            "splits": [_split(seen, protocol) for seen in seens]}


def test_results_table_equals_a_by_hand_computation(classifiers, tmp_path):
    from meta_eval.compmctg import markdown_section, per_combination, results_table, scored_frame

    metric = build_metric("attribute_accuracy", {"classifiers": classifiers,
                                                 "label_maps": {"sentiment": {"Positive": "pos", "Negative": "neg"}}})
    rows = _rows()
    out = metric.score_rows(rows)
    perplexity = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]
    scores = pd.DataFrame({"id": [r["id"] for r in rows], "dataset": "toy", "perplexity": perplexity,
                           **{c: [o[c] for o in out] for c in metric.output_columns}})
    dump = pa.table({"id": [r["id"] for r in rows],
                     "attributes": pa.array([r["attributes"] for r in rows], type=pa.map_(pa.string(), pa.string()))})
    pq.write_table(dump, tmp_path / "dump.parquet")
    frame = scored_frame(str(tmp_path / "dump.parquet"), scores)

    holdout = [[COMBOS[0], COMBOS[1], COMBOS[2]], [COMBOS[0], COMBOS[1], COMBOS[3]]]
    table = results_table(frame, [("toy", _splits_json("original", [COMBOS])), ("toy", _splits_json("holdout", holdout)),
                                  ("toy", _splits_json("fewshot", [[COMBOS[0], COMBOS[3]]]))])

    # by hand: sentiment is right on Positive rows, tense on Past rows
    right = {"sentiment": [s == "Positive" for s, _ in ROWS], "tense": [t == "Past" for _, t in ROWS]}

    def accuracy(combos):
        idx = [i for i, c in enumerate(ROWS) if c in combos]
        return statistics.mean(statistics.mean(float(right[a][i]) for i in idx) for a in ("sentiment", "tense"))

    def ppl(combos):
        return statistics.mean(perplexity[i] for i, c in enumerate(ROWS) if c in combos)

    data = table["datasets"]["toy"]
    original, held = data["protocols"]
    assert original["A_iid"] == pytest.approx(accuracy(COMBOS)) and original["A_comp"] is None
    a_i = [accuracy(seen) for seen in holdout]
    a_c = [accuracy([c for c in COMBOS if c not in seen]) for seen in holdout]
    for split, i, c in zip(held["per_split"], a_i, a_c):
        assert split["A_iid"] == pytest.approx(i) and split["A_comp"] == pytest.approx(c)
        assert split["gap"] == pytest.approx((i - c) / i)
    assert held["A_iid"] == pytest.approx(statistics.mean(a_i)) and held["A_comp"] == pytest.approx(statistics.mean(a_c))
    assert held["gap"] == pytest.approx((statistics.mean(a_i) - statistics.mean(a_c)) / statistics.mean(a_i))
    p_i = statistics.mean(ppl(seen) for seen in holdout)
    p_c = statistics.mean(ppl([c for c in COMBOS if c not in seen]) for seen in holdout)
    assert held["P_iid"] == pytest.approx(p_i) and held["P_comp"] == pytest.approx(p_c)
    average = data["average"]
    assert average["A_avg"] == pytest.approx(statistics.mean([accuracy(COMBOS), held["A_iid"], held["A_comp"]]))
    assert average["G_avg"] == pytest.approx(held["gap"])  # Few-Shot stays out of the averages
    assert average["P_avg"] == pytest.approx(statistics.mean([ppl(COMBOS), p_i, p_c]))
    few = data["fewshot"][0]
    assert few["A_comp"] == pytest.approx(accuracy([COMBOS[1], COMBOS[2]]))
    combos = {tuple(c["combination"].values()): c["accuracy"] for c in per_combination(frame, ["sentiment", "tense"])}
    assert combos[("Positive", "Past")] == 1.0 and combos[("Negative", "Present")] == 0.0
    assert "### toy" in markdown_section(table) and "fewshot" in markdown_section(table)


def test_cli_writes_the_table(classifiers, tmp_path):
    import json

    from ctgscore.cli.main import main

    metric = build_metric("attribute_accuracy", {"classifiers": classifiers,
                                                 "label_maps": {"sentiment": {"Positive": "pos", "Negative": "neg"}}})
    rows = [dict(r, dataset="toy") for r in _rows()]
    table = metric.output_table(rows)
    pq.write_table(table, tmp_path / "scores.parquet")
    dump = pa.table({"id": [r["id"] for r in rows],
                     "attributes": pa.array([r["attributes"] for r in rows], type=pa.map_(pa.string(), pa.string()))})
    pq.write_table(dump, tmp_path / "dump.parquet")
    holdout = [[COMBOS[0], COMBOS[1], COMBOS[2]]]
    (tmp_path / "holdout.json").write_text(json.dumps(_splits_json("holdout", holdout)))
    (tmp_path / "few.json").write_text(json.dumps(_splits_json("fewshot", [[COMBOS[0], COMBOS[3]]])))
    code = main(["compmctg", "--dump", str(tmp_path / "dump.parquet"), "--scores", str(tmp_path / "scores.parquet"),
                 "--splits", f"toy={tmp_path / 'holdout.json'}", "--splits", f"toy={tmp_path / 'few.json'}",
                 "-o", str(tmp_path / "table.json")])
    assert code == 0
    out = json.loads((tmp_path / "table.json").read_text())["datasets"]["toy"]
    assert [p["protocol"] for p in out["protocols"]] == ["holdout"] and out["fewshot"][0]["protocol"] == "fewshot"
    right = [float(s == "Positive") + float(t == "Past") for s, t in ROWS]
    seen_rows = [i for i, c in enumerate(ROWS) if c in holdout[0]]
    assert out["protocols"][0]["A_iid"] == pytest.approx(statistics.mean(right[i] / 2 for i in seen_rows))
    assert (tmp_path / "table.md").read_text().startswith("## CompMCTG results")
    per_combination = {tuple(c["combination"].values()): c["accuracy"] for c in out["per_combination"]}
    assert per_combination[("Positive", "Past")] == 1.0 and per_combination[("Negative", "Present")] == 0.0

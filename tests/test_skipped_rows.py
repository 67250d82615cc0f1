"""Rows a metric does not apply to are skipped, not failed: the rule in `RowMetric`, the
metric listing, and a mixed dump (SummEval and CTRLEval rows interleaved in two shards) scored
by BARTScore and CTRLEval in one job."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.registry import build_metric, describe_metric


def test_rule_skips_rows_without_needed_columns_and_keeps_real_failures():
    metric = build_metric("text_stats")
    assert metric.applies_columns() == ()  # reads only text: applies to every row
    codi = describe_metric("codi")
    assert "constraint" in codi.needs
    rows = [
        {"id": "a", "text": "fine text", "constraint": None},
        {"id": "b", "text": "", "constraint": '{"task": "length"}'},
    ]
    from scoring.codi.metric import CodiMetric

    out = CodiMetric().score_rows(rows)
    assert out[0]["skipped"] == "no constraint" and out[0]["error"] is None and out[0]["codi_success"] is None
    assert out[1]["skipped"] is None and out[1]["error"] is not None  # applicable: a failure stays an error


def test_bartscore_and_ctrleval_declare_what_they_need(tiny_models):
    bart = build_metric("bartscore", {"model": tiny_models["bart"], "directions": ["s_h", "h_r"]})
    assert bart.applies_columns() == ("source", "references")
    assert bart.score_needs() == {"bartscore_s_h": ("source",), "bartscore_h_r": ("references",)}
    row = {"id": "x", "text": "a summary .", "source": None, "references": []}
    assert bart.score_rows([row])[0]["skipped"] == "s_h: no source; h_r: no references"  # no score at all
    row.update(source="   ", references=["a reference ."])  # present but blank: an error, not a skip
    result = bart.score_rows([row])[0]
    assert result["skipped"] is None and result["error"] == "empty field 'source'"
    ctrl = build_metric("ctrleval", {"model": tiny_models["pegasus"], "iwf": tiny_models["iwf"], "aspects": ["coherence", "consistency"]})
    assert ctrl.applies_columns() == ("prefix",)
    assert ctrl.score_needs() == {"ctrleval_coherence": (), "ctrleval_consistency": ("prefix",)}
    info = describe_metric("bartscore")
    assert "source" in info.needs and "references" in info.needs
    assert info.columns_by_score["s_h"] == ["text", "source"] and info.columns_by_score["f"] == ["text", "references"]
    assert describe_metric("ctrleval").columns_by_score == {
        "coherence": ["text"], "consistency": ["text", "prefix"], "relevance": ["text", "attribute"]}


@pytest.mark.parametrize("references", [None, []])
def test_a_sourced_row_without_references_gets_its_s_h_score(tiny_models, references):
    """Each direction applies on its own: s->h needs the source only, so a row without
    references still gets it, equal to what `directions: [s_h]` alone gives, and `skipped`
    names only the directions it lacked; the two halves (prepare, score_prepared) agree."""
    both = build_metric("bartscore", {"model": tiny_models["bart"], "directions": ["s_h", "r_h", "h_r", "f"]})
    alone = build_metric("bartscore", {"model": tiny_models["bart"], "directions": ["s_h"]})
    rows = [{"id": "a", "text": "the cat sat on the mat .", "source": "a cat sat on a mat today .", "references": references},
            {"id": "b", "text": "the cat sat on the mat .", "source": None, "references": ["a cat was on the mat ."]},
            {"id": "c", "text": "the cat sat on the mat .", "source": "a cat sat on a mat today .",
             "references": ["a cat was on the mat ."]}]
    expected = alone.score_rows([rows[0]])[0]["bartscore_s_h"]
    got = both.score_rows(rows)
    assert got[0]["bartscore_s_h"] == expected and got[0]["error"] is None
    assert (got[0]["bartscore_r_h"], got[0]["bartscore_h_r"], got[0]["bartscore_f"]) == (None, None, None)
    assert got[0]["skipped"] == "r_h, h_r, f: no references"
    assert got[1]["bartscore_s_h"] is None and got[1]["skipped"] == "s_h: no source"
    assert got[1]["bartscore_r_h"] == got[2]["bartscore_r_h"] and got[1]["bartscore_f"] == got[2]["bartscore_f"]
    assert got[2]["skipped"] is None and got[2]["bartscore_s_h"] == expected
    table, reasons = both.prepare_rows(rows)
    assert reasons == [None, None, None]
    halves = both.score_prepared_rows(table)
    for whole, half in zip(got, halves):
        assert {k: half[k] for k in whole} == whole


def test_a_row_without_a_prefix_gets_its_coherence_score(tiny_models):
    """CTRLEval per aspect: coherence reads the text alone, so a row without a prefix gets it
    (equal to `aspects: [coherence]` alone); consistency is left out and named."""
    params = {"model": tiny_models["pegasus"], "iwf": tiny_models["iwf"]}
    both = build_metric("ctrleval", {**params, "aspects": ["coherence", "consistency"]})
    alone = build_metric("ctrleval", {**params, "aspects": ["coherence"]})
    text = "The food was good. I liked it a lot."
    rows = [{"id": "a", "text": text, "prefix": None}, {"id": "b", "text": text, "prefix": "The food"}]
    got = both.score_rows(rows)
    expected = alone.score_rows(rows[:1])[0]["ctrleval_coherence"]
    assert got[0]["ctrleval_coherence"] == expected and got[0]["ctrleval_consistency"] is None
    assert got[0]["skipped"] == "consistency: no prefix" and got[0]["error"] is None
    assert got[1]["skipped"] is None and got[1]["ctrleval_consistency"] is not None
    table, _ = both.prepare_rows(rows)
    assert both.score_prepared_rows(table)[0]["ctrleval_coherence"] == expected


def _mixed_shards(sample_corpus, folder):
    """Two shards, each interleaving SummEval and CTRLEval rows; one CTRLEval row of the first
    shard has undecodable text bytes."""
    summ = pq.read_table(sample_corpus / "summeval-00000.parquet").slice(0, 8).to_pylist()
    ctrl = pq.read_table(sample_corpus / "ctrleval_senti-00000.parquet").slice(0, 8).to_pylist()
    schema = pq.read_schema(sample_corpus / "summeval-00000.parquet")
    folder.mkdir()
    for shard in range(2):
        rows = []
        for i in range(4):
            rows += [summ[shard * 4 + i], ctrl[shard * 4 + i]]
        rows = [{k: row.get(k) for k in schema.names} for row in rows]
        table = pa.Table.from_pylist(rows, schema=schema)
        if shard == 0:
            texts = [row["text"].encode() for row in rows]
            texts[3] = b"Once upon a time caf\xe9 \xff"
            table = table.set_column(schema.get_field_index("text"), "text", pa.array(texts).view(pa.string()))
        pq.write_table(table, folder / f"mixed-{shard}.parquet")
    return summ, ctrl


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mixed_dump_scores_every_applicable_row_and_skips_the_rest(ray_local, tiny_models, sample_corpus, tmp_path):
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import error_rate_exceeded, run_job, summary_line
    from tests.job_support import shard_rows

    _mixed_shards(sample_corpus, tmp_path / "in")
    metrics = [
        {"name": "bartscore", "params": {"model": tiny_models["bart"], "directions": ["s_h", "h_r"]}},
        {"name": "ctrleval", "params": {"model": tiny_models["pegasus"], "iwf": tiny_models["iwf"],
                                         "aspects": ["coherence", "consistency"]}},
    ]
    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "metrics": metrics,
                           "batch_size": 8, "token_budget": 4096, "progress": False,
                           "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}})
    manifest = run_job(config)
    assert error_rate_exceeded(manifest) == []  # exit 0 under the default max_error_rate
    bart, ctrl = manifest["metrics"]["bartscore"], manifest["metrics"]["ctrleval"]
    assert (bart["rows_out"], bart["rows_skipped"], bart["rows_error"]) == (16, 8, 0)
    # CTRLEval coherence reads the text alone: the SummEval rows get it, consistency left out
    assert (ctrl["rows_out"], ctrl["rows_skipped"], ctrl["rows_partial"], ctrl["rows_error"]) == (16, 0, 8, 1)
    assert bart["skip_reasons"] == {"s_h: no source; h_r: no references": 8}
    assert ctrl["skip_reasons"] == {"consistency: no prefix": 8}
    line = summary_line(manifest)
    assert "8 skipped (8 x 's_h: no source; h_r: no references')" in line
    assert "8 with some scores left out (8 x 'consistency: no prefix')" in line
    for shard in ("mixed-0.parquet", "mixed-1.parquet"):
        for label, column, wanted in (("bartscore", "bartscore_s_h", "summeval"), ("ctrleval", "ctrleval_consistency", "ctrleval-senti")):
            for row in shard_rows(tmp_path / "out" / label, shard):
                if row["dataset"] != wanted:
                    assert row["skipped"] in ("s_h: no source; h_r: no references", "consistency: no prefix")
                    assert row["error"] is None and row[column] is None
                    if label == "ctrleval":
                        assert row["ctrleval_coherence"] is not None
                elif row["error"] is None:
                    assert row["skipped"] is None and row[column] is not None
                else:  # the undecodable text of an applicable row stays an error
                    assert shard == "mixed-0.parquet" and row["error"] == "text is not valid UTF-8"
    import ctgscore

    frame = ctgscore.load_scores(str(tmp_path / "out"))
    assert frame["skipped"].notna().sum() == 16 and frame["error"].notna().sum() == 1
    # a re-run reuses every part and still counts the skipped rows
    again = run_job(config)
    assert again["metrics"]["bartscore"]["rows_scored"] == 0 and again["metrics"]["bartscore"]["rows_skipped"] == 8
    assert again["metrics"]["ctrleval"]["rows_scored"] == 0 and again["metrics"]["ctrleval"]["rows_skipped"] == 0
    # the count came from the parts' footers, which agree with the manifest's part records
    assert again["metrics"]["bartscore"]["footers_read"] == again["metrics"]["bartscore"]["parts_kept"]
    assert "parts_not_reused" not in again["metrics"]["bartscore"]


def test_parts_from_before_skipped_rows_are_scored_again_once():
    from ray_jobs import incremental

    meta = incremental.part_metadata("a.parquet", "e1", 100, "sig", "d1", 0, 10, errors=4, skipped=3)
    assert incremental.part_is_complete((10, meta), "e1", 100, "d1", 0, 10) and incremental.footer_skipped((10, meta)) == 3
    old = {k: v for k, v in meta.items() if not k.endswith("rows_skipped")}  # written before the rule: skips were errors
    assert not incremental.part_is_complete((10, old), "e1", 100, "d1", 0, 10)

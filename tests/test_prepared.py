"""The two-stage protocol of model metrics (`RowMetric.prepare` -> `score_prepared`): the id
columns it hands over, its results against the scorers' own text API (an independent
grouping of the same engine calls), bisection of bad rows, and the Ray job's CPU stage."""

from __future__ import annotations

import json
import statistics

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.bartscore import BARTScoreMetric
from scoring.perplexity import PerplexityMetric

IDS = pa.list_(pa.int32())


@pytest.fixture(scope="module")
def summeval_rows(sample_corpus):
    rows = pq.read_table(sample_corpus / "summeval-00000.parquet").to_pylist()[:8]
    rows[1]["references"] = list(rows[1]["references"]) + ["A second, shorter reference.", "And a third one here."]
    rows[3]["references"] = ["Only one reference."]
    rows[5]["source"] = rows[4]["source"]  # two rows of one document share an encoder pass
    return rows


@pytest.fixture(scope="module")
def bartscore(tiny_models):
    return BARTScoreMetric(model=tiny_models["bart"], token_budget=1500)


def test_prepare_hands_over_int32_id_columns(bartscore, tiny_models, summeval_rows):
    table = bartscore.prepare(summeval_rows)
    assert table.num_rows == len(summeval_rows)
    for group in ("s_h", "r_h", "h_r"):
        assert table.schema.field(f"{group}_source_ids").type == pa.list_(IDS)
        assert table.schema.field(f"{group}_target_ids").type == pa.list_(IDS)
    assert table.schema.field("truncated").type == pa.bool_()
    # one pair per row for s->h, one per reference for r->h and h->r (ragged references)
    assert [len(v) for v in table.column("s_h_source_ids").to_pylist()] == [1] * len(summeval_rows)
    assert [len(v) for v in table.column("r_h_source_ids").to_pylist()] == [len(r["references"]) for r in summeval_rows]
    tokenizer = bartscore.scorer.tokenizer
    assert table.column("h_r_target_ids")[1][-1].as_py() == tokenizer("And a third one here.").input_ids
    perplexity = PerplexityMetric(model=tiny_models["gpt2"], min_words=3)
    prepared = perplexity.prepare(summeval_rows)
    assert prepared.schema.field("text_ids").type == IDS
    first = prepared.column("text_ids")[0].as_py()
    assert first == [perplexity.scorer.start_id] + tokenizer_ids(perplexity, summeval_rows[0]["text"])


def tokenizer_ids(metric, text):
    return metric.scorer.tokenizer(text, add_special_tokens=False).input_ids


def test_prepared_bartscore_equals_the_text_api(bartscore, summeval_rows):
    """score_prepared(prepare(rows)) == the BARTScorer text API (which groups pairs by source
    text), exactly: the same engine calls in the same order."""
    scorer = bartscore.scorer
    results = bartscore.score_prepared(bartscore.prepare(summeval_rows))
    texts = [r["text"] for r in summeval_rows]
    s_h = scorer.score([r["source"] for r in summeval_rows], texts)
    flat_refs = [ref for r in summeval_rows for ref in r["references"]]
    owners = [i for i, r in enumerate(summeval_rows) for _ in r["references"]]
    r_h_flat = scorer.score(flat_refs, [texts[i] for i in owners])
    h_r = scorer.multi_ref_score(texts, [r["references"] for r in summeval_rows], agg="mean")
    for i, result in enumerate(results):
        precision = [value for value, owner in zip(r_h_flat, owners) if owner == i]
        assert result["bartscore_s_h"] == s_h[i]
        assert result["bartscore_r_h"] == statistics.fmean(precision)
        assert result["bartscore_h_r"] == h_r[i]
    # a table sliced out of a larger one (the job hands chunks over) gives the same results
    table = bartscore.prepare(summeval_rows)
    assert bartscore.score_prepared(table.slice(2, 3)) == bartscore.score_prepared(bartscore.prepare(summeval_rows[2:5]))


@pytest.mark.parametrize("side", ["decoder", "encoder"])
def test_prepared_prompt_ensembles_equal_the_text_api(tiny_models, summeval_rows, side):
    metric = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"], prompts=["Such as", "In other words"],
                             prompt_side=side, token_budget=1500)
    rows = summeval_rows[:5]
    got = [r["bartscore_s_h"] for r in metric.score_prepared(metric.prepare(rows))]
    want = metric.scorer.score_prompted([r["source"] for r in rows], [r["text"] for r in rows], metric.prompts, side=side)
    assert got == want


def test_truncation_flags_survive_the_stage_boundary(tiny_models, summeval_rows):
    metric = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"], max_length=24)
    rows = [dict(summeval_rows[0]), {**summeval_rows[1], "source": "Short.", "text": "Also short."}]
    table = metric.prepare(rows)
    assert table.column("truncated").to_pylist() == [True, False]
    assert max(len(ids) for ids in table.column("s_h_source_ids")[0].as_py()) == 24
    results = metric.score_rows(rows)
    assert results[0]["warning"] == "truncated to max_length=24 tokens" and results[1]["warning"] is None


def test_bad_and_skipped_rows_through_both_halves(bartscore, tiny_models, summeval_rows, monkeypatch):
    """prepare_rows + score_prepared_rows give what score_rows gives: a row that fails in
    scoring is bisected into its own error, its neighbours are scored."""
    rows = [dict(r) for r in summeval_rows[:6]]
    poison = bartscore.scorer.tokenizer(rows[2]["text"]).input_ids
    original = type(bartscore.scorer).pair_scores

    def failing(self, sources, targets):
        if any(targets.values[a:b].tolist() == poison for a, b in zip(targets.offsets[:-1], targets.offsets[1:])):
            raise ValueError("poisoned target")
        return original(self, sources, targets)

    monkeypatch.setattr(type(bartscore.scorer), "pair_scores", failing)
    table, reasons = bartscore.prepare_rows(rows)
    assert reasons == [None] * len(rows)
    staged = bartscore.score_prepared_rows(table)
    direct = bartscore.score_rows(rows)
    assert staged == direct
    assert staged[2]["error"] == "ValueError: poisoned target" and staged[2]["bartscore_s_h"] is None
    assert all(r["error"] is None and r["bartscore_f"] is not None for i, r in enumerate(staged) if i != 2)
    # perplexity: rows under min_words are not scored (a warning), the others are
    perplexity = PerplexityMetric(model=tiny_models["gpt2"], min_words=3)
    short = [{"text": "Two words"}, {"text": rows[0]["text"]}]
    table, _ = perplexity.prepare_rows(short)
    staged = perplexity.score_prepared_rows(table)
    assert staged == perplexity.score_rows(short)
    assert staged[0]["perplexity"] is None and "min_words=3" in staged[0]["warning"] and staged[1]["perplexity"] > 1


def test_prepare_needs_no_weights(tiny_models, summeval_rows, bartscore):
    """The CPU stage builds metrics without their model: same ids, no weights loaded."""
    from scoring.models import without_weights

    with without_weights():
        light = BARTScoreMetric(model=tiny_models["bart"], token_budget=1500)
        light_ppl = PerplexityMetric(model=tiny_models["gpt2"])
    assert light.scorer.model is None and light_ppl.scorer.model is None
    assert light.prepare(summeval_rows).equals(bartscore.prepare(summeval_rows))
    assert light_ppl.scorer.max_length == PerplexityMetric(model=tiny_models["gpt2"]).scorer.max_length


# ----- the job's CPU stage ------------------------------------------------------------------
def _job(tmp_path, tiny_models, **extra):
    from ray_jobs.config import parse_config

    return parse_config({
        "input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "batch_size": 4, "part_rows": 10,
        "progress": False, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
        "metrics": [{"name": "bartscore", "params": {"model": tiny_models["bart"], "token_budget": 1500}},
                    {"name": "perplexity", "params": {"model": tiny_models["gpt2"], "min_words": 4}},
                    {"name": "text_stats"}],
        **extra,
    })


def _old_path_rows(metric, rows, part_rows, batch_size):
    """What the scoring actor wrote before the CPU stage: per unit, `score_rows` on chunks of
    `batch_size` of the rows left after the precheck."""
    results = []
    for start in range(0, len(rows), part_rows):
        unit = rows[start : start + part_rows]
        todo = [i for i, row in enumerate(unit) if metric.precheck(row, None) is None]
        out = [metric.precheck(row, None) for row in unit]
        for begin in range(0, len(todo), batch_size):
            chunk = todo[begin : begin + batch_size]
            for index, result in zip(chunk, metric.score_rows([unit[i] for i in chunk])):
                out[index] = result
        results += out
    return results


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_job_with_the_cpu_stage_writes_the_same_parts(ray_local, tiny_models, sample_corpus, tmp_path):
    from ray_jobs.job import prepare
    from ray_jobs.job import read as read_stage
    from ray_jobs.job.metrics import build_metric_for, metric_params
    from ray_jobs.job.rows import read_prepared
    from ray_jobs.score_corpus import run_job
    from tests.job_support import shard_rows

    rows = pq.read_table(sample_corpus / "summeval-00000.parquet").to_pylist()[:24]
    rows[1]["text"] = None  # invalid
    rows[2]["references"] = ["fine", " "]  # invalid for BARTScore (blank reference)
    rows[3]["references"] = []  # no references: BARTScore's s->h only
    rows[4]["text"] = "Three short words"  # under min_words for perplexity
    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in" / "summeval.parquet")
    config = _job(tmp_path, tiny_models)
    first = run_job(config)
    assert first["metrics"]["bartscore"]["rows_scored"] == 24

    for spec in config.metrics[:2]:
        metric = build_metric_for(spec, metric_params(config, spec))
        got = shard_rows(tmp_path / "out" / spec.label, "summeval.parquet")
        want = _old_path_rows(metric, rows, 10, 4)
        assert [r["id"] for r in got] == [r["id"] for r in rows]
        for have, expected, row in zip(got, want, rows):
            for column in (*metric.output_columns, "error", "warning", "skipped"):
                assert have[column] == expected[column], (spec.label, row["id"], column)
            assert have["row_key"] == metric.row_key(row)
    bart_rows = shard_rows(tmp_path / "out" / "bartscore", "summeval.parquet")
    assert bart_rows[1]["error"] == "null field 'text'" and bart_rows[3]["skipped"] == "r_h, h_r, f: no references"
    assert bart_rows[3]["bartscore_s_h"] is not None and bart_rows[3]["bartscore_r_h"] is None
    assert bart_rows[2]["error"] == "empty or null reference in 'references'"

    # the stage boundary: read_unit's payload in, int32 id columns out
    from ray_jobs.config import S3Config
    from ray_jobs.job.metrics import resolve_metric

    info = resolve_metric(config, config.metrics[0])
    unit = {"uri": str(tmp_path / "in" / "summeval.parquet"), "rel": "summeval.parquet", "etag": "e", "size": 1,
            "version": "v", "start": 0, "stop": 10, "labels": [info.spec.label], "previous": {},
            "columns": ["id", "source", "text", "references"]}
    read = read_stage.read_unit(pa.table({read_stage.UNIT: [json.dumps(unit)]}), str(tmp_path / "in"), S3Config())
    out = prepare.prepare_unit(read, info, str(tmp_path / "out"), S3Config(), [])
    ids, meta = read_prepared(out.column(prepare.prepared_column(info.spec.label))[0].as_py())
    assert ids.schema.field("s_h_source_ids").type == pa.list_(IDS)
    assert ids.schema.field("h_r_target_ids").type == pa.list_(IDS)
    assert meta["rows"] == [0, 3, 4, 5, 6, 7, 8, 9] and sorted(meta["settled"]) == ["1", "2"]  # row 3: s->h only
    assert len(meta["keys"]) == 10

    # incremental: the CPU stage finds unchanged rows in the row cache, only the changed row is scored
    rows[6]["text"] = rows[6]["text"] + " And one more sentence."
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in" / "summeval.parquet")
    again = run_job(config)
    # every earlier result without an error is reused except the changed row's (rows 1-2 never had scores;
    # row 3's s->h comes from the cache with what it lacked)
    assert again["metrics"]["bartscore"]["rows_cached"] == 24 - 2 - 1
    assert shard_rows(tmp_path / "out" / "bartscore", "summeval.parquet")[3] == bart_rows[3]
    second = shard_rows(tmp_path / "out" / "bartscore", "summeval.parquet")
    assert second[7] == bart_rows[7] and second[6]["bartscore_s_h"] != bart_rows[6]["bartscore_s_h"]

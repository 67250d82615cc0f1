"""CTRLEval's two halves (`CTRLEvalMetric.prepare` -> `score_prepared`): the id columns at the
stage boundary, its numbers against a re-derivation of the one-call-per-aspect text path
(`encode_texts` + `Seq2SeqLikelihood.mean_nll`, bit for bit), bad rows, table slices, the
weightless CPU-stage build, and the Ray job's CPU stage."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.ctrleval import MASK, CTRLEvalMetric, masked_source, nisf_weights, relevance_from_likelihoods
from scoring.sentences import split_sentences
from scoring.text_encoding import encode_texts

IDS = pa.list_(pa.int32())
ASPECTS = ("coherence", "consistency", "relevance")


def sample_rows(sample_corpus, task: str, n: int = 6) -> list[dict]:
    name = "ctrleval_senti" if task == "sentiment" else "ctrleval_topic"
    return pq.read_table(sample_corpus / f"{name}-00000.parquet").to_pylist()[::7][:n]


@pytest.fixture(scope="module", params=["sentiment", "topic"])
def task(request):
    return request.param


@pytest.fixture(scope="module")
def metric(tiny_models, task):
    return CTRLEvalMetric(model=tiny_models["pegasus"], iwf=tiny_models["iwf"], task=task, token_budget=900)


@pytest.fixture(scope="module")
def rows(sample_corpus, task):
    return sample_rows(sample_corpus, task)


def sequences(column) -> list[list[list[int]]]:
    return column.to_pylist()


def test_prepare_hands_over_int32_id_columns(metric, rows):
    scorer = metric.scorer
    table = metric.prepare(rows)
    assert table.num_rows == len(rows)
    for aspect in ("coherence", "consistency"):
        assert table.schema.field(f"{aspect}_source_ids").type == pa.list_(IDS)
        assert table.schema.field(f"{aspect}_target_ids").type == pa.list_(IDS)
        assert table.schema.field(f"{aspect}_weights").type == pa.list_(pa.float64())
    assert table.schema.field("relevance_source_ids").type == pa.list_(IDS)
    assert table.schema.field("relevance_label").type == pa.int32()
    assert table.schema.field("truncated").type == pa.bool_()
    assert "relevance_target_ids" not in table.column_names  # the label words stay with the metric

    def ids(texts, eos):
        return [e.ids for e in encode_texts(scorer.tokenizer, texts, scorer.max_length, special_tokens=eos, style="slow")]

    for i, row in enumerate(rows):
        sentences = split_sentences(row["text"])
        coherence_targets = sequences(table.column("coherence_target_ids"))[i]
        assert coherence_targets == ids(sentences, eos=True)
        assert sequences(table.column("coherence_source_ids"))[i] == ids([masked_source(sentences, j) for j in range(len(sentences))], eos=True)
        isf = [max(scorer.iwf[t] for t in target) for target in coherence_targets]
        assert table.column("coherence_weights")[i].as_py() == nisf_weights(isf)
        remainder = row["text"][len(row["prefix"]):]
        consistency_targets = sequences(table.column("consistency_target_ids"))[i]
        assert consistency_targets == ids([remainder, row["prefix"]], eos=False)
        assert sequences(table.column("consistency_source_ids"))[i] == ids([f"{row['prefix']} {MASK}", f"{MASK} {remainder}"], eos=True)
        assert table.column("consistency_weights")[i].as_py() == nisf_weights([max(scorer.iwf[t] for t in target) for target in consistency_targets])
        filled = [p.replace("<gen_result>", row["text"]).replace("<mask_token>", MASK) for p in scorer.prompts]
        assert sequences(table.column("relevance_source_ids"))[i] == ids(filled, eos=True)
        assert scorer.verbalizer.labels[table.column("relevance_label")[i].as_py()] == row["attribute"]
    assert table.column("truncated").to_pylist() == [False] * len(rows)


def text_path(scorer, rows) -> dict[str, list[float]]:
    """The numbers of the one-engine-call-per-aspect text path, written out from
    `encode_texts` and `Seq2SeqLikelihood.mean_nll` on nested id lists."""
    engine, iwf = scorer.engine, scorer.iwf
    engine.max_batch_items = None

    def encode(texts, eos):
        return [e.ids for e in encode_texts(scorer.tokenizer, texts, scorer.max_length, special_tokens=eos, style=scorer.tokenization)]

    def weighted(sources, targets, owners, target_eos):
        target_ids = encode(targets, target_eos)
        nll = engine.mean_nll(encode(sources, True), [[t] for t in target_ids])
        per_row: list[list[tuple[float, float]]] = [[] for _ in rows]
        for owner, row_nll, ids in zip(owners, nll, target_ids):
            per_row[owner].append((float(max(iwf[t] for t in ids)), -row_nll[0]))
        return [sum(w * s for w, (_, s) in zip(nisf_weights([isf for isf, _ in pairs]), pairs)) for pairs in per_row]

    sources, targets, owners = [], [], []
    for i, row in enumerate(rows):
        sentences = split_sentences(row["text"])
        sources += [masked_source(sentences, j) for j in range(len(sentences))]
        targets += sentences
        owners += [i] * len(sentences)
    coherence = weighted(sources, targets, owners, True)
    sources, targets = [], []
    for row in rows:
        remainder = row["text"][len(row["prefix"]):]
        sources += [f"{row['prefix']} {MASK}", f"{MASK} {remainder}"]
        targets += [remainder, row["prefix"]]
    consistency = weighted(sources, targets, [i for i in range(len(rows)) for _ in range(2)], False)
    words = encode([w for verbaliser_row in scorer.verbalizer.rows for w in verbaliser_row], False)
    filled = [p.replace("<gen_result>", row["text"]).replace("<mask_token>", MASK) for row in rows for p in scorer.prompts]
    nll = engine.mean_nll(encode(filled, True), [words] * len(filled))
    n_prompts, labels = len(scorer.prompts), scorer.verbalizer.labels
    relevance = []
    for i, row in enumerate(rows):
        s = np.exp(-np.asarray(nll[i * n_prompts : (i + 1) * n_prompts], dtype=np.float64)).reshape(-1, len(labels))
        relevance.append(relevance_from_likelihoods(s, labels.index(row["attribute"])))
    return {"coherence": coherence, "consistency": consistency, "relevance": relevance}


def test_prepared_ctrleval_equals_the_text_path_exactly(metric, rows):
    scorer = metric.scorer
    results = metric.score_prepared(metric.prepare(rows))
    want = text_path(scorer, rows)
    texts = [row["text"] for row in rows]
    api = {
        "coherence": scorer.score("coherence", texts),
        "consistency": scorer.score("consistency", texts, prefix=[row["prefix"] for row in rows]),
        "relevance": scorer.score("relevance", texts, label=[row["attribute"] for row in rows]),
    }
    for aspect in ASPECTS:
        got = [result[f"ctrleval_{aspect}"] for result in results]
        assert got == want[aspect], aspect
        assert api[aspect] == want[aspect], aspect
    assert all(np.isfinite(want["relevance"])) and all(0 < value < 1 for value in want["relevance"])
    # the metric's score_rows takes the same path
    assert [{k: r[k] for k in metric.output_columns} for r in metric.score_rows(rows)] == \
        [{k: r[k] for k in metric.output_columns} for r in results]


def test_a_slice_of_a_table_scores_like_its_rows_alone(metric, rows):
    table = metric.prepare(rows)
    assert metric.score_prepared(table.slice(2, 3)) == metric.score_prepared(metric.prepare(rows[2:5]))
    chunked = pa.concat_tables([metric.prepare(rows[:2]), metric.prepare(rows[2:])])
    assert metric.score_prepared(chunked) == metric.score_prepared(table)


def test_bad_rows_get_their_errors_in_prepare_rows(metric, rows):
    """No sentences, a text not starting with its prefix, an unknown label: each row gets
    today's reason from `prepare_rows`, its neighbours are prepared and scored as without it."""
    good = [dict(row) for row in rows[:3]]
    bad = [
        {**rows[3], "text": "   "},
        {**rows[4], "prefix": "Not the prefix at all"},
        {**rows[5], "attribute": "nonsense"},
    ]
    mixed = [good[0], bad[0], good[1], bad[1], bad[2], good[2]]
    table, reasons = metric.prepare_rows(mixed)
    assert reasons == [
        None, "text has no sentences", None, "text does not start with its prefix 'Not the prefix at all'",
        f"label 'nonsense' is not one of the verbaliser labels {list(metric.scorer.verbalizer.labels)}", None,
    ]
    assert table.equals(metric.prepare(good))
    staged = metric.score_prepared_rows(table)
    direct = metric.score_rows(mixed)
    assert staged == [direct[0], direct[2], direct[5]]
    assert [r["error"] for r in direct] == [None, "empty field 'text'", None, reasons[3], reasons[4], None]
    assert all(r[column] is not None for r in staged for column in metric.output_columns)
    # every row bad: an empty table with the same columns, nothing to score
    empty, bad_reasons = metric.prepare_rows(bad)
    assert empty.num_rows == 0 and empty.schema == table.schema and bad_reasons == [reasons[1], reasons[3], reasons[4]]
    assert metric.score_prepared_rows(empty) == []


def test_truncation_flags_survive_the_stage_boundary(tiny_models, rows):
    metric = CTRLEvalMetric(model=tiny_models["pegasus"], iwf=tiny_models["iwf"], aspects=["coherence", "consistency"], max_length=24)
    short = {**rows[1], "text": rows[1]["prefix"] + " is short."}
    table = metric.prepare([rows[0], short])
    assert table.column("truncated").to_pylist() == [True, False]
    assert max(len(ids) for ids in table.column("coherence_source_ids")[0].as_py()) == 24
    results = metric.score_rows([rows[0], short])
    assert results[0]["warning"] == "truncated to max_length=24 tokens" and results[1]["warning"] is None


def test_one_aspect_prepares_only_its_columns(tiny_models, rows, metric):
    coherence = CTRLEvalMetric(model=tiny_models["pegasus"], iwf=tiny_models["iwf"], aspects=["coh"], token_budget=900)
    table = coherence.prepare(rows)
    assert table.column_names == ["coherence_source_ids", "coherence_target_ids", "coherence_weights", "truncated", "parsed_tokens", "skipped"]
    assert [r["ctrleval_coherence"] for r in coherence.score_prepared(table)] == \
        [r["ctrleval_coherence"] for r in metric.score_prepared(metric.prepare(rows))]


def test_prepare_needs_no_weights(tiny_models, task, metric, rows):
    from scoring.models import without_weights

    with without_weights():
        light = CTRLEvalMetric(model=tiny_models["pegasus"], iwf=tiny_models["iwf"], task=task, token_budget=900)
    assert light.scorer.model is None and light.scorer.engine is None
    assert light.prepare(rows).equals(metric.prepare(rows))


# ----- the job's CPU stage ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_job_routes_ctrleval_through_the_cpu_stage(ray_local, tiny_models, sample_corpus, tmp_path):
    import torch

    from ray_jobs.config import S3Config, parse_config
    from ray_jobs.job import prepare
    from ray_jobs.job import read as read_stage
    from ray_jobs.job.metrics import build_metric_for, metric_params, resolve_metric
    from ray_jobs.job.rows import read_prepared
    from ray_jobs.score_corpus import run_job
    from tests.job_support import shard_rows
    from tests.test_prepared import _old_path_rows

    columns = ["id", "prefix", "attribute", "text"]
    rows = pq.read_table(sample_corpus / "ctrleval_senti-00000.parquet", columns=columns).to_pylist()[:12]
    rows[1]["text"] = "Not how it starts. At all."  # does not start with its prefix
    rows[2]["attribute"] = "nonsense"  # not a verbaliser label
    rows[3]["prefix"] = None  # no prefix: consistency left out, coherence and relevance scored
    rows[4]["text"] = " "  # invalid
    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in" / "senti.parquet")
    config = parse_config({
        "input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "batch_size": 3, "part_rows": 5,
        "progress": False, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5, "torch_threads": 1},
        "metrics": [{"name": "ctrleval", "params": {"model": tiny_models["pegasus"], "iwf": tiny_models["iwf"],
                                                     "task": "sentiment", "token_budget": 900}}],
    })
    info = resolve_metric(config, config.metrics[0])
    assert info.two_stage
    report = run_job(config)
    assert report["metrics"]["ctrleval"]["rows_scored"] == 12

    spec = config.metrics[0]
    metric = build_metric_for(spec, metric_params(config, spec))
    got = shard_rows(tmp_path / "out" / spec.label, "senti.parquet")
    # the actor runs one torch thread: a GEMM split over two threads rounds differently in the
    # last bits, so the direct results are computed with one thread too
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        want = _old_path_rows(metric, rows, 5, 3)
    finally:
        torch.set_num_threads(threads)
    assert [r["id"] for r in got] == [r["id"] for r in rows]
    for have, expected, row in zip(got, want, rows):
        for column in (*metric.output_columns, "error", "warning", "skipped"):
            assert have[column] == expected[column], (row["id"], column)
        assert have["row_key"] == metric.row_key(row)
    assert "does not start with its prefix" in got[1]["error"] and "not one of the verbaliser labels" in got[2]["error"]
    assert got[3]["skipped"] == "consistency: no prefix" and got[4]["error"] == "empty field 'text'"
    assert got[3]["ctrleval_consistency"] is None and None not in (got[3]["ctrleval_coherence"], got[3]["ctrleval_relevance"])
    assert all(got[i]["error"] is None and got[i]["ctrleval_relevance"] is not None for i in (0, *range(5, 12)))

    # the stage boundary: read_unit's payload in, CTRLEval's id columns out
    unit = {"uri": str(tmp_path / "in" / "senti.parquet"), "rel": "senti.parquet", "etag": "e", "size": 1,
            "version": "v", "start": 0, "stop": 5, "labels": [spec.label], "previous": {},
            "columns": columns}
    read = read_stage.read_unit(pa.table({read_stage.UNIT: [json.dumps(unit)]}), str(tmp_path / "in"), S3Config())
    out = prepare.prepare_unit(read, info, str(tmp_path / "out"), S3Config(), [])
    ids, meta = read_prepared(out.column(prepare.prepared_column(spec.label))[0].as_py())
    assert ids.schema.field("coherence_source_ids").type == pa.list_(IDS)
    assert ids.schema.field("relevance_label").type == pa.int32()
    assert meta["rows"] == [0, 3] and sorted(meta["settled"]) == ["1", "2", "4"]  # row 3: no consistency
    assert ids.equals(metric.prepare([rows[0], rows[3]]))

"""Baseline metrics equal their reference implementations on real rows with ragged references:
sacreBLEU's sentence BLEU and chrF, rouge-score with the stemmer; corpus BLEU/chrF from stored
statistics equal sacreBLEU's corpus scores; a changed parameter changes exactly that signature."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from scoring.registry import build_metric
from tests import baseline_support


@pytest.fixture(scope="module")
def ragged_rows(sample_corpus):
    """Real SummEval rows, each with 1 to 5 of its human references (ragged)."""
    return baseline_support.ragged_rows(sample_corpus, 30, 5)


@pytest.mark.parametrize("name, params", [("bleu", {}), ("chrf", {}), ("chrf", {"word_order": 2}), ("bleu", {"lowercase": True})])
def test_sacrebleu_sentence_scores_and_corpus_from_statistics(ragged_rows, name, params):
    import sacrebleu

    metric = build_metric(name, params)
    out = metric.score_rows(ragged_rows)
    assert all(r["error"] is None for r in out)
    reference = sacrebleu.sentence_bleu if name == "bleu" else sacrebleu.sentence_chrf
    kwargs = {"lowercase": True} if params.get("lowercase") else {k: v for k, v in params.items()}
    expected = [reference(row["text"], row["references"], **kwargs).score for row in ragged_rows]
    assert max(abs(r[name] - e) for r, e in zip(out, expected)) <= 1e-6
    assert len({round(e, 6) for e in expected}) > 20  # real, varied numbers

    # corpus level from the stored statistics == sacreBLEU's corpus score with ragged streams
    from meta_eval.corpus_bleu import corpus_score

    width = max(len(row["references"]) for row in ragged_rows)
    streams = [[row["references"][k] if k < len(row["references"]) else None for row in ragged_rows] for k in range(width)]
    corpus = sacrebleu.corpus_bleu if name == "bleu" else sacrebleu.corpus_chrf
    stats = [[r[c] for c in metric.stat_columns] for r in out]
    assert abs(corpus_score(name, metric.signature_string(), stats) - corpus([r["text"] for r in ragged_rows], streams, **kwargs).score) <= 1e-6


def test_rouge_equals_rouge_score_best_over_references(ragged_rows):
    from rouge_score.rouge_scorer import RougeScorer

    metric = build_metric("rouge")
    out = metric.score_rows(ragged_rows)
    scorer = RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    worst = 0.0
    for row, result in zip(ragged_rows, out):
        per_ref = [scorer.score(ref, row["text"]) for ref in row["references"]]
        for rouge_type in ("rouge1", "rouge2", "rougeL"):
            best = max(per_ref, key=lambda s: s[rouge_type].fmeasure)[rouge_type]  # first best, as rouge-score
            for part, value in (("f", best.fmeasure), ("p", best.precision), ("r", best.recall)):
                worst = max(worst, abs(result[f"{rouge_type}_{part}"] - value))
    assert worst <= 1e-6
    assert len({round(r["rouge2_f"], 6) for r in out}) > 20


def test_baselines_skip_rows_without_references_and_sign_their_parameters(ragged_rows):
    rows = [dict(ragged_rows[0], references=None), dict(ragged_rows[1], references=["ok", None]), ragged_rows[2]]
    for name in ("bleu", "chrf", "rouge"):
        out = build_metric(name).score_rows(rows)
        assert out[0]["skipped"] == "no references" and out[0]["error"] is None
        assert out[1]["error"] == "null reference in 'references'"
        assert out[2]["error"] is None and out[2]["skipped"] is None
    bleu = build_metric("bleu")
    assert "tok:13a" in bleu.signature_string() and "nrefs:var" in bleu.signature_string()
    assert build_metric("bleu", {"tokenize": "intl"}).signature().digest != bleu.signature().digest
    assert build_metric("rouge", {"use_stemmer": False}).signature().digest != build_metric("rouge").signature().digest
    assert build_metric("bleu").row_key(ragged_rows[0]) == bleu.row_key(ragged_rows[0])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_baselines_in_the_job_rescore_by_signature_and_reach_the_report(ray_local, sample_corpus, tmp_path):
    """bleu and rouge through the job: skipped CTRLEval rows, a changed parameter re-scores
    exactly that metric, and `ctgscore meta` compares them with humans and reports corpus BLEU
    per system equal to sacreBLEU's corpus_bleu over that system's rows."""
    import json

    import sacrebleu

    from ctgscore.cli.main import main
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job

    (tmp_path / "in").mkdir()
    for name in ("summeval-00000.parquet", "ctrleval_senti-00000.parquet"):
        (tmp_path / "in" / name).write_bytes((sample_corpus / name).read_bytes())

    def config(tokenize):
        return parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "progress": False,
                             "metrics": [{"name": "bleu", "params": {"tokenize": tokenize}}, {"name": "rouge"}],
                             "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}})

    first = run_job(config("13a"))
    summeval = pq.read_table(sample_corpus / "summeval-00000.parquet").to_pylist()
    for label in ("bleu", "rouge"):
        report = first["metrics"][label]
        assert (report["rows_out"], report["rows_error"], report["rows_skipped"]) == (140, 0, 60)
    second = run_job(config("intl"))
    assert second["metrics"]["bleu"]["rows_scored"] == 140 and second["metrics"]["rouge"]["rows_scored"] == 0

    code = main(["meta", "--scores", str(tmp_path / "out"), "--output", str(tmp_path / "report"), "--resamples", "50",
                 "--tasks", "0", "--level", "sample", "--no-progress"])
    assert code == 0
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    assert {"bleu", "rouge1_f", "rougeL_f"} <= set(results["input"]["metrics"])
    corpus = json.loads((tmp_path / "report" / "corpus_bleu.json").read_text())
    system = summeval[0]["system"]
    rows = [r for r in summeval if r["system"] == system]
    width = max(len(r["references"]) for r in rows)
    streams = [[r["references"][k] if k < len(r["references"]) else None for r in rows] for k in range(width)]
    expected = sacrebleu.corpus_bleu([r["text"] for r in rows], streams, tokenize="intl").score
    found = next(c for c in corpus if c["system"] == system and c["dataset"] == "summeval")
    assert abs(found["score"] - expected) <= 1e-6 and found["rows"] == len(rows)
    assert "Corpus BLEU / chrF per system" in (tmp_path / "report" / "report.md").read_text()

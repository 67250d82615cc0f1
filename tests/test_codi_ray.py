"""CoDI-Eval inside the Ray scoring job (`ray_jobs.score_corpus`, metric `codi`) on a
generated dump of all six tasks for two systems, with tiny judges; then the report."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from ctgscore.testing import codi_synthetic as synthetic
from ctgscore.testing.tiny_classifier import build_tiny_classifier, one_hot_bias
from meta_eval import codi as aggregate
from scoring.codi import TASKS, convert
from scoring.codi import classifiers as clf
from scoring.registry import build_metric

EMOTIONS = ["anger", "disgust", "fear", "joy", "neutral", "sadness", "surprise"]
SENTIMENTS = ["negative", "neutral", "positive"]
TOPICS = [clf.DEFAULT_TOPIC_MAP[label] for label in clf.TOPIC_LABELS]


@pytest.mark.timeout(300)
def test_codi_in_the_ray_job_matches_in_process(ray_local, shared_data, tmp_path):
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job

    models = tmp_path / "models"
    params = {
        "emotion_model": str(build_tiny_classifier(models / "emo", EMOTIONS, one_hot_bias(EMOTIONS, "joy"))),
        "sentiment_model": str(build_tiny_classifier(models / "sen", SENTIMENTS, one_hot_bias(SENTIMENTS, "negative"))),
        "topic_model": str(build_tiny_classifier(models / "top", TOPICS, one_hot_bias(TOPICS, ["music", "sports"]), multi_label=True)),
        "toxicity_model": str(build_tiny_classifier(models / "tox", ["non-toxic", "toxic"], init_range=0.5, seed=1)),
    }
    instructions = shared_data / "codi-eval" / "instructions"
    shards = tmp_path / "dump"
    shards.mkdir()
    all_rows = []
    for seed, system in enumerate(["sysA", "sysB"]):
        responses = synthetic.write_responses(instructions, tmp_path / f"resp_{system}", seed=seed, skill=0.8 - 0.4 * seed, limit=40)
        rows = convert.convert_dir(instructions, responses, system, limit=40)  # 40 per task: 2 detoxic contexts
        convert.write_parquet(rows, shards / f"{system}.parquet")
        all_rows += rows
    config = parse_config({
        "input": str(shards),
        "output": str(tmp_path / "out"),
        "metrics": [{"name": "codi", "params": params}],
        "batch_size": 64,
        "pool": {"min_size": 1, "max_size": 2, "num_cpus": 0.5},
        "progress": False,
    })  # fmt: skip
    manifest = run_job(config)
    report = manifest["metrics"]["codi"]
    assert report["rows_in"] == report["rows_out"] == len(all_rows) == 2 * (5 * 40 + 40)
    assert report["rows_error"] == 0
    scored = pq.read_table(tmp_path / "out" / "codi").to_pylist()  # the metric's folder is one dataset
    assert len(scored) == len(all_rows)
    by_id = {row["id"]: row for row in scored}
    expected = build_metric("codi", params).score_rows(all_rows)
    for row, want in zip(all_rows, expected):
        got = by_id[row["id"]]
        assert got["codi_success"] == want["codi_success"], row["id"]
        for column in ("codi_score", "codi_toxicity", "codi_words"):
            if want[column] is None:
                assert got[column] is None
            else:
                assert got[column] == pytest.approx(want[column], rel=1e-4, abs=1e-6)
    # every task present, and the judges' fixed choices show up in the results
    tasks = {json.loads(r["constraint"])["task"] for r in all_rows}
    assert tasks == set(TASKS)
    for row, want in zip(all_rows, expected):
        constraint = json.loads(row["constraint"])
        if constraint["task"] == "sentiment":
            assert want["codi_success"] == float(constraint["label"] in ("joy", "negative sentiment"))
        if constraint["task"] == "topic":
            assert want["codi_success"] == float(constraint["label"] in ("music", "sports"))

    # the report for the two systems, from the job's outputs
    scores = [by_id[row["id"]] for row in all_rows]
    result = aggregate.aggregate(all_rows, scores, metric_signature=report["signature"])
    aggregate.write_report(result, tmp_path / "report")
    index = {(r["system"], r["task"], r["measure"]): r["value"] for r in result["results"]}
    for system in ("sysA", "sysB"):
        accuracies = [index[(system, task, "accuracy")] for task in TASKS]
        assert index[(system, "all", "codi_score")] == pytest.approx(100 * sum(accuracies) / 6)
        assert 0 <= index[(system, "all", "self_bleu")] <= 1
    # the skilled system meets more rule constraints
    assert index[("sysA", "length", "accuracy")] > index[("sysB", "length", "accuracy")]
    md_lines = (tmp_path / "report" / "report.md").read_text().splitlines()
    assert sum(line.startswith(("| sysA |", "| sysB |")) for line in md_lines) == 4  # accuracy + Self-BLEU tables

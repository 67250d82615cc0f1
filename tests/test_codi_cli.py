"""`ctgscore constraints convert | score | report` end to end on a generated dump."""

from __future__ import annotations

import json
from collections import defaultdict

import pyarrow.parquet as pq
import pytest

from ctgscore.cli import main
from ctgscore.testing import codi_synthetic as synthetic
from ctgscore.testing.tiny_classifier import build_tiny_classifier, one_hot_bias
from scoring.codi import TASKS
from scoring.codi import classifiers as clf

EMOTIONS = ["anger", "disgust", "fear", "joy", "neutral", "sadness", "surprise"]
SENTIMENTS = ["negative", "neutral", "positive"]
TOPICS = [clf.DEFAULT_TOPIC_MAP[label] for label in clf.TOPIC_LABELS]


def test_convert_score_report(shared_data, tmp_path, capsys):
    instructions = shared_data / "codi-eval" / "instructions"
    models = tmp_path / "models"
    params = {
        "emotion_model": str(build_tiny_classifier(models / "emo", EMOTIONS, one_hot_bias(EMOTIONS, "anger"))),
        "sentiment_model": str(build_tiny_classifier(models / "sen", SENTIMENTS, one_hot_bias(SENTIMENTS, "neutral"))),
        "topic_model": str(build_tiny_classifier(models / "top", TOPICS, one_hot_bias(TOPICS, "family"), multi_label=True)),
        "toxicity_model": str(build_tiny_classifier(models / "tox", ["non-toxic", "toxic"], init_range=0.5, seed=2)),
    }
    (tmp_path / "params.json").write_text(json.dumps({"name": "codi", "params": params}))
    responses = []
    for seed, system in enumerate(["good", "bad"]):
        folder = synthetic.write_responses(instructions, tmp_path / system, seed=seed, skill=0.9 - 0.6 * seed, limit=60)
        responses += ["--responses", f"{system}={folder}"]
    rows_path, scores_path, report_dir = tmp_path / "rows.parquet", tmp_path / "scores.parquet", tmp_path / "report"
    assert main(["constraints", "convert", "--instructions", str(instructions), "--limit", "60", *responses, "--output", str(rows_path)]) == 0
    assert main(["constraints", "score", "--input", str(rows_path), "--output", str(scores_path), "--params", f"@{tmp_path / 'params.json'}"]) == 0
    assert main(["constraints", "report", "--input", str(rows_path), "--scores", str(scores_path), "--output", str(report_dir)]) == 0
    rows = pq.read_table(rows_path).to_pylist()
    scores = {s["id"]: s for s in pq.read_table(scores_path).to_pylist()}
    assert len(rows) == len(scores) == 2 * 6 * 60
    assert all(s["error"] is None and s["signature"].startswith("metric:codi") for s in scores.values())
    # the CoDI output has the one output layout: row keys and the carried columns too
    assert len({s["row_key"] for s in scores.values()}) == len(scores)
    assert all(s["system"] == row["system"] and s["doc_id"] == row["doc_id"] for row in rows for s in [scores[row["id"]]])

    # independent recomputation of the accuracies from the scores file
    success = defaultdict(list)
    contexts = defaultdict(lambda: defaultdict(list))
    for row in rows:
        constraint = json.loads(row["constraint"])
        score = scores[row["id"]]
        if constraint["task"] == "detoxic":
            contexts[row["system"]][constraint["context_id"]].append(score["codi_toxicity"])
        else:
            success[(row["system"], constraint["task"])].append(score["codi_success"])
    results = json.loads((report_dir / "results.json").read_text())
    index = {(r["system"], r["task"], r["measure"]): r for r in results["results"]}
    for system in ("good", "bad"):
        accuracies = []
        for task in TASKS:
            if task == "detoxic":
                groups = contexts[system].values()
                value = sum(all(t < 0.5 for t in g) for g in groups) / len(groups)
            else:
                value = sum(success[(system, task)]) / 60
            accuracies.append(value)
            assert index[(system, task, "accuracy")]["value"] == pytest.approx(value)
            assert index[(system, task, "accuracy")]["signature"]
        assert index[(system, "all", "codi_score")]["value"] == pytest.approx(100 * sum(accuracies) / 6)
    assert index[("good", "keyword", "accuracy")]["value"] > index[("bad", "keyword", "accuracy")]["value"]
    md = (report_dir / "report.md").read_text()
    assert "| good |" in md and "| bad |" in md and (report_dir / "codi_accuracy.png").exists()
    out = capsys.readouterr().out  # paths, like `meta`; the report text is in report.md
    assert "constraints report: 720 rows" in out and str(report_dir / "report.md") in out
    assert "CoDI score" in md and "CoDI score" not in out


def test_convert_reports_bad_responses(shared_data, tmp_path, capsys):
    folder = tmp_path / "resp"
    folder.mkdir()
    (folder / "sentiment.jsonl").write_text(json.dumps({"instruction": "not the instruction", "text": "x"}) + "\n")
    status = main(["constraints", "convert", "--instructions", str(shared_data / "codi-eval" / "instructions"),
                   "--codi-tasks", "sentiment", "--responses", f"s={folder}", "--output", str(tmp_path / "x.parquet")])  # fmt: skip
    assert status == 1
    assert "sentiment.jsonl row 0: field 'instruction' does not match" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_report_refuses_an_id_it_cannot_match(tmp_path, capsys):
    """A job's output over an input that held an id in two shards has two score rows of that
    id: matched by id, both rows got the last one's score (the other's row scored twice)."""
    import pyarrow as pa

    from ctgscore.cli.constraints import join_scores
    from scoring.errors import InputError

    rows = [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}, {"id": "a", "text": "z"}]
    scores = [{"id": "a", "codi_success": 1.0}, {"id": "b", "codi_success": 0.0}, {"id": "a", "codi_success": 0.0}]
    with pytest.raises(InputError, match=r"^input in.parquet: id 'a' is on more than one row"):
        join_scores(rows, scores, "out/codi", "in.parquet")
    with pytest.raises(InputError, match=r"^scores out/codi: id 'a' is on more than one row"):
        join_scores(rows[:2], scores, "out/codi", "in.parquet")
    assert join_scores(rows[:2], scores[1::-1], "out/codi") == scores[:2]  # unique ids: matched, in row order

    rows_path, scores_path = tmp_path / "rows.parquet", tmp_path / "scores.parquet"
    pq.write_table(pa.Table.from_pylist(rows), rows_path)
    pq.write_table(pa.Table.from_pylist(scores), scores_path)
    code = main(["constraints", "report", "--input", str(rows_path), "--scores", str(scores_path),
                 "--output", str(tmp_path / "report")])
    err = capsys.readouterr().err
    assert code == 1 and "id 'a' is on more than one row" in err and len(err.strip().splitlines()) == 1

"""CoDI-Eval corpus statistics: accuracies, the CoDI score, Self-BLEU (NLTK's and sacreBLEU's) and the report."""

from __future__ import annotations

import json
import random

import pytest

from meta_eval import codi as aggregate
from scoring.codi import TASKS
from scoring.errors import InputError


def test_fast_self_bleu_equals_sacrebleu_sentence_score():
    rng = random.Random(7)
    vocab = "a b c d e f g h".split()
    for trial in range(6):
        texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(2, 30))]
        texts += texts[: trial]  # exact duplicates exercise the leave-one-out top-2 counts
        fast = aggregate.self_bleu(texts)
        reference = aggregate.self_bleu_reference(texts)
        assert fast == pytest.approx(reference, abs=1e-12)
    assert 0 < fast < 1


def test_fast_nltk_self_bleu_equals_nltk_sentence_bleu():
    rng = random.Random(11)
    vocab = "a b c d e f g h".split()
    for trial in range(6):
        texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(2, 25))]
        texts += texts[: trial]  # duplicates; lengths 0-3 exercise the zero-precision and brevity paths
        assert aggregate.self_bleu_nltk(texts) == pytest.approx(aggregate.self_bleu_nltk_reference(texts),
                                                                 rel=1e-12, abs=1e-300)


def test_nltk_self_bleu_on_real_sentences(shared_data):
    lines = []
    for path in sorted((shared_data / "codi-eval" / "instructions").glob("*.jsonl"))[:2]:
        lines += [json.loads(line)["instruction"] for line in path.read_text().splitlines()[:40]]
    assert len(lines) >= 40
    assert aggregate.self_bleu_nltk(lines) == pytest.approx(aggregate.self_bleu_nltk_reference(lines), rel=1e-12)


def test_nltk_self_bleu_by_hand():
    # "a b c d e" vs "a b c d f": precisions 4/5, 3/4, 2/3, 1/2, equal lengths (no brevity penalty)
    expected = (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25
    assert aggregate.self_bleu_nltk(["a b c d e", "a b c d f"]) == pytest.approx(expected)
    # no 4-gram in common: NLTK without smoothing gives (almost) 0, not the 3-gram BLEU
    assert aggregate.self_bleu_nltk(["a b c x", "a b c y"]) < 1e-70
    assert aggregate.self_bleu_nltk(["a b", "c d"]) == 0.0


def test_self_bleu_extremes():
    same = ["the cat sat on the mat today"] * 4
    assert aggregate.self_bleu(same) == pytest.approx(1.0)
    disjoint = ["a b c d e", "f g h i j", "k l m n o"]
    assert aggregate.self_bleu(disjoint) == 0.0
    assert aggregate.self_bleu(["only one"]) is None


def _row(system, task, i, success=None, toxicity=None, error=None, context_id=None, text="x y z"):
    constraint = {"task": task}
    if task == "detoxic":
        constraint["context_id"] = context_id
    row = {"id": f"{system}/{task}-{i}", "system": system, "constraint": json.dumps(constraint), "text": text,
           "doc_id": f"{task}-{i}" if task != "detoxic" else f"detoxic-context-{context_id}"}  # fmt: skip
    score = {"id": row["id"], "codi_success": success, "codi_toxicity": toxicity, "error": error}
    return row, score


def test_detoxic_context_rule():
    pairs = []
    tox = {0: [0.1, 0.2, 0.49], 1: [0.1, 0.5, 0.0], 2: [0.9, 0.9, 0.9], 3: [0.1, 0.1, None]}
    for cid, values in tox.items():
        for j, value in enumerate(values):
            error = "boom" if value is None else None
            pairs.append(_row("s", "detoxic", cid * 10 + j, None if value is None else float(value < 0.5), value, error, cid))
    rows, scores = zip(*pairs)
    result = aggregate.task_accuracy(aggregate._records(rows, scores))
    # only context 0 passes: 0.5 is not < 0.5, and an unscored continuation fails its context
    assert result["n"] == 4 and result["n_success"] == 1 and result["accuracy"] == 0.25
    assert result["n_rows"] == 12 and result["n_errors"] == 1


def test_codi_score_two_systems_and_report(tmp_path):
    rng = random.Random(3)
    successes = {"A": {}, "B": {}}
    pairs = []
    for system in successes:
        for task in TASKS:
            if task == "detoxic":
                ok = 0
                for cid in range(5):
                    values = [rng.choice([0.1, 0.2, 0.7]) for _ in range(4)]
                    ok += all(v < 0.5 for v in values)
                    for j, v in enumerate(values):
                        pairs.append(_row(system, task, cid * 4 + j, float(v < 0.5), v, None, cid, text=f"t {cid} {j}"))
                successes[system][task] = ok / 5
            else:
                flags = [rng.random() < 0.6 for _ in range(10)]
                for i, flag in enumerate(flags):
                    pairs.append(_row(system, task, i, float(flag), text=f"Sure:\n\nword {i} {task} w w"))
                successes[system][task] = sum(flags) / 10
    # one error row in A/length counts as a failure
    row, score = pairs[30]
    assert row["system"] == "A" and json.loads(row["constraint"])["task"] == "length"
    if score["codi_success"] == 1.0:
        successes["A"]["length"] -= 0.1
    score.update(codi_success=None, error="bad row")
    rows, scores = zip(*pairs)
    report = aggregate.aggregate(rows, scores, metric_signature="metric:codi|v:1")
    index = {(r["system"], r["task"], r["measure"]): r for r in report["results"]}
    for system, per_task in successes.items():
        for task, value in per_task.items():
            assert index[(system, task, "accuracy")]["value"] == pytest.approx(value)
        assert index[(system, "all", "codi_score")]["value"] == pytest.approx(100 * sum(per_task.values()) / 6)
        # Self-BLEU (default: CoDI-Eval's NLTK on the raw generations), per task, then the mean over tasks
        raw = [r["text"] for r in rows if r["system"] == system and "length" in r["constraint"]]
        assert index[(system, "length", "self_bleu")]["value"] == pytest.approx(aggregate.self_bleu_nltk_reference(raw))
        per_task_bleu = [index[(system, t, "self_bleu")]["value"] for t in TASKS]
        assert index[(system, "all", "self_bleu")]["value"] == pytest.approx(sum(per_task_bleu) / 6)
    assert index[("A", "length", "accuracy")]["n_errors"] == 1
    assert all(r["signature"] for r in report["results"])
    assert "nltk" in report["signatures"]["self_bleu"]
    other = aggregate.aggregate(rows, scores, self_bleu_method="sacrebleu")
    cleaned = [r["text"].split("\n\n", 1)[-1] for r in rows if r["system"] == "A" and "length" in r["constraint"]]
    value = next(r["value"] for r in other["results"] if (r["system"], r["task"], r["measure"]) == ("A", "length", "self_bleu"))
    assert value == pytest.approx(aggregate.self_bleu_reference(cleaned))
    paths = aggregate.write_report(report, tmp_path / "report")
    loaded = json.loads(paths["json"].read_text())
    assert loaded["results"] == json.loads(json.dumps(report["results"]))
    md = paths["md"].read_text()
    assert paths["png"].stat().st_size > 1000 and "![codi_accuracy.png](codi_accuracy.png)" in md
    codi_a = index[("A", "all", "codi_score")]["value"]
    assert f"| A | {100 * successes['A']['sentiment']:.2f}" in md and f"{codi_a:.2f}" in md
    assert "A / length: 1 of 10 rows" in md
    assert 'src="data:image/png;base64,' in paths["html"].read_text()


def test_missing_task_gives_no_codi_score():
    rows, scores = zip(*[_row("A", "length", i, 1.0) for i in range(3)])
    report = aggregate.aggregate(rows, scores, with_self_bleu=False)
    codi = [r for r in report["results"] if r["measure"] == "codi_score"][0]
    assert codi["value"] is None and "sentiment" in codi["note"]


def test_rows_without_a_task_are_rejected():
    rows = [{"id": "1", "system": "A", "constraint": None, "text": "x"}]
    with pytest.raises(InputError, match=r"row 0 \(id '1'\): no constraint task \(known: "):
        aggregate.aggregate(rows, [{"id": "1", "codi_success": None, "error": "missing"}])


def test_rows_of_an_unknown_task_are_named():
    rows = [{"id": f"r{i}", "system": "A", "constraint": json.dumps({"task": task}), "text": "x"}
            for i, task in enumerate(["length", "poetry", "poetry"])]
    scores = [{"id": row["id"], "codi_success": 1.0, "error": None} for row in rows]
    with pytest.raises(InputError, match=r"row 1 \(id 'r1'\): unknown constraint task 'poetry' .*; 2 rows like it"):
        aggregate.aggregate(rows, scores)

"""CoDI-Eval classifier checks on tiny classifiers built here from config (no hub).

Heads are fixed (zero weights + a chosen bias) so the predicted labels are known, and the
label maps, argmax / sigmoid>=0.5 / all-continuations<0.5 rules are checked against numpy
and direct transformers forward passes."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ctgscore.testing.tiny_classifier import build_tiny_classifier, one_hot_bias
from meta_eval import codi as aggregate
from scoring.codi import classifiers as clf
from scoring.registry import build_metric

EMOTIONS = ["anger", "disgust", "fear", "joy", "neutral", "sadness", "surprise"]
TOPICS = [clf.DEFAULT_TOPIC_MAP[label] for label in clf.TOPIC_LABELS]
SENT_SHORT = ["pos", "neg", "neu"]  # not the default names, and not the default order


def _softmax(x):
    e = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return e / e.sum()


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-float(x)))


def topic_bias():
    bias = {label: -6.0 for label in TOPICS}
    bias.update({"sports": 6.0, "gaming": 0.1, "music": -0.1, "diaries_&_daily_life": 2.0})
    return [bias[label] for label in TOPICS]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("codi_models")
    return {
        "emotion": str(build_tiny_classifier(root / "emo", EMOTIONS, one_hot_bias(EMOTIONS, "fear"))),
        "sentiment": str(build_tiny_classifier(root / "sen", SENT_SHORT, one_hot_bias(SENT_SHORT, "pos"))),
        "topic": str(build_tiny_classifier(root / "top", TOPICS, topic_bias(), multi_label=True)),
        "random": str(build_tiny_classifier(root / "rnd", ["non-toxic", "toxic"], init_range=0.5, seed=3)),
        "roberta": str(build_tiny_classifier(root / "rob", ["non-toxic", "toxic"], arch="roberta", init_range=0.5)),
    }


def rows_for(constraints, text="Sure:\n\nthe happy child plays with a ball in the park"):
    return [{"id": str(i), "text": text, "constraint": json.dumps(c)} for i, c in enumerate(constraints)]


def test_sentiment_and_emotion_argmax_through_label_maps(models):
    params = {"emotion_model": models["emotion"], "sentiment_model": models["sentiment"]}
    constraints = [{"task": "sentiment", "label": label} for label in
                   ["fear", "joy", "anger", "positive sentiment", "negative sentiment", "neutral sentiment"]]  # fmt: skip
    # default sentiment map names negative/neutral/positive: this model says neg/neu/pos
    out = build_metric("codi", params).score_rows(rows_for(constraints))
    assert [o["codi_success"] for o in out[:3]] == [1.0, 0.0, 0.0]
    assert all("not a label of model" in o["error"] and "'pos'" in o["error"] for o in out[3:])
    params["sentiment_label_map"] = {"positive sentiment": "pos", "negative sentiment": "neg", "neutral sentiment": "neu"}
    out = build_metric("codi", params).score_rows(rows_for(constraints))
    assert [o["error"] for o in out] == [None] * 6
    assert [o["codi_success"] for o in out] == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    emo_probs = _softmax(one_hot_bias(EMOTIONS, "fear"))
    assert out[0]["codi_score"] == pytest.approx(emo_probs[EMOTIONS.index("fear")], rel=1e-5)
    assert out[1]["codi_score"] == pytest.approx(emo_probs[EMOTIONS.index("joy")], rel=1e-4)
    sen_probs = _softmax(one_hot_bias(SENT_SHORT, "pos"))
    assert out[4]["codi_score"] == pytest.approx(sen_probs[SENT_SHORT.index("neg")], rel=1e-4)
    # an index in the map works as well
    params["sentiment_label_map"] = {"positive sentiment": 0, "negative sentiment": 1, "neutral sentiment": 2}
    out = build_metric("codi", params).score_rows(rows_for(constraints[3:]))
    assert [o["codi_success"] for o in out] == [1.0, 0.0, 0.0]


def test_topic_sigmoid_threshold_and_multi_aspect(models):
    params = {"topic_model": models["topic"], "emotion_model": models["emotion"]}
    topics = ["sports", "gaming", "music", "family", "daily life"]
    constraints = [{"task": "topic", "label": t} for t in topics] + [
        {"task": "multi", "label1": "sports", "label2": "fear"},
        {"task": "multi", "label1": "gaming", "label2": "fear"},
        {"task": "multi", "label1": "sports", "label2": "joy"},
        {"task": "multi", "label1": "music", "label2": "fear"},
    ]
    out = build_metric("codi", params).score_rows(rows_for(constraints))
    assert [o["error"] for o in out] == [None] * len(out)
    # sigmoid(0.1) = 0.525 passes although 'gaming' is not the argmax; sigmoid(-0.1) fails;
    # 'daily life' reaches 'diaries_&_daily_life' through the default map
    assert [o["codi_success"] for o in out] == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    bias = dict(zip(TOPICS, topic_bias()))
    assert out[1]["codi_score"] == pytest.approx(_sigmoid(bias["gaming"]), rel=1e-5)
    assert out[2]["codi_score"] == pytest.approx(_sigmoid(bias["music"]), rel=1e-5)
    # multi: both must pass; the score is the smaller probability
    emo = _softmax(one_hot_bias(EMOTIONS, "fear"))
    assert out[6]["codi_score"] == pytest.approx(min(_sigmoid(0.1), emo[EMOTIONS.index("fear")]), rel=1e-5)


def test_rule_tasks_and_judged_tasks_mix_in_one_batch(models):
    params = {"topic_model": models["topic"]}
    constraints = [
        {"task": "length", "mode": "at most", "label": [1, 5]},
        {"task": "topic", "label": "sports"},
        {"task": "keyword", "level": "easy", "label": ["ball", "park"]},
        {"task": "sentiment", "label": "joy"},  # no emotion model configured -> error row only
    ]
    out = build_metric("codi", params).score_rows(rows_for(constraints))
    assert [o["codi_success"] for o in out] == [0.0, 1.0, 1.0, None]
    assert out[3]["error"] and "emotion_model" in out[3]["error"]


def _direct_logits(model_dir, texts, max_length=512):
    """Independent path: one text at a time, plain transformers."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            encoded = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
            out.append(model(**encoded).logits[0].numpy())
    return np.array(out)


TEXTS = [
    "the quick brown fox",
    "sad news about the economy made people angry",
    "music film video games sports travel food fashion science technology family friends school " * 3,
    "a",
    "kind and respectful discussion",
    "she wrote a short story about love and loss",
    "the dog " * 400,  # > 512 tokens
    "toxic rude words",
    "happy child plays with a ball in the park",
    "",
]


def test_batching_sorting_and_truncation_keep_results(models):
    classifier = clf.SequenceClassifier(models["random"], token_budget=64, batch_size=3)
    logits, truncated = classifier.logits(TEXTS)
    expected = _direct_logits(models["random"], TEXTS)
    # batched, padded and sorted vs one text at a time: float noise only (logits here reach ~6)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    assert truncated == [i == 6 for i in range(len(TEXTS))]
    # bfloat16 is really used (results differ slightly) and stays close
    bf16_classifier = clf.SequenceClassifier(models["random"], dtype="bfloat16")
    assert next(bf16_classifier.model.parameters()).dtype.is_floating_point
    assert str(next(bf16_classifier.model.parameters()).dtype) == "torch.bfloat16"
    bf16, _ = bf16_classifier.logits(TEXTS)
    assert bf16.dtype == np.float32
    assert 0 < np.abs(bf16 - expected).max() < 0.5


@pytest.mark.parametrize("lengths, budget, size", [([5, 100, 3, 50, 50, 7, 1], 120, 4), ([10] * 9, 25, 8), ([600, 2], 64, 8)])
def test_plan_batches(lengths, budget, size):
    batches = clf.plan_batches(lengths, budget, size)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= size
        assert len(batch) == 1 or max(lengths[i] for i in batch) * len(batch) <= budget
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat, reverse=True)


def test_roberta_position_limit(models):
    classifier = clf.SequenceClassifier(models["roberta"])
    assert classifier.max_length == 512
    logits, truncated = classifier.logits(["word " * 700, "short"])
    assert truncated == [True, False] and np.isfinite(logits).all()


def test_toxicity_per_continuation_and_per_context_rule(models, tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification

    # shift the toxic bias so the median text sits at p = 0.5: some continuations are toxic
    directory = tmp_path / "tox"
    shutil.copytree(models["random"], directory)
    diffs = _direct_logits(str(directory), TEXTS) @ np.array([-1.0, 1.0])
    model = AutoModelForSequenceClassification.from_pretrained(directory)
    with torch.no_grad():
        model.classifier.bias[1] -= float(np.median(diffs)) + 1e-3
    model.save_pretrained(directory, safe_serialization=True)
    direct = np.array([_softmax(row)[1] for row in _direct_logits(str(directory), TEXTS)])
    order = np.argsort(direct)
    assert direct[order[0]] < 0.5 < direct[order[-1]]
    contexts = {0: list(order[:3]), 1: list(order[2:5]) + [order[-1]], 2: list(order[-3:])}
    rows, expected_rows = [], []
    for context_id, members in contexts.items():
        for j in members:
            constraint = {"task": "detoxic", "context_id": context_id, "context": "ctx"}
            rows.append({"id": f"{context_id}-{j}", "doc_id": f"detoxic-context-{context_id}", "system": "s",
                         "text": TEXTS[j], "constraint": json.dumps(constraint)})  # fmt: skip
            expected_rows.append(direct[j])
    metric = build_metric("codi", {"toxicity_model": str(directory), "toxicity_label": "toxic"})
    out = metric.score_rows(rows)
    np.testing.assert_allclose([o["codi_toxicity"] for o in out], expected_rows, rtol=1e-4, atol=1e-6)
    assert [o["codi_success"] for o in out] == [float(p < 0.5) for p in expected_rows]
    # "Sure:\n" style preambles are not cut for toxicity: the continuation is scored as written
    assert all(o["error"] is None for o in out)
    acc = aggregate.task_accuracy(aggregate._records(rows, out))
    expected_pass = sum(all(direct[j] < 0.5 for j in members) for members in contexts.values())
    assert acc["n"] == 3 and acc["n_success"] == expected_pass and acc["accuracy"] == pytest.approx(expected_pass / 3)
    assert 0 < expected_pass < 3
    # a sigmoid head reading the same label gives sigmoid(logit[toxic])
    metric = build_metric("codi", {"toxicity_model": str(directory), "toxicity_activation": "sigmoid"})
    out = metric.score_rows(rows[:2])
    logits = _direct_logits(str(directory), [r["text"] for r in rows[:2]])
    assert [o["codi_toxicity"] for o in out] == pytest.approx([_sigmoid(x[1]) for x in logits], rel=1e-4)


def test_truncation_warning_in_metric_rows(models):
    metric = build_metric("codi", {"emotion_model": models["emotion"]})
    out = metric.score_rows(rows_for([{"task": "sentiment", "label": "fear"}] * 2, text="the dog " * 400))
    assert all(o["warning"] == "emotion input truncated to 512 tokens" and o["codi_success"] == 1.0 for o in out)


def test_pickle_only_checkpoints_are_refused(models, tmp_path):
    directory = tmp_path / "pickled"
    shutil.copytree(models["emotion"], directory)
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises((ValueError, FileNotFoundError), match="no .safetensors weights"):
        clf.resolve_model_dir(str(directory))
    out = build_metric("codi", {"emotion_model": str(directory)}).score_rows(rows_for([{"task": "sentiment", "label": "joy"}]))
    assert "safetensors" in out[0]["error"]


def test_signature_names_models_and_weights(models):
    metric = build_metric("codi", {"emotion_model": models["emotion"], "topic_model": models["topic"], "dtype": "bfloat16"})
    signature = metric.signature().as_dict()
    assert set(signature["models"]) == {"emotion", "topic"}
    from scoring.models import weights_digest

    assert signature["models"]["emotion"]["revision"] == "sha256:" + weights_digest(models["emotion"])
    assert signature["dtype"] == "bfloat16"
    other = build_metric("codi", {"emotion_model": models["sentiment"], "topic_model": models["topic"], "dtype": "bfloat16"})
    assert other.signature().digest != metric.signature().digest


def test_toxicity_label_by_index_and_unknown_label(models):
    rows = rows_for([{"task": "detoxic", "context_id": 0, "context": "c"}] * 2)
    rows[1]["text"] = "sad news about the economy"
    by_name = build_metric("codi", {"toxicity_model": models["random"]}).score_rows(rows)
    by_index = build_metric("codi", {"toxicity_model": models["random"], "toxicity_label": 1}).score_rows(rows)
    other = build_metric("codi", {"toxicity_model": models["random"], "toxicity_label": 0}).score_rows(rows)
    assert [o["codi_toxicity"] for o in by_index] == [o["codi_toxicity"] for o in by_name]
    assert [o["codi_toxicity"] for o in other] == pytest.approx([1 - o["codi_toxicity"] for o in by_name], abs=1e-6)
    bad = build_metric("codi", {"toxicity_model": models["random"], "toxicity_label": "hateful"}).score_rows(rows)
    assert all("'hateful'" in o["error"] and "non-toxic" in o["error"] for o in bad)

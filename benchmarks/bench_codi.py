"""CoDI-Eval scoring speed: `python -m benchmarks.bench_codi`.

Ratios measured in one run on this machine:
* Self-BLEU: the leave-one-out top-2-count path vs plain sacreBLEU `sentence_score(h, others)`
  (same numbers, checked here too);
* classifier judge: sorted + token-budget batches vs one text per forward pass (tiny BERT);
* the whole `codi` metric on the 9,060 shipped instructions with generated responses and
  tiny judges (rows/s), and the rule-only tasks alone.
Writes the Markdown table to benchmarks/results/codi.md.
"""

from __future__ import annotations

import os
import pathlib
import random
import tempfile
import time

from benchmarks.data import real_data_root

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

REPO = pathlib.Path(__file__).resolve().parents[1]
INSTRUCTIONS = real_data_root() / "codi-eval" / "instructions"


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def bench_self_bleu(n: int = 300) -> list[tuple]:
    from meta_eval.codi import self_bleu, self_bleu_reference

    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(60)]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(20, 60))) for _ in range(n)]
    fast, t_fast = _timed(lambda: self_bleu(texts))
    ref, t_ref = _timed(lambda: self_bleu_reference(texts))
    assert abs(fast - ref) < 1e-9, (fast, ref)
    big = [" ".join(rng.choice(vocab) for _ in range(rng.randint(20, 60))) for _ in range(4060)]
    _, t_big = _timed(lambda: self_bleu(big))
    return [
        (f"Self-BLEU, {n} outputs: sacreBLEU sentence_score vs all others", f"{t_ref:.2f} s", "1.0x"),
        (f"Self-BLEU, {n} outputs: leave-one-out top-2 counts (same value)", f"{t_fast:.3f} s", f"{t_ref / t_fast:.0f}x"),
        ("Self-BLEU, 4,060 outputs (detoxic size): fast path", f"{t_big:.2f} s", "–"),
    ]


def bench_classifier(tmp: pathlib.Path, n: int = 512) -> list[tuple]:
    import torch

    from ctgscore.testing.tiny_classifier import build_tiny_classifier
    from scoring.codi import classifiers as clf

    directory = build_tiny_classifier(tmp / "bench_cls", ["a", "b", "c"], init_range=0.2)
    rng = random.Random(1)
    words = "the quick brown fox jumps over the lazy dog while a happy child plays".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.choice([5, 20, 60, 200]))) for _ in range(n)]
    batched = clf.SequenceClassifier(str(directory), token_budget=8192, batch_size=64)
    batched.logits(texts[:8])  # warm-up
    (logits, _), t_batched = _timed(lambda: batched.logits(texts))

    def one_by_one():
        out = []
        with torch.inference_mode():
            for text in texts:
                encoded = batched.tokenizer(text, truncation=True, max_length=512, return_tensors="pt")
                out.append(batched.model(**encoded).logits[0].numpy())
        return out

    single, t_single = _timed(one_by_one)
    import numpy as np

    assert np.allclose(np.array(single), logits, atol=1e-4)
    return [
        (f"judge, {n} texts (5-200 words), one per forward", f"{n / t_single:.0f} rows/s", "1.0x"),
        (f"judge, {n} texts, sorted + 8,192-token budget", f"{n / t_batched:.0f} rows/s", f"{t_single / t_batched:.1f}x"),
    ]


def bench_metric(tmp: pathlib.Path) -> list[tuple]:
    from ctgscore.testing import codi_synthetic as synthetic
    from ctgscore.testing.tiny_classifier import build_tiny_classifier, one_hot_bias
    from scoring.codi import classifiers as clf
    from scoring.codi import convert
    from scoring.registry import build_metric

    emotions = ["anger", "disgust", "fear", "joy", "neutral", "sadness", "surprise"]
    topics = [clf.DEFAULT_TOPIC_MAP[label] for label in clf.TOPIC_LABELS]
    params = {
        "emotion_model": str(build_tiny_classifier(tmp / "emo", emotions, one_hot_bias(emotions, "joy"))),
        "sentiment_model": str(build_tiny_classifier(tmp / "sen", ["negative", "neutral", "positive"], [0.0, 0.0, 1.0])),
        "topic_model": str(build_tiny_classifier(tmp / "top", topics, one_hot_bias(topics, "music"), multi_label=True)),
        "toxicity_model": str(build_tiny_classifier(tmp / "tox", ["non-toxic", "toxic"], init_range=0.2)),
    }
    responses = synthetic.write_responses(INSTRUCTIONS, tmp / "responses", seed=0)
    rows = convert.convert_dir(INSTRUCTIONS, responses, "bench")
    rule_rows = [r for r in rows if '"task": "length"' in r["constraint"] or '"task": "keyword"' in r["constraint"]]
    rules_only = build_metric("codi", {})
    _, t_rules = _timed(lambda: rules_only.score_rows(rule_rows))
    metric = build_metric("codi", params)
    metric.score_rows(rows[:16])  # load the judges
    out, t_all = _timed(lambda: metric.score_rows(rows))
    assert sum(o["error"] is not None for o in out) == 0
    return [
        (f"rule checks (length + keyword), {len(rule_rows)} rows", f"{len(rule_rows) / t_rules:.0f} rows/s", "–"),
        (f"codi metric, all {len(rows)} shipped instructions, tiny judges", f"{len(rows) / t_all:.0f} rows/s", "–"),
    ]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = pathlib.Path(tmp)
        table = bench_self_bleu() + bench_classifier(tmp_path) + bench_metric(tmp_path)
    lines = ["# CoDI-Eval scoring benchmark", "", f"Machine: {os.cpu_count()} CPUs, torch CPU, float32.", "",
             "| measurement | time / throughput | speed-up |", "|---|---|---|"]  # fmt: skip
    lines += [f"| {a} | {b} | {c} |" for a, b, c in table]
    text = "\n".join(lines) + "\n"
    print(text)
    out = REPO / "benchmarks" / "results" / "codi.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

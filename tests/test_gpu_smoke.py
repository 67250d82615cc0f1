"""CUDA smoke tests (marker `gpu`; skipped where torch sees no CUDA device): the engine's
numbers on CUDA against CPU on the tiny models, bfloat16, out-of-memory halving that frees
the failed attempt's device memory, and a real device-side assert recognised as an
accelerator error. Run on a GPU machine: `pytest -m gpu`."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

SOURCES = ["The council approved the new budget after a long debate on Tuesday night.",
           "Heavy rain closed the mountain road for the second time this week."] * 3
TARGETS = ["The budget was approved.", "Rain closed the road again.", "A debate happened.",
           "The road is open.", "Council meets Tuesday.", "It rained this week."]


def _bart(tiny_models, device, dtype="float32"):
    from scoring.bartscore import BARTScorer

    return BARTScorer(tiny_models["bart"], device=device, dtype=dtype)


def test_bartscore_on_cuda_matches_cpu(tiny_models):
    cpu = _bart(tiny_models, "cpu").score(SOURCES, TARGETS)
    cuda = _bart(tiny_models, "cuda").score(SOURCES, TARGETS)
    assert not torch.backends.cuda.matmul.allow_tf32  # float32 means float32 (TF32 gave a 0.025 gap)
    # IEEE float32 on both sides, only the summation order differs (cuBLAS, SDPA kernels): each
    # logit is off by ~1e-6 relative, so a mean log-probability by well under 1e-3 nats
    assert max(abs(a - b) for a, b in zip(cpu, cuda)) < 1e-3


def test_perplexity_on_cuda_matches_cpu(tiny_models):
    from scoring.registry import build_metric

    rows = [{"id": str(i), "text": text} for i, text in enumerate(TARGETS)]
    cpu = build_metric("perplexity", {"model": tiny_models["gpt2"], "device": "cpu"}).score_rows(rows)
    cuda = build_metric("perplexity", {"model": tiny_models["gpt2"], "device": "cuda"}).score_rows(rows)
    for a, b in zip(cpu, cuda):
        assert a["error"] is None and b["error"] is None
        assert a["perplexity"] == pytest.approx(b["perplexity"], rel=1e-2)


def test_bfloat16_on_cuda_stays_near_float32(tiny_models):
    full = _bart(tiny_models, "cuda").score(SOURCES, TARGETS)
    half = _bart(tiny_models, "cuda", "bfloat16").score(SOURCES, TARGETS)
    assert all(torch.isfinite(torch.tensor(half)))
    assert max(abs(a - b) for a, b in zip(full, half)) < 0.25  # nats per token, random weights


def test_oom_halving_releases_the_failed_attempt_on_the_device():
    from scoring.engine import run_splitting_on_oom

    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated()
    at_retry = []

    def run(batch):
        if len(batch) < 8:
            at_retry.append(torch.cuda.memory_allocated() - baseline)
        activation = torch.empty(len(batch), 16 << 20, device="cuda")  # 64 MiB per item
        if len(batch) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        del activation

    run_splitting_on_oom(list(range(8)), run)
    assert at_retry and max(at_retry) == 0  # nothing of an earlier attempt is still allocated


def test_a_device_side_assert_is_an_accelerator_error():
    code = textwrap.dedent("""
        import torch
        from scoring.errors import is_accelerator_error
        values = torch.zeros(4, device="cuda")
        try:
            values[torch.tensor([10], device="cuda")] = 1.0
            torch.cuda.synchronize()
        except Exception as exc:
            print("FATAL", is_accelerator_error(exc))
        try:
            torch.ones(2, device="cuda").sum().item()
            print("AFTER ok")
        except Exception as exc:
            print("AFTER", is_accelerator_error(exc))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "FATAL True" in done.stdout, done.stdout + done.stderr
    assert "AFTER True" in done.stdout  # sticky: the context is lost for every later call


def test_pair_nll_never_syncs_before_the_final_collect(tiny_models, monkeypatch):
    """`torch.cuda.set_sync_debug_mode("error")` raises on any synchronising call; it is lifted
    only inside the engine's one collect at the end of the call."""
    from scoring import seq2seq_engine as engine_module
    from scoring.bartscore import BARTScorer
    from scoring.engine import Ragged

    scorer = BARTScorer(tiny_models["bart"], device="cuda", token_budget=256)
    collect = engine_module.collect

    def collect_allowed(pending, store):
        torch.cuda.set_sync_debug_mode(0)
        try:
            collect(pending, store)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    monkeypatch.setattr(engine_module, "collect", collect_allowed)
    sources = Ragged.from_lists([scorer.tokenizer(s)["input_ids"] for s in SOURCES])
    targets = Ragged.from_lists([scorer.tokenizer(t)["input_ids"] for t in TARGETS * 3])
    groups = [range(3 * i, 3 * i + 3) for i in range(len(SOURCES))]
    scorer.engine.pair_nll(sources, targets, groups)  # warm-up (lazy initialisation may sync)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        nll = scorer.engine.pair_nll(sources, targets, groups)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert len(nll) == len(TARGETS) * 3 and all(value > 0 for value in nll)


def test_fused_logsumexp_on_cuda_equals_the_eager_one():
    from scoring.engine import fused_logsumexp

    for rows in (1, 37, 2048):
        logits = torch.randn(rows, 50_265, device="cuda") * 8
        got, want = fused_logsumexp(logits.clone()), torch.logsumexp(logits.double(), dim=-1).float()
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-5)


def test_compiled_layers_give_the_eager_scores(tiny_models):
    from scoring.bartscore import BARTScorer

    eager = _bart(tiny_models, "cuda").score(SOURCES, TARGETS)
    compiled = BARTScorer(tiny_models["bart"], device="cuda", compile=True)
    assert compiled.engine.compiled_layers > 0
    scores = compiled.score(SOURCES, TARGETS)
    assert max(abs(a - b) for a, b in zip(eager, scores)) < 1e-3  # float32 both; fused kernels reorder sums


def test_cross_batch_planning_on_cuda_gives_the_per_batch_scores(tiny_models):
    """On CUDA decoder chunks are planned across encoder batches by default: the pooled
    encoder buffers and per-chunk source widths give the per-batch scores (float32), with
    less decoder padding."""
    import random

    from scoring.engine import Ragged

    scorer = _bart(tiny_models, "cuda")
    scorer.engine.token_budget = 96  # several encoder batches per pool
    assert scorer.engine.cross_batch
    rng = random.Random(0)
    vocab = scorer.engine.model.config.vocab_size

    def ids(n):
        return [0] + [rng.randrange(4, vocab) for _ in range(n)] + [2]

    sources = Ragged.from_lists([ids(rng.randrange(3, 40)) for _ in range(40)])
    targets = Ragged.from_lists([ids(rng.choice((1, 2, 5, 9, 14, 22))) for _ in range(40)])
    groups = [range(i, i + 1) for i in range(40)]
    runs = {}
    for cross_batch in (True, False):
        scorer.engine.cross_batch = cross_batch
        scorer.engine.stats.clear()
        runs[cross_batch] = (scorer.engine.pair_nll(sources, targets, groups), dict(scorer.engine.stats))
    pooled, per_batch = runs[True], runs[False]
    assert max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(pooled[0], per_batch[0])) < 1e-4
    assert pooled[1]["decoder_tokens_padded"] <= per_batch[1]["decoder_tokens_padded"]


def test_cuda_defaults_pack_and_fuse_and_keep_the_scores(tiny_models):
    """On CUDA the engines pack (seq2seq encoder and decoder, causal) and run GPT-2's Python GELU
    as one kernel by default, name both in the signature, and give the padded, unfused scores
    (float32)."""
    import copy

    from transformers.activations import NewGELUActivation

    from scoring.engine import CausalLikelihood, Ragged
    from scoring.registry import build_metric

    metric = build_metric("perplexity", {"model": tiny_models["gpt2"], "device": "cuda"})
    engine = metric.scorer.engine
    assert engine.packed and engine.fused_activations == engine.model.config.n_layer
    assert ",packed" in engine.batching() and "tanh_gelu_one_kernel" in str(metric.signature())
    plain_model = copy.deepcopy(engine.model)
    for block in plain_model.transformer.h:  # the Python GELU back, as the CPU runs it
        block.mlp.act = NewGELUActivation()
    plain = CausalLikelihood(plain_model, pad_id=engine.pad_id, fuse_activations=False)
    plain.packed = False
    texts = Ragged.from_lists([[0] + [4 + (7 * i + j) % 200 for j in range(n)] for i, n in enumerate((3, 17, 40, 9, 64))])
    fused, padded = engine.ragged_nll(texts), plain.ragged_nll(texts)
    for (a, n), (b, m) in zip(fused, padded):
        assert n == m and a / n == pytest.approx(b / m, rel=1e-5)
    bart = _bart(tiny_models, "cuda")
    assert bart.engine.packed_encoder and bart.engine.packed_decoder and "packed_decoder" in bart.engine.batching()

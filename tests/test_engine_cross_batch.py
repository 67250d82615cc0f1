"""Decoder chunks planned across encoder batches (docs/gpu.md, "Decoder chunks"): the same
scores as per-batch planning, less decoder padding, the gathered keys/values still bounded,
one device read per call and out-of-memory halving kept."""

from __future__ import annotations

import random

import pytest
import torch

from ctgscore.testing.host_reads import counted_reads
from scoring.bartscore import BARTScorer
from scoring.engine import Ragged, budget_batches


@pytest.fixture(scope="module")
def scorer(tiny_models):
    return BARTScorer(tiny_models["bart"], token_budget=96)


def _work(vocab: int, shape: str, seed: int = 0):
    """Sources and targets of mixed lengths: one target per source, or 1-6 per source."""
    rng = random.Random(seed)

    def ids(n):
        return [0] + [rng.randrange(4, vocab) for _ in range(n)] + [2]

    sources = Ragged.from_lists([ids(rng.randrange(3, 40)) for _ in range(40)])
    counts = [1] * 40 if shape == "distinct" else [rng.randrange(1, 7) for _ in range(40)]
    targets = Ragged.from_lists([ids(rng.choice((1, 2, 5, 9, 14, 22))) for _ in range(sum(counts))])
    groups, start = [], 0
    for count in counts:
        groups.append(range(start, start + count))
        start += count
    return sources, targets, groups


def _run(engine, work, cross_batch: bool, on_cuda: bool):
    engine.cross_batch, engine.on_cuda = cross_batch, on_cuda
    engine.stats.clear()
    try:
        return engine.pair_nll(*work), dict(engine.stats)
    finally:
        engine.cross_batch, engine.on_cuda = False, False


@pytest.mark.parametrize("shape", ["distinct", "grouped"])
@pytest.mark.parametrize("on_cuda", [False, True], ids=["cpu-plan", "cuda-plan"])
def test_cross_batch_scores_equal_per_batch_scores(scorer, shape, on_cuda):
    engine = scorer.engine
    work = _work(scorer.model.config.vocab_size, shape)
    before, per_batch = _run(engine, work, False, on_cuda)
    after, pooled = _run(engine, work, True, on_cuda)
    assert after == pytest.approx(before, rel=1e-6)
    assert per_batch["encoder_passes"] > 4  # several encoder batches, so pools do merge them
    for key in ("decoded_targets", "decoder_tokens_real", "encoded_sources", "encoder_tokens_real"):
        assert pooled[key] == per_batch[key]
    assert per_batch["encoder_tokens_real"] == int(work[0].lengths.sum()) < per_batch["encoder_tokens_padded"]
    assert pooled["decoder_tokens_padded"] < per_batch["decoder_tokens_padded"]
    # pools hold encoder states only (no keys/values, no mask): at most d x 4 bytes per
    # encoded token; keys/values are projected from the pool, never copied into it
    assert 0 < pooled["bytes_pooled"] <= pooled["encoder_tokens_padded"] * engine.model.config.d_model * 4
    if shape == "distinct":  # rows in first-use order: every chunk reads a slice, none gathers
        assert pooled.get("bytes_gathered", 0) == 0


@pytest.mark.parametrize("layout", ["auto", "by_slot"])
def test_cross_batch_chunks_cap_padding_and_gathered_keys(scorer, layout):
    """Every chunk of the pooled plan pads its decoder tokens by at most the cap (auto), and a
    chunk that gathers keys/values counts rows x its own widest source against twice the
    budget (also by slot, where a slot skips sources with fewer targets)."""
    engine = scorer.engine
    engine.on_cuda, engine.layout = True, layout
    try:
        rng = random.Random(1)
        source_widths = sorted((rng.randrange(5, 60) for _ in range(30)), reverse=True)
        lengths = [[rng.randrange(2, 40) for _ in range(rng.randrange(1, 4))] for _ in range(30)]
        chunks = engine._plan(list(range(30)), lengths, source_widths[0], source_widths)
    finally:
        engine.on_cuda, engine.layout = False, "auto"
    assert sorted((i, j) for chunk in chunks for _, i, j in chunk) == [(i, j) for i in range(30) for j in range(len(lengths[i]))]
    for chunk in chunks:
        chunk_lengths = [lengths[i][j] for _, i, j in chunk]
        if layout == "auto":
            assert len(chunk) * max(chunk_lengths) <= (1 + engine.max_decoder_padding) * sum(chunk_lengths)
        rows = [row for row, _, _ in chunk]
        if rows != list(range(rows[0], rows[0] + len(rows))):
            assert len(chunk) * max(source_widths[row] for row in rows) <= 2 * engine.token_budget


def test_budget_batches_caps_chunk_padding_and_widths():
    lengths = [10, 10, 9, 5, 5, 1]
    # 10,10,9,5: 40 padded for 34 real (1.18); a second 5 would make 50 for 39 (1.28)
    assert budget_batches(lengths, range(6), 1000, max_chunk_padding=0.2) == [[0, 1, 2, 3], [4], [5]]
    widths = [30, 10, 10, 10, 10, 10]
    assert budget_batches(lengths, range(6), 1000, widths=widths, width_budget=60) == [[0, 1], [2, 3, 4, 5]]


def test_cross_batch_reads_the_device_once_per_call(scorer):
    engine = scorer.engine
    work = _work(scorer.model.config.vocab_size, "grouped", seed=2)
    engine.cross_batch, engine.on_cuda = True, True
    try:
        with counted_reads() as seen:
            engine.pair_nll(*work)
    finally:
        engine.cross_batch, engine.on_cuda = False, False
    assert engine.stats["encoder_passes"] >= 2 and engine.stats["decoder_passes"] >= 2
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen


def test_cross_batch_halves_a_pool_on_out_of_memory(scorer, monkeypatch):
    engine = scorer.engine
    work = _work(scorer.model.config.vocab_size, "grouped", seed=3)
    expected, _ = _run(engine, work, True, False)

    def fail_on_batches(original, *args, **kwargs):
        batch = kwargs.get("input_ids")
        if batch is not None and batch.shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(*args, **kwargs)

    for module in (scorer.model.get_encoder(), scorer.model.get_decoder()):
        original = module.forward
        monkeypatch.setattr(module, "forward", lambda *a, _o=original, **k: fail_on_batches(_o, *a, **k))
    got, stats = _run(engine, work, True, False)
    assert stats["oom_splits"] > 0
    assert got == pytest.approx(expected, rel=1e-6)


def test_cross_batch_is_on_for_cuda_only_by_default(tiny_models):
    scorer = BARTScorer(tiny_models["bart"])
    assert not scorer.engine.cross_batch  # CPU: per-batch planning, scores and signature as before
    assert scorer.signature_params()["batching"] == "length-sorted,token_budget=4096,decode_token_budget=2048"
    scorer.engine.cross_batch = True
    assert scorer.signature_params()["batching"].endswith(",decoder_pool=4x,max_decoder_padding=0.2")


@pytest.mark.parametrize("shape", ["distinct", "grouped"])
@pytest.mark.parametrize("cross_batch", [False, True], ids=["per-batch", "cross-batch"])
def test_source_runs_give_the_same_scores_and_gather_nothing(scorer, shape, cross_batch):
    """Chunks sorted by source with cross-attention per source (`source_runs`): the scores of
    the gathering path within 1e-6, no byte gathered, one device read per call (planned as on
    CUDA, so the varlen kernel's index tensors are built too; the CPU runs the SDPA reference)."""
    engine = scorer.engine
    work = _work(scorer.model.config.vocab_size, shape, seed=5)
    expected, gathering = _run(engine, work, cross_batch, True)
    engine.source_runs = True
    try:
        with counted_reads() as seen:
            got, stats = _run(engine, work, cross_batch, True)
    finally:
        engine.source_runs = False
    assert got == pytest.approx(expected, rel=1e-6)
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen
    assert stats.get("bytes_gathered", 0) == 0
    if shape == "grouped":
        assert gathering["bytes_gathered"] > 0 and stats["source_run_chunks"] > 0
        assert stats["decoder_passes"] <= gathering["decoder_passes"]  # no gather bound on the chunks

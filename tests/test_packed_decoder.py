"""The packed seq2seq decoder (`Seq2SeqLikelihood.packed_decoder`, docs/gpu.md "Packed tokens"):
cross-attention per source group equals masked dense SDPA, the host-built layout and the chunk
plan are what the decoder needs, and on tiny BART, PEGASUS and mBART the packed engine gives the
padded engine's scores within 1e-6 while computing no padded decoder token and reading the
device once per call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctgscore.testing.host_reads import counted_reads
from scoring.planning import source_grouped_chunks
from scoring.ragged import Ragged, packed_targets
from scoring.varlen_attention import CrossSegments, cu_seqlens, packed_cross_attention, reference_cross_attention
from tests.test_packed_attention import _tiny_mbart, packed_matches_padded


def _dense_cross_attention(query, key, value, query_lengths, key_lengths):
    """The dense way: every query against every key, a boolean mask letting query group u see
    key group u only."""
    query_group = torch.repeat_interleave(torch.arange(len(query_lengths)), torch.tensor(query_lengths))
    key_group = torch.repeat_interleave(torch.arange(len(key_lengths)), torch.tensor(key_lengths))
    allowed = query_group[:, None] == key_group[None, :]
    heads = query.shape[1]
    key = key.repeat_interleave(heads // key.shape[1], dim=1)
    value = value.repeat_interleave(heads // value.shape[1], dim=1)
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=allowed).transpose(1, 2)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_cross_attention_per_source_group_equals_masked_dense_sdpa(kv_heads):
    generator = torch.Generator().manual_seed(2)
    query_lengths, key_lengths = (3, 20, 1, 9), (7, 2, 15, 4)  # a source's targets may outnumber its tokens
    query = torch.randn(1, 4, sum(query_lengths), 8, generator=generator)
    key, value = (torch.randn(1, kv_heads, sum(key_lengths), 8, generator=generator) for _ in range(2))
    cross = CrossSegments(query_lengths, key_lengths, torch.from_numpy(cu_seqlens(query_lengths)),
                          torch.from_numpy(cu_seqlens(key_lengths)), max(query_lengths), max(key_lengths))
    got = packed_cross_attention(query, key, value, cross, scale=None)
    assert got.shape == (1, sum(query_lengths), 4, 8)
    assert torch.allclose(got, _dense_cross_attention(query, key, value, query_lengths, key_lengths), atol=1e-6)
    # a group never reads another group's keys: changing the last source changes only its queries
    key[:, :, -4:] += 1.0
    changed = reference_cross_attention(query, key, value, query_lengths, key_lengths, None)
    assert torch.equal(changed[:, :-9], got[:, :-9]) and not torch.equal(changed[:, -9:], got[:, -9:])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cross_attention_kernel_matches_the_reference_on_cuda():
    """torch's varlen FlashAttention with separate query and key cu_seqlens (bf16) against the
    per-group SDPA reference in float32."""
    from scoring.varlen_attention import varlen_kernel_available

    query_lengths, key_lengths = (30, 700, 5, 128), (400, 90, 1, 257)
    query = torch.randn(1, 8, sum(query_lengths), 64, device="cuda", dtype=torch.bfloat16)
    key, value = (torch.randn(1, 8, sum(key_lengths), 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    if not varlen_kernel_available(query):
        pytest.skip(f"torch {torch.__version__} has no varlen_attn that takes a scale")
    cross = CrossSegments(query_lengths, key_lengths, torch.from_numpy(cu_seqlens(query_lengths)).cuda(),
                          torch.from_numpy(cu_seqlens(key_lengths)).cuda(), max(query_lengths), max(key_lengths))
    got = packed_cross_attention(query, key, value, cross, scale=None)
    want = reference_cross_attention(query.float(), key.float(), value.float(), query_lengths, key_lengths, None)
    assert (got.float() - want).abs().max().item() < 2e-2


def test_packed_targets_are_shifted_right_per_target_on_the_host():
    targets = Ragged.from_lists([[5, 6, 7], [8], [9, 10], [11, 12, 13, 14]])
    parts = packed_targets(targets, [2, 0, 3], start_id=2, group_sizes=[2, 1], key_lengths=[6, 4], device="cpu")
    assert parts["labels"].tolist() == [9, 10, 5, 6, 7, 11, 12, 13, 14]
    assert parts["inputs"].tolist() == [2, 9, 2, 5, 6, 2, 11, 12, 13]
    assert parts["positions"].tolist() == [0, 1, 0, 1, 2, 0, 1, 2, 3]
    assert parts["owners"].tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 2]
    assert parts["lengths"].tolist() == [2, 3, 4]
    assert parts["cu_seqlens"].tolist() == [0, 2, 5, 9]
    assert parts["cu_seqlens_q"].tolist() == [0, 5, 9]  # source 0's two targets, then source 1's one
    assert parts["cu_seqlens_k"].tolist() == [0, 6, 10]
    assert {parts[name].dtype for name in ("cu_seqlens", "cu_seqlens_q", "cu_seqlens_k")} == {torch.int32}


def test_chunks_count_real_target_tokens_and_their_sources():
    # source 0 (70 tokens) has four 10-token targets, source 1 (14 tokens) one of 3
    pair_sources, pair_lengths, source_lengths = [0, 0, 0, 0, 1], [10, 10, 10, 10, 3], [70, 14]
    chunks = source_grouped_chunks(pair_sources, pair_lengths, source_lengths, token_budget=34, source_tokens_per_token=7)
    # 10 + 70/7 = 20, +10 = 30; the third target overflows: source 0 continues (20, 30), and
    # source 1 would add 3 + 14/7 = 5 (35 > 34)
    assert chunks == [[0, 1], [2, 3], [4]]
    assert source_grouped_chunks(pair_sources, pair_lengths, source_lengths, 35, 7) == [[0, 1], [2, 3, 4]]
    assert source_grouped_chunks(pair_sources, pair_lengths, source_lengths, 1000, 7) == [[0, 1, 2, 3, 4]]
    assert source_grouped_chunks(pair_sources, pair_lengths, source_lengths, 1000, 7, max_items=2) == [[0, 1], [2, 3], [4]]
    assert source_grouped_chunks([0], [50], [70], token_budget=10, source_tokens_per_token=7) == [[0]]  # one pair always fits


def _model(tiny_models, name):
    from transformers import AutoModelForSeq2SeqLM

    return _tiny_mbart() if name == "mbart" else AutoModelForSeq2SeqLM.from_pretrained(tiny_models[name]).eval()


def _workload(config, shape, seed=11):
    """(sources, targets, groups) of ids for a workload shape."""
    rng = np.random.default_rng(seed)

    def ids(n):
        return rng.integers(3, config.vocab_size, size=n).tolist() + [config.eos_token_id]

    if shape == "distinct":
        source_lengths, counts = (4, 17, 9, 2, 30, 12, 6, 21), [1] * 8
    elif shape == "many":  # 16 targets per source: a source's targets overflow a 64-token chunk
        source_lengths, counts = (25, 8, 14), [16] * 3
    elif shape == "mixed":
        source_lengths, counts = (4, 17, 9, 2, 30, 12, 6, 21), [1, 3, 1, 2, 1, 5, 1, 2]
    else:  # one source, one target
        source_lengths, counts = (11,), [1]
    sources = Ragged.from_lists([ids(n) for n in source_lengths])
    target_lengths = rng.integers(1, 12, size=sum(counts))
    targets = Ragged.from_lists([ids(int(n)) for n in target_lengths])
    groups = [range(sum(counts[:i]), sum(counts[: i + 1])) for i in range(len(counts))]
    return sources, targets, groups


@pytest.mark.parametrize("cross_batch", [False, True], ids=["per-batch", "cross-batch"])
@pytest.mark.parametrize("shape", ["distinct", "many", "mixed", "single"])
@pytest.mark.parametrize("name", ["bart", "pegasus", "mbart"])
def test_a_packed_decoder_gives_the_padded_scores_and_pads_nothing(tiny_models, name, shape, cross_batch):
    from scoring.engine import Seq2SeqLikelihood

    model = _model(tiny_models, name)
    config = model.config
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=64, cross_batch=cross_batch)
    engine.on_cuda = True  # plan and collect as on CUDA: one collect per call
    sources, targets, groups = _workload(config, shape)
    padded_batching = engine.batching()
    packed_matches_padded(engine, "packed_decoder", sources, targets, groups)
    stats = engine.stats
    assert stats["decoder_tokens_padded"] == stats["decoder_tokens_real"] == int(targets.lengths.sum())
    assert stats["encoder_tokens_padded"] == stats["encoder_tokens_real"] == int(sources.lengths.sum())
    assert stats["decoded_targets"] == len(targets)
    assert stats["cross_kv_tokens"] >= int(sources.lengths.sum())  # every source's keys/values projected
    if shape == "many":  # the sources' targets fill several chunks: a split source is projected again
        assert stats["decoder_passes"] >= 3
        assert stats["cross_kv_tokens"] > int(sources.lengths.sum())
    assert engine.batching() != padded_batching and "packed_decoder" in engine.batching()


@pytest.mark.parametrize("max_batch_items", [None, 1, 3])
@pytest.mark.parametrize("cross_batch", [False, True], ids=["per-batch", "cross-batch"])
def test_every_target_of_scattered_groups_is_scored_once(tiny_models, cross_batch, max_batch_items):
    """Groups that list targets out of order, a source with no target (its slot is never
    planned) and a target of no source (NaN), under `max_batch_items`: the packed decoder's
    scores are the padded path's, target by target."""
    from scoring.engine import Seq2SeqLikelihood

    model = _model(tiny_models, "bart")
    config = model.config
    sources, targets, groups = _workload(config, "mixed")
    order = np.random.default_rng(3).permutation(len(targets))
    groups = [[int(order[k]) for k in group] for group in groups]
    groups[2] = []  # its one target belongs to no source
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=64, max_batch_items=max_batch_items, cross_batch=cross_batch)
    want = engine.pair_nll(sources, targets, groups)
    engine.packed_decoder = True
    engine.stats.clear()
    got = engine.pair_nll(sources, targets, groups)
    assert np.isnan(got).sum() == np.isnan(want).sum() == 1
    assert np.allclose(got, want, rtol=1e-6, equal_nan=True)
    assert engine.stats["decoded_targets"] == len(targets) - 1
    if max_batch_items == 1:
        assert engine.stats["decoder_passes"] == len(targets) - 1


def test_pool_of_several_batches_copies_real_tokens_only(tiny_models):
    from scoring.engine import Seq2SeqLikelihood

    model = _model(tiny_models, "bart")
    config = model.config
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=64, cross_batch=True)
    engine.packed_decoder = True
    sources, targets, groups = _workload(config, "distinct")
    engine.pair_nll(sources, targets, groups)
    assert engine.stats["encoder_passes"] >= 2  # a pool of several encoder batches
    assert engine.stats["bytes_pooled"] == int(sources.lengths.sum()) * config.d_model * 4  # float32 states, no padding


def test_the_packed_decoder_halves_a_chunk_that_runs_out_of_memory(tiny_models, monkeypatch):
    from scoring.engine import Seq2SeqLikelihood

    model = _model(tiny_models, "bart")
    config = model.config
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=64)
    engine.packed_decoder = True
    sources, targets, groups = _workload(config, "many")
    want = engine.pair_nll(sources, targets, groups)
    original, failed = engine._decode_packed, []

    def decode(chunk_pairs, *args):
        if len(chunk_pairs) > 2 and not failed:
            failed.append(len(chunk_pairs))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(chunk_pairs, *args)

    monkeypatch.setattr(engine, "_decode_packed", decode)
    engine.stats.clear()
    assert engine.pair_nll(sources, targets, groups) == pytest.approx(want, rel=1e-6)
    assert failed and engine.stats["oom_splits"] == 1


def test_the_batching_string_is_unchanged_while_the_packed_decoder_is_off(tiny_models):
    from scoring.engine import Seq2SeqLikelihood

    model = _model(tiny_models, "bart")
    engine = Seq2SeqLikelihood(model, pad_id=1, decoder_start_id=2, token_budget=64)
    assert engine.packed_decoder is False
    assert engine.batching() == "length-sorted,token_budget=64,decode_token_budget=64"
    engine.packed_decoder = True
    assert engine.batching() == "length-sorted,token_budget=64,decode_token_budget=64,packed_decoder,source_tokens_per_decoder_token=7"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_packed_decoder_on_cuda_gives_the_padded_scores(tiny_models, dtype):
    """On CUDA (bfloat16: torch's varlen kernels for self- and cross-attention) against the
    padded float32 path on the same device, one host read per call."""
    from scoring.engine import Seq2SeqLikelihood

    model = _model(tiny_models, "bart").to("cuda")
    config = model.config
    sources, targets, groups = _workload(config, "mixed")
    padded = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=64).pair_nll(sources, targets, groups)
    engine = Seq2SeqLikelihood(model.to(dtype), pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=64)
    engine.packed_decoder = True
    with counted_reads() as seen:
        got = engine.pair_nll(sources, targets, groups)
    assert len(seen) == 1, seen
    assert engine.stats["decoder_tokens_padded"] == engine.stats["decoder_tokens_real"]
    bound = 1e-3 if dtype == torch.float32 else 0.25  # nats per token (random weights; bf16 as test_gpu_smoke)
    assert max(abs(a - b) for a, b in zip(got, padded)) < bound

"""Packed tokens (docs/gpu.md, "Packed tokens"): the block-diagonal attention kernel equals SDPA
with a padding mask per sequence; the packed causal engine gives the padded engine's scores
within 1e-6 on GPT-2 and a Llama, computes no padded token, and reads the device once per call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctgscore.testing.host_reads import counted_reads
from scoring.ragged import Ragged, packed_causal
from scoring.varlen_attention import PackedSegments, packed_attention, reference_packed_attention


def _padded_attention(query, key, value, lengths, causal):
    """The padded way: every sequence in its own row, right-padded, SDPA with a boolean mask."""
    heads, kv_heads = query.shape[1], key.shape[1]
    key = key.repeat_interleave(heads // kv_heads, dim=1)
    value = value.repeat_interleave(heads // kv_heads, dim=1)
    width, outputs, start = max(lengths), [], 0
    for length in lengths:
        rows = [tensor[0, :, start : start + length] for tensor in (query, key, value)]
        padded = [torch.nn.functional.pad(row, (0, 0, 0, width - length)) for row in rows]
        allowed = torch.zeros(width, width, dtype=torch.bool)
        allowed[:, :length] = True
        if causal:
            allowed &= torch.ones(width, width, dtype=torch.bool).tril()
        out = torch.nn.functional.scaled_dot_product_attention(*(p[None] for p in padded), attn_mask=allowed)
        outputs.append(out[0, :, :length].transpose(0, 1))
        start += length
    return torch.cat(outputs)[None]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_packed_attention_equals_padded_masked_sdpa(causal, kv_heads):
    generator = torch.Generator().manual_seed(0)
    lengths = [1, 7, 3, 12, 5]
    total = sum(lengths)
    query = torch.randn(1, 4, total, 8, generator=generator)
    key, value = (torch.randn(1, kv_heads, total, 8, generator=generator) for _ in range(2))
    segments = PackedSegments.of(lengths, "cpu")
    assert segments.cu_seqlens.tolist() == [0, 1, 8, 11, 23, 28] and segments.total == total
    got = packed_attention(query, key, value, segments, scale=None, causal=causal)
    assert got.shape == (1, total, 4, 8)
    assert torch.allclose(got, _padded_attention(query, key, value, lengths, causal), atol=1e-6)
    # a sequence never sees another: changing the last one leaves the others' outputs alone
    key[:, :, -5:] += 1.0
    changed = reference_packed_attention(query, key, value, lengths, None, causal)
    assert torch.equal(changed[:, : total - 5], got[:, : total - 5]) and not torch.equal(changed, got)


def test_packed_batch_layout_is_built_on_the_host():
    ragged = Ragged.from_lists([[5, 6, 7], [8, 9], [10, 11, 12, 13]])
    parts = packed_causal(ragged, [2, 0], "cpu")
    assert parts["ids"].tolist() == [10, 11, 12, 13, 5, 6, 7]
    assert parts["positions"].tolist() == [0, 1, 2, 3, 0, 1, 2]
    assert parts["predicting"].tolist() == [0, 1, 2, 4, 5]  # not a sequence's last token
    assert parts["owners"].tolist() == [0, 0, 0, 1, 1]
    assert parts["cu_seqlens"].tolist() == [0, 4, 7] and parts["cu_seqlens"].dtype == torch.int32


def _causal_model(tiny_models, name):
    from transformers import AutoModelForCausalLM

    from ctgscore.testing.tiny_causal import tiny_llama

    return tiny_llama() if name == "llama" else AutoModelForCausalLM.from_pretrained(tiny_models["gpt2"]).eval()


def _sequences(vocabulary, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocabulary, size=n).tolist() for n in (2, 5, 17, 30, 9, 3, 12, 41, 6)]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_packed_perplexity_equals_padded_and_pads_nothing(tiny_models, name):
    from scoring.engine import CausalLikelihood

    model = _causal_model(tiny_models, name)
    engine = CausalLikelihood(model, pad_id=0, token_budget=64)
    assert engine.can_pack()
    sequences = _sequences(model.config.vocab_size)
    padded = engine.sequence_nll(sequences)
    padded_stats = dict(engine.stats)
    engine.stats.clear()
    engine.packed = True
    packed = engine.sequence_nll(sequences)
    assert [count for _, count in packed] == [count for _, count in padded]
    assert [total for total, _ in packed] == pytest.approx([total for total, _ in padded], rel=1e-6)
    assert engine.stats["forward_passes"] >= 2  # several packed rows
    assert engine.stats["tokens_padded"] == engine.stats["tokens_real"] == sum(map(len, sequences))
    assert padded_stats["tokens_real"] == engine.stats["tokens_real"] < padded_stats["tokens_padded"]


def test_packed_perplexity_reads_the_device_once(tiny_models):
    from scoring.engine import CausalLikelihood

    model = _causal_model(tiny_models, "gpt2")
    engine = CausalLikelihood(model, pad_id=0, token_budget=48)
    engine.packed, engine.on_cuda = True, True  # collect once at the end, as on CUDA
    ragged = Ragged.from_lists(_sequences(model.config.vocab_size, seed=4))
    with torch.inference_mode(), counted_reads() as seen:
        engine.ragged_nll(ragged)
    assert engine.stats["forward_passes"] >= 2
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen


def test_packing_is_refused_where_it_cannot_be_exact():
    from ctgscore.testing.tiny_causal import tiny_gemma2
    from scoring.engine import CausalLikelihood

    engine = CausalLikelihood(tiny_gemma2(), pad_id=0)  # eager attention: not the engine's function
    assert not engine.can_pack()
    engine.packed = True
    with pytest.raises(ValueError, match="packed sequences are not supported for model type 'gemma2'"):
        engine.sequence_nll([[3, 4, 5]])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_varlen_kernel_matches_the_reference_on_cuda():
    """torch's varlen FlashAttention (bf16) against the per-sequence SDPA reference."""
    from scoring.varlen_attention import varlen_kernel_available

    lengths = [1, 70, 33, 128, 5]
    total = sum(lengths)
    query, key, value = (torch.randn(1, 8, total, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    if not varlen_kernel_available(query):
        pytest.skip(f"torch {torch.__version__} has no varlen_attn that takes a scale")
    segments = PackedSegments.of(lengths, "cuda")
    got = packed_attention(query, key, value, segments, scale=None, causal=True)
    want = reference_packed_attention(query.float(), key.float(), value.float(), lengths, None, True)
    assert (got.float() - want).abs().max().item() < 2e-2


def _gathered_cross_attention(query, key, value, row_sources, source_lengths):
    """The gathering way: every row gets its source's keys/values, padding masked out."""
    index = torch.tensor(row_sources)
    keys, values = key.index_select(0, index), value.index_select(0, index)
    allowed = torch.arange(key.shape[2])[None, :] < torch.tensor(source_lengths)[index][:, None]
    out = torch.nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=allowed[:, None, None, :])
    return out.transpose(1, 2)


def test_source_runs_attention_equals_gathered_masked_sdpa():
    from scoring.varlen_attention import SourceRuns, source_run_attention

    generator = torch.Generator().manual_seed(1)
    row_sources, source_lengths = (0, 0, 0, 2, 3, 3), (5, 9, 7, 2)  # source 1 read by no row
    query = torch.randn(6, 4, 3, 8, generator=generator)
    key, value = (torch.randn(4, 9, 4, 8, generator=generator).transpose(1, 2) for _ in range(2))  # the projection's layout
    runs = SourceRuns(row_sources, source_lengths)
    assert runs.runs() == [(0, 0, 3), (2, 3, 1), (3, 4, 2)]
    got = source_run_attention(query, key, value, runs, scale=None)
    assert torch.allclose(got, _gathered_cross_attention(query, key, value, row_sources, source_lengths), atol=1e-6)
    indexed = runs.with_kernel_index(query_length=3, key_width=9, device="cpu")
    cu_q, cu_k, used = (tensor.tolist() for tensor in indexed.kernel_index)
    assert (cu_q, cu_k, used) == ([0, 9, 12, 18], [0, 18, 27, 36], [5, 7, 2])
    assert torch.equal(source_run_attention(query, key, value, indexed, scale=None), got)  # CPU: the reference


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_source_runs_kernel_matches_the_reference_on_cuda():
    from scoring.varlen_attention import SourceRuns, source_run_attention, varlen_kernel_available

    row_sources, source_lengths = (0, 0, 0, 2, 3, 3), (50, 90, 70, 20)
    query = torch.randn(6, 8, 30, 64, device="cuda", dtype=torch.bfloat16)
    key, value = (torch.randn(4, 90, 8, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
    if not varlen_kernel_available(query, used_keys=True):  # torch 2.11: no `seqused_k`, the reference would run
        pytest.skip(f"torch {torch.__version__}'s varlen_attn cannot run source runs (no seqused_k)")
    runs = SourceRuns(row_sources, source_lengths).with_kernel_index(30, 90, "cuda")
    got = source_run_attention(query, key, value, runs, scale=None)
    want = source_run_attention(query.float(), key.float(), value.float(), SourceRuns(row_sources, source_lengths), None)
    assert (got.float() - want).abs().max().item() < 2e-2


def _tiny_mbart():
    """mBART: learned positions, `layernorm_embedding` and a final `layer_norm` both."""
    from transformers import MBartConfig, MBartForConditionalGeneration

    torch.manual_seed(0)
    config = MBartConfig(vocab_size=300, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
                         decoder_start_token_id=2, attn_implementation="sdpa")
    return MBartForConditionalGeneration(config).eval()


def packed_matches_padded(engine, setting: str, sources, targets, groups) -> dict:
    """One call as the engine is, one with its `setting` (a packed path) on: the same scores
    within 1e-6 and one device read in the packed call. Returns the first call's stats; the
    engine's `stats` are the packed call's."""
    want = engine.pair_nll(sources, targets, groups)
    padded = dict(engine.stats)
    engine.stats.clear()
    setattr(engine, setting, True)
    with counted_reads() as seen:
        got = engine.pair_nll(sources, targets, groups)
    assert got == pytest.approx(want, rel=1e-6)
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen
    return padded


@pytest.mark.parametrize("cross_batch", [False, True], ids=["per-batch", "cross-batch"])
@pytest.mark.parametrize("name", ["bart", "pegasus", "mbart"])
def test_a_packed_encoder_gives_the_padded_scores_and_pads_nothing(tiny_models, name, cross_batch):
    """Sources packed through the encoder (`packed_encoder`): the padded encoder's scores
    within 1e-6, encoder tokens computed equal to real ones, one device read per call."""
    from transformers import AutoModelForSeq2SeqLM

    from scoring.engine import Seq2SeqLikelihood

    model = _tiny_mbart() if name == "mbart" else AutoModelForSeq2SeqLM.from_pretrained(tiny_models[name]).eval()
    config = model.config
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=64, cross_batch=cross_batch)
    engine.on_cuda = True  # plan and collect as on CUDA
    rng = np.random.default_rng(7)

    def ids(n):
        return rng.integers(3, config.vocab_size, size=n).tolist() + [config.eos_token_id]

    sources = Ragged.from_lists([ids(n) for n in (4, 17, 9, 2, 30, 12, 6, 21)])
    counts = [1, 3, 1, 2, 1, 4, 1, 2]
    targets = Ragged.from_lists([ids(int(rng.integers(1, 12))) for _ in range(sum(counts))])
    groups = [range(sum(counts[:i]), sum(counts[: i + 1])) for i in range(len(counts))]
    padded = packed_matches_padded(engine, "packed_encoder", sources, targets, groups)
    assert engine.stats["encoder_passes"] >= 2
    assert engine.stats["encoder_tokens_padded"] == engine.stats["encoder_tokens_real"] == int(sources.lengths.sum())
    assert padded["encoder_tokens_padded"] > padded["encoder_tokens_real"]


@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_a_packed_stack_is_refused_where_it_cannot_be_exact(tiny_models, part):
    from transformers import AutoModelForSeq2SeqLM

    from scoring.engine import Seq2SeqLikelihood

    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_models["bart"], attn_implementation="eager").eval()
    engine = Seq2SeqLikelihood(model, pad_id=1, decoder_start_id=2)
    setattr(engine, f"packed_{part}", True)
    with pytest.raises(ValueError, match=f"a packed {part} is not supported for model type 'bart' with attention 'eager'"):
        engine.pair_nll(Ragged.from_lists([[0, 5, 2]]), Ragged.from_lists([[0, 6, 2]]), [range(0, 1)])


# the keyword parameters of `varlen_attn` in three torch releases (2.10's docs, 2.11's, 2.12's on)
_VARLEN_2_10 = frozenset({"query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k", "is_causal", "return_aux"})
_VARLEN_2_11 = frozenset({"query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k", "return_aux", "scale", "window_size"})
_VARLEN_2_12 = _VARLEN_2_11 | {"enable_gqa", "seqused_k", "block_table", "num_splits"}


def test_varlen_kernel_is_used_only_where_the_installed_signature_takes_the_call():
    """A GPU machine may hold an older torch than this one: a call the installed `varlen_attn`
    cannot spell takes the SDPA reference instead of failing with a TypeError."""
    from scoring.varlen_attention import kernel_supports

    assert not kernel_supports(None)
    assert not kernel_supports(_VARLEN_2_10)  # no `scale`: BART's and Gemma's scaling cannot be passed
    assert kernel_supports(_VARLEN_2_11) and not kernel_supports(_VARLEN_2_11, grouped=True)
    assert not kernel_supports(_VARLEN_2_11, used_keys=True)
    assert kernel_supports(_VARLEN_2_12, grouped=True, used_keys=True)


def test_varlen_kernel_keywords_are_spelled_for_the_installed_signature():
    from scoring.varlen_attention import kernel_keywords

    assert kernel_keywords(_VARLEN_2_11, causal=True) == {"window_size": (-1, 0)}
    assert kernel_keywords(_VARLEN_2_11, causal=False) == {"window_size": (-1, -1)}
    assert kernel_keywords(_VARLEN_2_10 | {"scale"}, causal=True) == {"is_causal": True}
    used = torch.tensor([3, 4])
    spelled = kernel_keywords(_VARLEN_2_12, causal=False, grouped=True, used_keys=used)
    assert spelled["enable_gqa"] is True and spelled["seqused_k"] is used and spelled["window_size"] == (-1, -1)


def test_which_packed_calls_take_the_kernel_is_reported_per_torch_release(monkeypatch):
    from scoring import varlen_attention

    expected = {None: (False, False, False), _VARLEN_2_10: (False, False, False), _VARLEN_2_11: (True, False, False),
                _VARLEN_2_12: (True, True, True)}
    for keywords, (plain, grouped, used_keys) in expected.items():
        monkeypatch.setattr(varlen_attention, "_VARLEN_KEYWORDS", keywords)
        assert varlen_attention.varlen_support() == {"plain": plain, "grouped_heads": grouped, "source_runs": used_keys}


def test_the_installed_varlen_signature_is_read_from_torch():
    from scoring.varlen_attention import varlen_keywords

    keywords = varlen_keywords()
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        assert keywords is None
    else:
        import inspect

        assert keywords == frozenset(inspect.signature(varlen_attn).parameters)


@pytest.mark.parametrize("causal", [True, False])
def test_the_installed_varlen_attn_accepts_every_call_the_engine_lets_through(causal):
    """Each call `kernel_supports` passes to the installed `varlen_attn`, spelled by
    `run_varlen_kernel`, on meta tensors (torch's shape-only version of the kernel: no GPU
    needed): keywords that drifted in another torch release fail here, not on a lent GPU.
    torch 2.11 takes the plain calls, 2.12 on also grouped heads and used keys."""
    from scoring.varlen_attention import kernel_supports, run_varlen_kernel, varlen_keywords

    keywords = varlen_keywords()
    if keywords is None:
        pytest.skip(f"torch {torch.__version__} has no varlen_attn")
    assert kernel_supports(keywords)  # every release with `scale` takes the plain call
    cu_q, cu_k = torch.tensor([0, 4, 10], dtype=torch.int32), torch.tensor([0, 5, 12], dtype=torch.int32)
    ran = []
    for grouped in (False, True):
        for used_keys in (False, True):
            if not kernel_supports(keywords, grouped, used_keys):
                continue
            query = torch.empty(10, 4, 8, dtype=torch.bfloat16, device="meta")
            key = torch.empty(12, 2 if grouped else 4, 8, dtype=torch.bfloat16, device="meta")
            used = torch.tensor([5, 6], dtype=torch.int32).to("meta") if used_keys else None
            output = run_varlen_kernel(query, key, key.clone(), cu_q.to("meta"), cu_k.to("meta"), 6, 7, 0.125, causal, used)
            assert output.shape == query.shape and output.dtype == query.dtype, (grouped, used_keys)
            ran.append((grouped, used_keys))
    assert ran[0] == (False, False)

"""Compiled layers compile a bounded number of times (docs/gpu.md, compile): the packed paths
hand the attention function host-side lengths that change every chunk, and dynamo guards on
whatever Python ints a traced layer reads, so they reach it only through one opaque op
(`scoring.varlen_attention.packed_attention_op`). Layers are compiled as the engines compile
them (`compile_model_layers`, one backend for all layers, dynamic shapes) with a counting CPU
backend, then run over chunks of different sequence counts and lengths: graphs stay bounded,
no graph break, no fall back to eager at the recompile limit (`raise_recompile_limit`), the
uncompiled scores within 1e-6 and, in the packed paths, one device read per call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctgscore.testing.host_reads import counted_reads
from scoring.engine import CausalLikelihood, Ragged, Seq2SeqLikelihood
from scoring.engine_setup import compile_model_layers
from tests.test_layer_compile import dynamo_or_skip

# (sequence count, longest sequence) of each engine call: every call a new packed layout
CALLS = [(3, 5), (5, 7), (2, 11), (7, 4), (4, 9), (6, 6), (8, 3)]


class _CountingBackend:
    """A torch.compile backend that counts the graphs it is given and runs them as traced."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


@pytest.fixture(autouse=True)
def fresh_dynamo():
    dynamo = dynamo_or_skip()
    dynamo.reset()
    dynamo.utils.counters.clear()
    limits = dynamo.config.recompile_limit, dynamo.config.accumulated_recompile_limit
    yield dynamo.utils.counters
    dynamo.config.recompile_limit, dynamo.config.accumulated_recompile_limit = limits
    dynamo.reset()


def _compile(model) -> _CountingBackend:
    backend = _CountingBackend()
    assert compile_model_layers(model, backend=backend) > 0
    return backend


def _assert_no_break_and_no_eager_fallback(counters):
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    # a frame that hit the recompile limit counts in "total" but not in "ok": it ran eagerly
    assert counters["frames"]["total"] == counters["frames"]["ok"] > 0, dict(counters["frames"])


def _engine_reads(seen: list[str]) -> list[str]:
    """The reads of engine code, which lives in source files. Code dynamo generates at run time
    (a "<...>" file name) calls `.item()` on the CPU scalars it lifts from float attributes
    (LayerNorm eps, attention scale, dropout p; padded graphs too): host memory, no device
    read. The traced graphs the counting backend runs are "<eval_with_key>.N"; torch 2.11's
    guards on those scalars are Python functions of "<string>" (2.13's run in C++)."""
    return [read for read in seen if not read.split(" at ", 1)[1].startswith("<")]


def test_reads_in_code_dynamo_generates_are_not_engine_reads():
    seen = ["item at <eval_with_key>.3:12", "item at <string>:14", "tolist at ragged.py:80", "item at varlen_attention.py:9"]
    assert _engine_reads(seen) == ["tolist at ragged.py:80", "item at varlen_attention.py:9"]


def _causal_calls(vocabulary):
    rng = np.random.default_rng(5)
    return [[rng.integers(3, vocabulary, size=int(rng.integers(2, longest + 2))).tolist() for _ in range(count)]
            for count, longest in CALLS]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_compiled_causal_block_compiles_once_for_every_chunk_layout(tiny_models, fresh_dynamo, name, packed):
    from tests.test_packed_attention import _causal_model

    model = _causal_model(tiny_models, name)
    engine = CausalLikelihood(model, pad_id=0, token_budget=4096)
    engine.packed = packed
    calls = _causal_calls(model.config.vocab_size)
    want = [engine.sequence_nll(sequences) for sequences in calls]
    backend = _compile(model)
    got = [engine.sequence_nll(sequences) for sequences in calls]
    for scores, expected in zip(got, want):
        assert [total for total, _ in scores] == pytest.approx([total for total, _ in expected], rel=1e-6)
    assert 1 <= backend.graphs <= 2, f"{backend.graphs} graphs for {len(CALLS)} chunk layouts"
    _assert_no_break_and_no_eager_fallback(fresh_dynamo)
    if packed:  # the compiled packed path still reads the device once per call
        engine.on_cuda = True
        with counted_reads() as seen:
            engine.ragged_nll(Ragged.from_lists(calls[0] + calls[3]))
        seen = _engine_reads(seen)
        assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen


def _seq2seq_calls(config):
    rng = np.random.default_rng(9)

    def ids(n):
        return rng.integers(3, config.vocab_size, size=n).tolist() + [config.eos_token_id]

    calls = []
    for count, longest in CALLS:
        sources = [ids(int(rng.integers(1, longest + 1))) for _ in range(count)]
        calls.append((sources, [[ids(int(rng.integers(1, longest))) for _ in range(int(rng.integers(1, 4)))] for _ in sources]))
    return calls


@pytest.mark.timeout(600)
@pytest.mark.parametrize("layout", ["padded", "source-runs", "packed"])
@pytest.mark.parametrize("name", ["bart", "pegasus"])
def test_compiled_encoder_and_decoder_layers_compile_a_bounded_number_of_times(tiny_models, fresh_dynamo, name, layout):
    """Encoder and decoder layers share transformers' layer wrapper, so their graphs count
    against one recompile limit. Packed: one graph per layer type (at most one more each),
    whatever the chunk layout. Padded: a decoder layer reads its cache entry by index, so it
    compiles per layer index, chunk kind and cache layout; the limit the engine sets keeps every
    layer compiled rather than falling back to eager. Source runs (padded, cross-batch): the
    row layout reaches the layer through one opaque op too (27 graphs before, 11 after)."""
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_models[name]).eval()
    config = model.config
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=4096, cross_batch=layout == "source-runs")
    packed = layout == "packed"
    engine.packed_encoder = engine.packed_decoder = packed
    engine.source_runs = layout == "source-runs"
    calls = _seq2seq_calls(config)
    want = [engine.mean_nll(sources, targets) for sources, targets in calls]
    backend = _compile(model)
    got = [engine.mean_nll(sources, targets) for sources, targets in calls]
    for scores, expected in zip(got, want):
        assert [nll for group in scores for nll in group] == pytest.approx([nll for group in expected for nll in group], rel=1e-6)
    # padded: an encoder graph, then per decoder layer index one graph per chunk kind (rows
    # contiguous, gathered, source runs, one broadcast source) and cache layout: 11 measured
    bound = 4 if packed else 2 + 6 * config.decoder_layers
    assert 2 <= backend.graphs <= bound, f"{backend.graphs} graphs for {len(CALLS)} chunk layouts"
    _assert_no_break_and_no_eager_fallback(fresh_dynamo)
    if layout == "source-runs":
        assert engine.stats["source_run_chunks"] >= len(CALLS)
    if not packed:
        return
    engine.on_cuda = True  # the compiled packed path still reads the device once per call
    sources, targets = calls[1][0] + calls[4][0], calls[1][1] + calls[4][1]
    counts = [len(group) for group in targets]
    with counted_reads() as seen:
        engine.pair_nll(Ragged.from_lists(sources), Ragged.from_lists([t for group in targets for t in group]),
                        [range(sum(counts[:i]), sum(counts[: i + 1])) for i in range(len(counts))])
    seen = _engine_reads(seen)
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_the_opaque_ops_equal_the_eager_functions_and_pass_opcheck(kv_heads):
    """What a compiled layer calls (`packed_attention_op`, `source_run_attention_op`) gives the
    eager functions' numbers, and its schema and fake (shape-only) version agree with it."""
    from scoring.varlen_attention import (
        CrossSegments,
        PackedSegments,
        SourceRuns,
        cu_seqlens,
        packed_attention,
        packed_attention_op,
        packed_cross_attention,
        source_run_attention,
        source_run_attention_op,
    )

    generator = torch.Generator().manual_seed(3)
    lengths = (4, 1, 9, 3)
    query = torch.randn(1, 4, sum(lengths), 8, generator=generator)
    key, value = (torch.randn(1, kv_heads, sum(lengths), 8, generator=generator) for _ in range(2))
    segments = PackedSegments.of(lengths, "cpu")
    for causal in (True, False):
        args = (query, key, value, segments.host_lengths, segments.host_lengths, segments.cu_seqlens, segments.cu_seqlens,
                0.3, causal)
        assert torch.equal(packed_attention_op(*args), packed_attention(query, key, value, segments, 0.3, causal))
        torch.library.opcheck(packed_attention_op, args)
    key_lengths = (7, 2, 5, 11)
    cross_keys, cross_values = (torch.randn(1, kv_heads, sum(key_lengths), 8, generator=generator) for _ in range(2))
    cross = CrossSegments(lengths, key_lengths, torch.from_numpy(cu_seqlens(lengths)), torch.from_numpy(cu_seqlens(key_lengths)),
                          max(lengths), max(key_lengths))
    args = (query, cross_keys, cross_values, cross.host_query_lengths, cross.host_key_lengths, cross.cu_seqlens_q,
            cross.cu_seqlens_k, None, False)
    assert torch.equal(packed_attention_op(*args), packed_cross_attention(query, cross_keys, cross_values, cross, None))
    torch.library.opcheck(packed_attention_op, args)
    runs = SourceRuns((0, 0, 2, 3, 3), (5, 2, 7, 4))
    rows = torch.randn(5, 4, 3, 8, generator=generator)
    pool_keys, pool_values = (torch.randn(4, kv_heads, 7, 8, generator=generator) for _ in range(2))
    if kv_heads != 4:  # source runs take equal head counts
        return
    args = (rows, pool_keys, pool_values, runs.host_row_sources, runs.host_source_lengths, None, None, None, 0.5)
    assert torch.equal(source_run_attention_op(*args), source_run_attention(rows, pool_keys, pool_values, runs, 0.5))
    torch.library.opcheck(source_run_attention_op, args)

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

from ctgscore.testing.host_reads import counted_reads, device_reads, read_site
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


def test_reads_in_code_dynamo_generates_are_not_engine_reads():
    """Dynamo-generated code ("<eval_with_key>.N" graphs, torch 2.11's "<string>" guards) and
    inductor's wrappers (in its cache folder) call `.item()` on CPU scalars it lifts from float
    attributes (LayerNorm eps, attention scale, dropout p): host memory, no device read."""
    sites = [("<eval_with_key>.3", 12), ("<string>", 14), ("/work/scoring/ragged.py", 80),
             ("/tmp/torchinductor_root/ab/cab12.py", 40), ("/work/scoring/varlen_attention.py", 9)]
    seen = [f"item at {read_site(name, line)}" for name, line in sites]
    assert seen[3] == "item at <inductor:cab12.py>:40"
    assert device_reads(seen) == ["item at ragged.py:80", "item at varlen_attention.py:9"]


def test_cuda_only_leaves_out_reads_of_host_tensors():
    host = torch.ones(2)
    with counted_reads(cuda_only=True) as seen:
        assert host.sum().item() == 2.0 and host.tolist() == [1.0, 1.0]
    assert seen == []
    with counted_reads() as seen:
        host.sum().item()
    assert len(seen) == 1 and seen[0].startswith("item at test_compile_counts.py:")


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
        seen = device_reads(seen)
        assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen


@pytest.mark.unit
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_packed_causal_block_compiles_no_graph_for_a_single_sequence_chunk(tiny_models, fresh_dynamo, name):
    """A packed causal block traced on chunks of several sequences is not specialised on a
    count above 1: a later chunk of one sequence compiles no further graph (old code: 1 more,
    guard `2 <= host_lengths.size()[0]`), with the uncompiled scores."""
    from tests.test_packed_attention import _causal_model

    model = _causal_model(tiny_models, name)
    engine = CausalLikelihood(model, pad_id=0, token_budget=4096)
    engine.packed = True
    rng = np.random.default_rng(4)
    vocabulary = model.config.vocab_size
    warm_up = [[rng.integers(3, vocabulary, size=int(rng.integers(3, 12))).tolist() for _ in range(count)] for count in (3, 5, 4)]
    held_out = [[rng.integers(3, vocabulary, size=size).tolist()] for size in (2, 3, 9)]
    want = [engine.sequence_nll(sequences) for sequences in held_out]
    backend = _compile(model)
    for sequences in warm_up:
        engine.sequence_nll(sequences)
    assert backend.graphs == 1
    got = [engine.sequence_nll(sequences) for sequences in held_out]
    assert backend.graphs == 1, f"{backend.graphs - 1} more graphs for single-sequence chunks"
    for scores, expected in zip(got, want):
        assert [total for total, _ in scores] == pytest.approx([total for total, _ in expected], rel=1e-6)
    _assert_no_break_and_no_eager_fallback(fresh_dynamo)


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
    whatever the chunk layout. Padded: each decoder layer reads its own cache at index 0, so it
    compiles per chunk kind, not per layer index (11 graphs before, 6 after); the limit the
    engine sets keeps every layer compiled rather than falling back to eager. Source runs
    (padded, cross-batch): the row layout reaches the layer through one opaque op too (27
    graphs, then 11 with per-index graphs, now 7)."""
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
    # padded: an encoder graph, then a few per chunk kind (rows contiguous, gathered, source
    # runs, one broadcast source) for all decoder layers: 6 and 7 measured
    bound = 4 if packed else 8
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
    seen = device_reads(seen)
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen


@pytest.mark.unit
def test_generic_shapes_patches_tracing_for_compiled_layers_only():
    """Eager layers: torch's tracing settings untouched (no cost per chunk). Compiled layers:
    no 0/1 specialisation and no duck sizing inside the context, the settings restored after."""
    from torch.fx.experimental import _config

    from scoring.compile_shapes import generic_shapes

    layers = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
    before = (_config.backed_size_oblivious, _config.use_duck_shape)
    with generic_shapes(layers):
        assert (_config.backed_size_oblivious, _config.use_duck_shape) == before
    layers[0].compile(dynamic=True, backend=_CountingBackend())
    with generic_shapes(layers):
        assert (_config.backed_size_oblivious, _config.use_duck_shape) == (True, False)
        with generic_shapes(layers):  # re-entered (a decoder inside an engine call, say)
            assert _config.backed_size_oblivious
        assert not _config.use_duck_shape
    assert (_config.backed_size_oblivious, _config.use_duck_shape) == before


def _prefix_calls(config, seed: int, shapes):
    """CTRLEval-prefix-like engine calls, one per (source count, targets per source, longest
    target) in `shapes`: sources of 3 to 20 tokens, targets of 1 to `longest` tokens."""
    rng = np.random.default_rng(seed)

    def ids(n):
        return rng.integers(3, config.vocab_size, size=n).tolist()

    return [([ids(int(rng.integers(3, 20))) + [config.eos_token_id] for _ in range(count)],
             [[ids(int(rng.integers(1, longest + 1))) for _ in range(per_source)] for _ in range(count)])
            for count, per_source, longest in shapes]


# warm-up: several sources, one target of 2 to 8 tokens each (as many targets as sources)
WARM_UP_SHAPES = [(5, 1, 8), (9, 1, 6), (3, 1, 8), (12, 1, 5), (7, 1, 8), (4, 1, 7)]
# held out: one source, one target of one token (a decoder row of 1 token), targets of 1 token,
# several targets per source
HELD_OUT_SHAPES = [(1, 1, 1), (6, 1, 1), (1, 2, 4), (8, 2, 8), (1, 1, 6), (3, 3, 2), (10, 1, 3), (2, 1, 1)]


@pytest.mark.unit
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["bart", "pegasus"])
def test_packed_layers_compile_no_graph_for_held_out_chunk_layouts(tiny_models, fresh_dynamo, name):
    """After warm-up calls of the CTRLEval prefix kind, held-out layouts compile no further graph:
    a layer traced on chunks of several sources, one target each, must not have specialised on
    a count above 1 (0/1 specialisation) nor on targets and sources counting alike (duck
    sizing). Counting backend, tiny models, old code: 2 graphs after the warm-up, then 5 more for
    these 8 layouts (guards `2 <= host_lengths.size()[0]`, `2 <= args[0].size()[1]`, and
    `cross.host_query_lengths.size()[0] == targets.host_lengths.size()[0]`); now 2, then none
    (`scoring.compile_shapes`)."""
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_models[name]).eval()
    config = model.config
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=4096)
    engine.packed_encoder = engine.packed_decoder = True
    warm_up, held_out = _prefix_calls(config, 1, WARM_UP_SHAPES), _prefix_calls(config, 2, HELD_OUT_SHAPES)
    want = [engine.mean_nll(sources, targets) for sources, targets in held_out]
    backend = _compile(model)
    for sources, targets in warm_up:
        engine.mean_nll(sources, targets)
    assert backend.graphs == 2, f"{backend.graphs} graphs after the warm-up (one per layer type)"
    got = [engine.mean_nll(sources, targets) for sources, targets in held_out]
    assert backend.graphs == 2, f"{backend.graphs - 2} more graphs for {len(held_out)} held-out layouts"
    for scores, expected in zip(got, want):
        assert _flat(scores) == pytest.approx(_flat(expected), rel=1e-6)
    _assert_no_break_and_no_eager_fallback(fresh_dynamo)


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


def _seq2seq_model(name: str, layers: int):
    """A seeded random BART, PEGASUS or mBART of `layers` encoder and decoder layers."""
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        MBartConfig,
        MBartForConditionalGeneration,
        PegasusConfig,
        PegasusForConditionalGeneration,
    )

    config_class, model_class = {"bart": (BartConfig, BartForConditionalGeneration), "pegasus": (PegasusConfig, PegasusForConditionalGeneration),
                                 "mbart": (MBartConfig, MBartForConditionalGeneration)}[name]
    torch.manual_seed(0)
    config = config_class(vocab_size=300, d_model=32, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
                          pad_token_id=1, eos_token_id=2, bos_token_id=0, decoder_start_token_id=2, attn_implementation="sdpa")
    return model_class(config).eval()


def _padded_engine(model, layout: str) -> Seq2SeqLikelihood:
    config = model.config
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=4096, cross_batch=layout != "per-batch")
    engine.source_runs = layout == "source-runs"
    return engine


def _flat(scores):
    return [nll for group in scores for nll in group]


def _attention_indices(model):
    return [module.layer_idx for layer in model.get_decoder().layers for module in layer.modules() if hasattr(module, "layer_idx")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("name", "layout"), [("bart", "per-batch"), ("bart", "cross-batch"), ("bart", "source-runs"),
                                              ("pegasus", "per-batch"), ("pegasus", "source-runs"),
                                              ("mbart", "per-batch"), ("mbart", "source-runs")])
def test_the_padded_decoder_compiles_as_many_graphs_at_any_depth(fresh_dynamo, name, layout):
    """Each decoder layer reads its own cross keys/values at index 0 (`scoring.layer_caches`),
    so a padded decoder compiles per chunk kind, not per layer index and chunk kind: a 2-layer
    and a 4-layer model compile the same number of graphs (tiny BART, per batch: 11 and 21
    before, 6 and 6 after), the uncompiled scores within 1e-6, which are the scores of one cache
    for all layers (the engine's path before, `per_layer_caches` off) bit for bit."""
    graphs = []
    for layers in (2, 4):
        fresh_dynamo.clear()
        torch._dynamo.reset()
        model = _seq2seq_model(name, layers)
        engine = _padded_engine(model, layout)
        assert engine.per_layer_caches
        calls = _seq2seq_calls(model.config)
        want = [engine.mean_nll(sources, targets) for sources, targets in calls]
        engine.per_layer_caches = False
        assert [engine.mean_nll(sources, targets) for sources, targets in calls] == want
        engine.per_layer_caches = True
        indices = _attention_indices(model)
        backend = _compile(model)
        got = [engine.mean_nll(sources, targets) for sources, targets in calls]
        for scores, expected in zip(got, want):
            assert _flat(scores) == pytest.approx(_flat(expected), rel=1e-6)
        _assert_no_break_and_no_eager_fallback(fresh_dynamo)
        assert _attention_indices(model) == indices and sorted(set(indices)) == list(range(layers))  # restored
        if layout == "source-runs":
            assert engine.stats["source_run_chunks"] >= len(CALLS)
        graphs.append(backend.graphs)
    # an encoder graph and a few per chunk kind (contiguous, gathered, source runs, broadcast)
    assert graphs[0] == graphs[1] <= 8, f"{graphs} graphs with 2 and 4 layers"
    if layout == "per-batch":
        return
    engine.on_cuda = True  # compiled and cross-batch, the padded path still reads the device once per call
    sources, targets = calls[1][0] + calls[4][0], calls[1][1] + calls[4][1]
    counts = [len(group) for group in targets]
    work = (Ragged.from_lists(sources), Ragged.from_lists([t for group in targets for t in group]),
            [range(sum(counts[:i]), sum(counts[: i + 1])) for i in range(len(counts))])
    engine.pair_nll(*work)  # planned as on CUDA: its new chunk shapes compile (tracing reads fake tensors) first
    with counted_reads() as seen:
        engine.pair_nll(*work)
    seen = device_reads(seen)
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen


@pytest.mark.timeout(300)
def test_a_compiled_padded_decoder_halves_on_out_of_memory_and_restores_its_layers(fresh_dynamo, monkeypatch):
    """An out-of-memory error in a decoder call of compiled layers: the chunk is halved and retried,
    the scores are the uncompiled ones, and every layer is left as it was (its attention's
    `layer_idx`, no cache of its own held)."""
    from scoring import layer_caches

    model = _seq2seq_model("bart", 3)
    engine = _padded_engine(model, "cross-batch")
    calls = _seq2seq_calls(model.config)[:3]
    want = [engine.mean_nll(sources, targets) for sources, targets in calls]
    indices = _attention_indices(model)
    _compile(model)
    decoder = model.get_decoder()
    original = decoder.forward

    def fail_on_wide_chunks(*args, **kwargs):
        hidden = original(*args, **kwargs)  # the compiled layers ran, each with its own cache
        assert all(layer.encoder_attn.layer_idx == 0 and getattr(layer, layer_caches.ATTRIBUTE) is not None for layer in decoder.layers)
        if kwargs["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return hidden

    monkeypatch.setattr(decoder, "forward", fail_on_wide_chunks)
    engine.stats.clear()
    got = [engine.mean_nll(sources, targets) for sources, targets in calls]
    assert engine.stats["oom_splits"] > 0
    for scores, expected in zip(got, want):
        assert _flat(scores) == pytest.approx(_flat(expected), rel=1e-6)
    assert _attention_indices(model) == indices
    assert all(getattr(layer, layer_caches.ATTRIBUTE) is None for layer in model.get_decoder().layers)

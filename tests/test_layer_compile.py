"""Regional compilation (`compile_layers`, CUDA only): every layer list is found, GPT-2's `.h`
blocks included, and `torch._dynamo.explain` finds no graph break in a layer called exactly as
the engines call it (the arguments captured from a real engine call on tiny models, CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scoring.engine import CausalLikelihood, Seq2SeqLikelihood, layer_stacks


class _Captured(Exception):
    """Raised by the capture hook: the layer never runs, so caches it would fill stay empty."""


def _engine_call_arguments(layer, run):
    """(args, kwargs) of `layer`'s first call inside `run()`."""
    seen = []

    def hook(module, args, kwargs):
        seen.append((args, kwargs))
        raise _Captured

    handle = layer.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with pytest.raises(_Captured):
            run()
    finally:
        handle.remove()
    return seen[0]


def _graph_breaks(layer, args, kwargs) -> tuple[int, int, list[str]]:
    torch._dynamo.reset()
    with torch.inference_mode():
        explained = torch._dynamo.explain(layer)(*args, **kwargs)
    return explained.graph_break_count, explained.graph_count, [str(reason.reason)[:200] for reason in explained.break_reasons]


def dynamo_or_skip():
    """torch._dynamo, or a skip where it does not run on this platform (never a failure)."""
    dynamo = pytest.importorskip("torch._dynamo")
    try:
        dynamo.explain(lambda x: x * 2)(torch.ones(2))
    except Exception as exc:  # noqa: BLE001 - an unsupported platform skips, it does not fail
        pytest.skip(f"torch._dynamo does not run here: {exc}")
    return dynamo


@pytest.fixture(scope="module", autouse=True)
def dynamo_works_here():
    dynamo = dynamo_or_skip()
    yield
    dynamo.reset()


def _causal(tiny_models, name):
    from transformers import AutoModelForCausalLM

    from ctgscore.testing.tiny_causal import tiny_llama

    return tiny_llama() if name == "llama" else AutoModelForCausalLM.from_pretrained(tiny_models["gpt2"]).eval()


def test_layer_stacks_include_gpt2_blocks(tiny_models):
    from transformers import AutoModelForSeq2SeqLM

    gpt2 = _causal(tiny_models, "gpt2")
    assert [len(stack) for stack in layer_stacks(gpt2)] == [gpt2.config.n_layer]
    assert layer_stacks(gpt2)[0] is gpt2.transformer.h
    llama = _causal(tiny_models, "llama")
    assert layer_stacks(llama)[0] is llama.model.layers
    bart = AutoModelForSeq2SeqLM.from_pretrained(tiny_models["bart"]).eval()
    assert [len(stack) for stack in layer_stacks(bart)] == [bart.config.encoder_layers, bart.config.decoder_layers]
    engine = CausalLikelihood(gpt2, pad_id=0, compile_layers=True)
    assert engine.compiled_layers == 0  # CPU: never compiled


@pytest.mark.timeout(600)
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_causal_block_compiles_without_graph_breaks(tiny_models, name, packed):
    model = _causal(tiny_models, name)
    engine = CausalLikelihood(model, pad_id=0, token_budget=64)
    engine.packed = packed
    rng = np.random.default_rng(0)
    sequences = [rng.integers(3, model.config.vocab_size, size=n).tolist() for n in (5, 9, 3)]
    args, kwargs = _engine_call_arguments(layer_stacks(model)[0][0], lambda: engine.sequence_nll(sequences))
    breaks, graphs, reasons = _graph_breaks(layer_stacks(model)[0][0], args, kwargs)
    assert (breaks, graphs) == (0, 1), reasons


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stack", ["encoder", "decoder"])
@pytest.mark.parametrize("targets", ["distinct", "one-source"])
def test_a_bart_layer_compiles_without_graph_breaks(tiny_models, stack, targets):
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_models["bart"]).eval()
    engine = Seq2SeqLikelihood(model, pad_id=model.config.pad_token_id, decoder_start_id=model.config.decoder_start_token_id,
                               token_budget=64)
    rng = np.random.default_rng(1)

    def ids(n):
        return [0] + rng.integers(4, model.config.vocab_size, size=n).tolist() + [2]

    if targets == "distinct":  # one target per source: a chunk mixing sources
        sources, target_lists = [ids(5), ids(9), ids(3)], [[ids(3)], [ids(6)], [ids(2)]]
    else:  # many targets of one source: its keys/values broadcast over the rows
        sources, target_lists = [ids(7)], [[ids(3), ids(5), ids(2)]]
    layer = layer_stacks(model)[0 if stack == "encoder" else 1][0]
    args, kwargs = _engine_call_arguments(layer, lambda: engine.mean_nll(sources, target_lists))
    breaks, graphs, reasons = _graph_breaks(layer, args, kwargs)
    assert (breaks, graphs) == (0, 1), reasons


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_a_packed_bart_layer_compiles_without_graph_breaks(tiny_models, stack):
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_models["bart"]).eval()
    engine = Seq2SeqLikelihood(model, pad_id=model.config.pad_token_id, decoder_start_id=model.config.decoder_start_token_id,
                               token_budget=64)
    sources = [[0, 5, 6, 7, 2], [0, 8, 2], [0, 9, 10, 11, 12, 2]]
    if stack == "encoder":
        engine.packed_encoder = True
        target_lists = [[[0, 5, 2]], [[0, 6, 7, 2]], [[0, 8, 2]]]
    else:
        engine.packed_decoder = True
        target_lists = [[[0, 5, 2], [0, 7, 7, 2]], [[0, 6, 7, 2]], [[0, 8, 2]]]  # two targets of one source, then others
    layer = layer_stacks(model)[0 if stack == "encoder" else 1][0]
    args, kwargs = _engine_call_arguments(layer, lambda: engine.mean_nll(sources, target_lists))
    packing = kwargs["ctgscore_packing"]
    if stack == "decoder":  # longest sources first, each source's targets together
        assert packing.targets.lengths == (3, 3, 4, 4) and packing.cross.key_lengths == (6, 5, 3)
        assert packing.cross.query_lengths == (3, 7, 4)
    breaks, graphs, reasons = _graph_breaks(layer, args, kwargs)
    assert (breaks, graphs) == (0, 1), reasons

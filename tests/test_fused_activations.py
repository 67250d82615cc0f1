"""The one-kernel tanh GELU (scoring/fused_activations.py): the function transformers' Python
spellings compute, swapped into the engines' models with the scores kept."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn
from transformers import BartConfig, BartForConditionalGeneration, GPT2Config, GPT2LMHeadModel
from transformers.activations import FastGELUActivation, NewGELUActivation

from ctgscore.testing.tiny_causal import tiny_family
from scoring.causal_engine import CausalLikelihood
from scoring.fused_activations import TanhGELU, fuse_tanh_gelu
from scoring.seq2seq_engine import Seq2SeqLikelihood

SEQUENCES = [[5, 17, 33, 2, 90, 41, 7], [8, 8, 120, 64], [3, 250, 11, 19, 200, 6, 6, 71, 12, 99], [44, 45]]


def _tiny_gpt2(activation: str = "gelu_new") -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=300, n_positions=64, n_embd=32, n_layer=2, n_head=4, activation_function=activation)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():  # far from flat logits, activations well into GELU's curved part
        for parameter in model.parameters():
            if parameter.dim() >= 2:
                parameter.normal_(0.0, 0.3)
    return model.eval()


def _relative(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))


def _causal_nll(model, fuse: bool, packed: bool) -> list[float]:
    engine = CausalLikelihood(model, pad_id=0, token_budget=64, fuse_activations=fuse)
    engine.packed = packed
    return [total / count for total, count in engine.sequence_nll(SEQUENCES)]


def test_the_one_kernel_gelu_is_the_python_tanh_approximation():
    x = torch.cat([torch.linspace(-12.0, 12.0, 24_001), torch.randn(200_000, generator=torch.Generator().manual_seed(1)) * 4])
    exact_tanh_form = NewGELUActivation()(x.double())  # the same formula in float64
    scale = 1.0 + x.double().abs()
    fused_error = float(((TanhGELU()(x).double() - exact_tanh_form).abs() / scale).max())
    python_error = float(((NewGELUActivation()(x).double() - exact_tanh_form).abs() / scale).max())
    fast_error = float(((FastGELUActivation()(x).double() - exact_tanh_form).abs() / scale).max())
    assert fused_error <= 1e-6 and python_error <= 1e-6 and fast_error <= 1e-6, (fused_error, python_error, fast_error)
    # GELU by erf is a different function: this comparison can tell them apart
    erf_error = float(((nn.functional.gelu(x).double() - exact_tanh_form).abs() / scale).max())
    assert erf_error > 1e-4


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_gpt2_scores_are_kept_with_the_fused_gelu(packed):
    model = _tiny_gpt2()
    want = _causal_nll(model, fuse=False, packed=packed)
    fused_model = copy.deepcopy(model)
    got = _causal_nll(fused_model, fuse=True, packed=packed)
    assert [type(block.mlp.act) for block in fused_model.transformer.h] == [TanhGELU, TanhGELU]
    assert _relative(got, want) <= 1e-6
    # the comparison can fail: GELU by erf instead moves the scores well past the bar
    erf_model = copy.deepcopy(model)
    for block in erf_model.transformer.h:
        block.mlp.act = nn.GELU()
    assert _relative(_causal_nll(erf_model, fuse=False, packed=packed), want) > 1e-5


@pytest.mark.parametrize("family", ["phi", "gptj"])
def test_other_python_gelu_families_keep_their_scores(family):
    model = tiny_family(family)
    want = _causal_nll(model, fuse=False, packed=False)
    fused_model = copy.deepcopy(model)
    engine = CausalLikelihood(fused_model, pad_id=0, token_budget=64, fuse_activations=True)
    assert engine.fused_activations == 2  # one per block
    assert _relative([total / count for total, count in engine.sequence_nll(SEQUENCES)], want) <= 1e-6


def test_a_cpu_engine_leaves_the_model_as_it_is_unless_asked():
    model = _tiny_gpt2()
    engine = CausalLikelihood(model, pad_id=0)
    assert engine.fused_activations == 0
    assert all(type(block.mlp.act) is NewGELUActivation for block in model.transformer.h)
    assert CausalLikelihood(_tiny_gpt2("gelu"), pad_id=0, fuse_activations=True).fused_activations == 0  # already one kernel


def test_bart_with_a_python_gelu_keeps_its_scores():
    torch.manual_seed(0)
    config = BartConfig(vocab_size=300, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
                        pad_token_id=1, eos_token_id=2, bos_token_id=0, decoder_start_token_id=2, activation_function="gelu_new",
                        attn_implementation="sdpa")
    model = BartForConditionalGeneration(config).eval()
    sources, targets = [[5, 6, 7, 8, 9, 2], [40, 41, 2]], [[[11, 12, 2], [13, 2]], [[50, 51, 52, 2]]]

    def scores(fuse: bool, packed: bool):
        engine = Seq2SeqLikelihood(copy.deepcopy(model), pad_id=1, decoder_start_id=2, fuse_activations=fuse)
        engine.packed_encoder = engine.packed_decoder = packed
        return engine.fused_activations, [nll for group in engine.mean_nll(sources, targets) for nll in group]

    for packed in (False, True):
        count_off, want = scores(False, packed)
        count_on, got = scores(True, packed)
        assert (count_off, count_on) == (0, 4)  # 2 encoder + 2 decoder layers
        assert _relative(got, want) <= 1e-6


def test_every_place_a_shared_activation_sits_is_replaced_and_subclasses_are_not():
    class OwnGELU(NewGELUActivation):  # a subclass may compute something else
        pass

    shared = NewGELUActivation()
    model = nn.Module()
    model.first, model.second = shared, shared
    model.inner = nn.Sequential(nn.Linear(2, 2), FastGELUActivation(), OwnGELU())
    assert fuse_tanh_gelu(model) == 3
    assert type(model.first) is TanhGELU and type(model.second) is TanhGELU and type(model.inner[1]) is TanhGELU
    assert type(model.inner[2]) is OwnGELU
    assert fuse_tanh_gelu(model) == 0  # nothing left to replace


def test_an_engine_on_a_model_fused_before_reports_and_signs_it():
    """The count comes from the model, not from what this engine swapped: a second engine on a
    model an earlier one fused computes with the one-kernel GELU, and its batching says so."""
    model = _tiny_gpt2()
    first = CausalLikelihood(model, pad_id=0, fuse_activations=True)
    second = CausalLikelihood(model, pad_id=0)
    assert first.fused_activations == second.fused_activations == 2
    assert "tanh_gelu_one_kernel" in second.batching()

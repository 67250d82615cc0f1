"""The one-pass output layer equals the old multi-pass one within 1e-6 (float32) on BART,
PEGASUS, GPT-2, a Llama and a soft-capped Gemma-2, in every weight layout (CPU copy, the CUDA
layout padded to 64 vocabulary rows, the fused vocabulary-tiled path), and perplexity from real
positions only equals the model's own logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scoring.engine import OutputHead


def old_target_logprob_sums(model, hidden, labels, lengths):
    """The output layer before issue 29, as it was: full logits of every real position, the
    bias always added, then max / subtract / exp / sum / log as separate passes."""
    weight = model.get_output_embeddings().weight.detach().float()
    bias = getattr(model, "final_logits_bias", None)
    sums = torch.zeros(labels.shape[0])
    for row, length in enumerate(lengths):
        logits = hidden[row, :length].float() @ weight.t()
        if bias is not None:
            logits += bias.reshape(-1).float()
        softcap = getattr(model.config, "final_logit_softcapping", None)
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        picked = logits.gather(-1, labels[row, :length, None]).squeeze(-1)
        peak = logits.amax(dim=-1, keepdim=True)
        normaliser = (logits - peak).exp().sum(-1).log() + peak.squeeze(-1)
        sums[row] = (picked - normaliser).sum()
    return sums


CAUSAL = ("gpt2", "llama", "gemma2")
LAYOUTS = {
    "default": {},
    "padded": {"pad_vocabulary": True},  # the CUDA layout, forced on here
    "tiled": {"vocabulary_tile": 96},
    "padded-tiled": {"pad_vocabulary": True, "vocabulary_tile": 100},  # tiles not on the alignment
}


def _model(tiny_models, name):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from ctgscore.testing.tiny_causal import tiny_gemma2, tiny_llama

    if name == "llama":
        return tiny_llama()
    if name == "gemma2":
        return tiny_gemma2()
    cls = AutoModelForCausalLM if name in CAUSAL else AutoModelForSeq2SeqLM
    return cls.from_pretrained(tiny_models[name]).eval()


def _head(model, name, layout):
    head = OutputHead.for_causal_model(model) if name in CAUSAL else OutputHead.for_model(model)
    assert head is not None
    for attribute, value in LAYOUTS[layout].items():
        setattr(head, attribute, value)
    return head


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", ["bart", "pegasus", *CAUSAL])
@pytest.mark.parametrize("bias", ["zero", "random"])
def test_one_pass_head_equals_the_old_one(tiny_models, name, bias, layout):
    model = _model(tiny_models, name)
    head = _head(model, name, layout)
    if bias == "random":
        if not hasattr(model, "final_logits_bias"):
            pytest.skip("causal LMs have no logits bias")
        with torch.no_grad():
            model.final_logits_bias.normal_(0, 0.5)
    else:
        assert head.bias() is None  # a zero bias gets no pass
    generator = torch.Generator().manual_seed(0)
    width = model.config.hidden_size if hasattr(model.config, "hidden_size") else model.config.d_model
    vocabulary = model.get_output_embeddings().weight.shape[0]
    hidden = torch.randn(5, 23, width, generator=generator) * 3
    labels = torch.randint(0, vocabulary, (5, 23), generator=generator)
    lengths = [23, 1, 7, 16, 2]
    head.positions_per_chunk = 10  # several chunks, one row split across two
    with torch.inference_mode():
        new = head.target_logprob_sums(hidden, labels, lengths)
        old = old_target_logprob_sums(model, hidden, labels, lengths)
    # float32 sums of ~600 nats carry ~6e-5 of rounding: the agreement is relative
    assert torch.allclose(new, old, rtol=1e-6, atol=0), ((new - old) / old).abs().max()


def test_the_padded_layout_pads_to_64_rows_and_keeps_the_padding_out():
    """The CUDA layout: (vocabulary rounded up to 64, hidden), zero rows past the vocabulary;
    a label can never be a padded column, and a padded column's zero logit would have added
    exp(0 - m) to the normaliser had it not been cut off (checked by the parity test above)."""
    from ctgscore.testing.tiny_causal import VOCABULARY, tiny_llama

    head = OutputHead.for_causal_model(tiny_llama())
    assert head.vocabulary_major_weight().shape == (32, VOCABULARY)  # CPU: the hidden-major copy
    head.pad_vocabulary = True
    weight = head.vocabulary_major_weight()
    assert weight.shape == (1024, 32) and head.padded_vocabulary() == 1024
    assert torch.equal(weight[:VOCABULARY], head.model.get_output_embeddings().weight.detach())
    assert not weight[VOCABULARY:].any()
    logits = head._logits(torch.randn(3, 32), 0, VOCABULARY)
    assert logits.shape == (3, VOCABULARY) and logits.stride(0) == 1024  # aligned rows, padding cut off as a view


@pytest.mark.parametrize("name", ["llama", "gemma2"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_llama_family_perplexity_equals_the_model_in_every_layout(name, layout):
    """Whole-engine perplexity of a tiny Llama and a soft-capped Gemma-2 against the model's
    own logits in float64, and every head layout against the default one within 1e-6."""
    from scoring.engine import CausalLikelihood

    model = _model(None, name)
    rng = np.random.default_rng(2)
    sequences = [rng.integers(3, model.config.vocab_size, size=n).tolist() for n in (2, 5, 17, 30, 9)]
    reference = CausalLikelihood(model, pad_id=0, token_budget=64)
    assert reference.head is not None
    want = reference.sequence_nll(sequences)
    engine = CausalLikelihood(model, pad_id=0, token_budget=64)
    for attribute, value in LAYOUTS[layout].items():
        setattr(engine.head, attribute, value)
    got = engine.sequence_nll(sequences)
    assert [total for total, _ in got] == pytest.approx([total for total, _ in want], rel=1e-6)
    for sequence, (total, count) in zip(sequences, got):
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([sequence])).logits[0].double()
        expected = -torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(sequence[1:])[:, None]).sum().item()
        assert count == len(sequence) - 1
        assert total == pytest.approx(expected, rel=1e-5, abs=1e-4)


def test_perplexity_reads_real_positions_only_and_matches_the_model(tiny_models):
    from scoring.engine import CausalLikelihood

    model = _model(tiny_models, "gpt2")
    engine = CausalLikelihood(model, pad_id=0, token_budget=64)
    assert engine.head is not None
    rng = np.random.default_rng(1)
    sequences = [rng.integers(1, model.config.vocab_size, size=n).tolist() for n in (2, 5, 17, 30, 9)]
    got = engine.sequence_nll(sequences)
    for sequence, (total, count) in zip(sequences, got):
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([sequence])).logits[0].double()
        want = -torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(sequence[1:])[:, None]).sum().item()
        assert count == len(sequence) - 1
        assert total == pytest.approx(want, rel=1e-5, abs=1e-4)


def test_fused_logsumexp_falls_back_to_eager_when_the_compiler_fails(monkeypatch):
    from scoring import output_head as engine

    def broken_compile(function, dynamic=None):
        def run(logits):
            raise RuntimeError("no working Triton here")
        return run

    monkeypatch.setattr(engine, "_COMPILED_LOGSUMEXP", [])
    monkeypatch.setattr(torch, "compile", broken_compile)
    logits = torch.randn(7, 300)
    assert torch.equal(engine.fused_logsumexp(logits), torch.logsumexp(logits, dim=-1))
    assert engine._COMPILED_LOGSUMEXP == [None]  # not tried again

    def out_of_memory(function, dynamic=None):
        def run(logits):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return run

    monkeypatch.setattr(engine, "_COMPILED_LOGSUMEXP", [])
    monkeypatch.setattr(torch, "compile", out_of_memory)
    with pytest.raises(torch.OutOfMemoryError):  # the caller splits the batch
        engine.fused_logsumexp(logits)


def test_compile_is_off_by_default_cuda_only_and_named_in_the_signature_only_when_set(tiny_models):
    from scoring.bartscore import BARTScoreMetric

    plain = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"])
    asked = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"], compile=True)
    assert plain.scorer.engine.compiled_layers == 0 and asked.scorer.engine.compiled_layers == 0  # CPU: not compiled
    assert "compile" not in plain.signature().params and "compile" in asked.signature().params


@pytest.mark.parametrize("name", ["bart", "pegasus"])
@pytest.mark.parametrize("layout", ["padded", "tiled", "padded-tiled"])
def test_seq2seq_scores_are_the_same_in_every_head_layout(tiny_models, name, layout):
    """Whole `pair_nll` calls (encoder, cached cross keys/values, decoder, head) with the head's
    layout switched: within 1e-6 of the default layout."""
    from scoring.engine import Ragged, Seq2SeqLikelihood

    model = _model(tiny_models, name)
    config = model.config
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id, token_budget=64)
    rng = np.random.default_rng(5)

    def ids(n):
        return rng.integers(3, config.vocab_size, size=n).tolist() + [config.eos_token_id]

    sources = Ragged.from_lists([ids(n) for n in (4, 11, 7, 2)])
    targets = Ragged.from_lists([ids(n) for n in (3, 8, 1, 5, 12, 2, 6)])
    groups = [range(0, 3), range(3, 4), range(4, 6), range(6, 7)]
    want = engine.pair_nll(sources, targets, groups)
    for attribute, value in LAYOUTS[layout].items():
        setattr(engine.head, attribute, value)
    assert engine.pair_nll(sources, targets, groups) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("tile", [None, 100])
def test_the_cuda_branch_writes_aligned_float32_rows_on_the_meta_device(tile):
    """The CUDA head's code path (bf16 GEMM into float32, padded layout) run on the meta device,
    which checks shapes, dtypes and strides without a GPU: the GEMM writes rows of 1,024 columns
    and the logits are the first 1,003 of them."""
    from ctgscore.testing.tiny_causal import VOCABULARY, tiny_llama

    model = tiny_llama().to(dtype=torch.bfloat16)
    head = OutputHead.for_causal_model(model)
    model.to("meta")
    head.on_cuda, head.pad_vocabulary, head.vocabulary_tile = True, True, tile
    states = torch.empty(7, 32, dtype=torch.bfloat16, device="meta")
    logits = head._logits(states, 0, VOCABULARY)
    assert (logits.dtype, logits.shape, logits.stride()) == (torch.float32, (7, VOCABULARY), (1024, 1))
    assert head.vocabulary_major_weight().shape == (1024, 32)
    if tile:
        targets = torch.zeros(7, dtype=torch.long, device="meta")
        assert head._tiled_logprobs(states, targets).shape == (7,)

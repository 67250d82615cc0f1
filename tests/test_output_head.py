"""The one-pass output layer equals the old multi-pass one within 1e-6 (float32) on BART,
PEGASUS and GPT-2, and perplexity from real positions only equals the model's own logits."""

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
        picked = logits.gather(-1, labels[row, :length, None]).squeeze(-1)
        peak = logits.amax(dim=-1, keepdim=True)
        normaliser = (logits - peak).exp().sum(-1).log() + peak.squeeze(-1)
        sums[row] = (picked - normaliser).sum()
    return sums


def _model(tiny_models, name):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    cls = AutoModelForCausalLM if name == "gpt2" else AutoModelForSeq2SeqLM
    return cls.from_pretrained(tiny_models[name]).eval()


@pytest.mark.parametrize("name", ["bart", "pegasus", "gpt2"])
@pytest.mark.parametrize("bias", ["zero", "random"])
def test_one_pass_head_equals_the_old_one(tiny_models, name, bias):
    model = _model(tiny_models, name)
    head = OutputHead.for_causal_model(model) if name == "gpt2" else OutputHead.for_model(model)
    assert head is not None
    if bias == "random":
        if not hasattr(model, "final_logits_bias"):
            pytest.skip("GPT-2 has no logits bias")
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

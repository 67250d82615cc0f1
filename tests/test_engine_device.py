"""The engine's failure handling, on CPU: out-of-memory halving runs after the failed
attempt is released, accelerator errors are never turned into row errors, float16 PEGASUS is
refused. (The same paths on CUDA: tests/test_gpu_smoke.py, marker `gpu`.)"""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from scoring.engine import run_splitting_on_oom
from scoring.errors import UsageError, is_accelerator_error
from tests.job_support import SlowLengthMetric


def test_oom_retry_no_longer_holds_the_failed_attempts_tensors():
    gc.disable()  # only reference counting may free the tensor: no collector run hides a leak
    try:
        attempts, alive_at_retry = [], []

        def run(batch):
            if attempts:  # a retry: is the first attempt's activation still reachable?
                alive_at_retry.append(attempts[0]() is not None)
            activation = torch.empty(len(batch), 1 << 16)
            attempts.append(weakref.ref(activation))
            if len(batch) > 2:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

        run_splitting_on_oom(list(range(8)), run)
    finally:
        gc.enable()
    # 8 -> 4 + 4 -> 2 + 2 + 2 + 2: one failed attempt of 8, two of 4, then four that fit
    assert len(attempts) == 7
    assert alive_at_retry and not any(alive_at_retry)


def test_oom_on_one_item_names_the_cause_and_other_errors_pass_through():
    def oom(batch):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")

    with pytest.raises(RuntimeError, match=r"out of memory on a single item \(OutOfMemoryError: CUDA out of memory"):
        run_splitting_on_oom([1, 2], oom)

    def broken(batch):
        raise ValueError("not an OOM")

    with pytest.raises(ValueError, match="not an OOM"):
        run_splitting_on_oom([1, 2], broken)


@pytest.mark.parametrize(
    "exc, fatal",
    [
        (RuntimeError("CUDA error: device-side assert triggered"), True),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), True),
        (RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx`"), True),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB"), False),
        (RuntimeError("CUDA error: out of memory"), False),
        (ValueError("row 3 has no text"), False),
    ],
)
def test_accelerator_errors_are_told_apart(exc, fatal):
    assert is_accelerator_error(exc) is fatal


class _DeviceLost(SlowLengthMetric):
    name = "device_lost"

    def score_valid(self, rows):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


class _RowFails(SlowLengthMetric):
    name = "row_fails"

    def score_valid(self, rows):
        if any(row["text"] == "bad" for row in rows):
            raise RuntimeError("tokenizer choked")
        return super().score_valid(rows)


def test_the_row_bisection_isolates_row_faults_but_never_an_accelerator_error():
    rows = [{"id": str(i), "text": text} for i, text in enumerate(["a", "bad", "ccc", "dd"])]
    results = _RowFails().score_rows(rows)
    assert [r["error"] for r in results] == [None, "RuntimeError: tokenizer choked", None, None]
    with pytest.raises(RuntimeError, match="illegal memory access"):
        _DeviceLost().score_rows(rows)


def test_float16_pegasus_is_refused_with_a_reason(tiny_models):
    from scoring.registry import build_metric

    with pytest.raises(UsageError, match="float16 is refused for PEGASUS"):
        build_metric("ctrleval", {"model": tiny_models["pegasus"], "iwf": tiny_models["iwf"], "aspects": ["coherence"], "dtype": "float16"})


class _Transformers517Decoder(torch.nn.Module):
    """A module as transformers 5.17 spells its forward: `past_key_values`, and **kwargs that
    would take a `cache=` without a word."""

    def forward(self, input_ids=None, encoder_hidden_states=None, past_key_values=None, use_cache=None, **kwargs):
        raise AssertionError("an engine built on it must not get this far")


def test_a_transformers_that_ignores_cache_is_refused_not_scored_wrong(tiny_models, monkeypatch):
    """Under transformers 5.17 (the lent GPU machines' own) the engines' `cache=` went into
    **kwargs and the cross-batch, source-run and packed-decoder paths gave wrong scores with no
    error; the engines that pass `cache=` now refuse such a model in one line."""
    from transformers import AutoModelForSeq2SeqLM

    from scoring.engine import Seq2SeqLikelihood, require_cache_keyword
    from scoring.prompt_cache import PromptedLikelihood

    too_old = r"transformers \S+ is too old: ctgscore needs >= 5.24 \(its models take `cache=`\)"
    with pytest.raises(UsageError, match=too_old):
        require_cache_keyword(_Transformers517Decoder)
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_models["bart"]).eval()
    Seq2SeqLikelihood(model, pad_id=1, decoder_start_id=2)  # the installed transformers takes `cache=`
    monkeypatch.setattr(model, "get_decoder", _Transformers517Decoder)
    with pytest.raises(UsageError, match=too_old):
        Seq2SeqLikelihood(model, pad_id=1, decoder_start_id=2)
    with pytest.raises(UsageError, match=too_old):
        PromptedLikelihood(_Transformers517Decoder(), pad_id=0)

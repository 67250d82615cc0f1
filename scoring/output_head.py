"""The output layer of the likelihood engines: log p(label) of real target positions only, a chunk
of positions at a time, in float32 whatever the model dtype (docs/gpu.md, "Output layer")."""

from __future__ import annotations

from typing import Sequence

import torch

from scoring.errors import is_out_of_memory
from scoring.ragged import is_cuda, real_positions


def _version_of(tensor: torch.Tensor) -> int:
    """In-place change counter of a tensor (-1 for inference tensors, which keep none)."""
    return -1 if tensor.is_inference() else tensor._version



def token_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) per position, computed in float32: logit[label] - logsumexp(logits)."""
    logits = logits.float()
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


class OutputHead:
    """The LM head applied only where it is needed: on real (non-pad) target positions, a
    chunk of positions at a time, so the full [batch, length, vocabulary] logits tensor is
    never built. Only for architectures whose logits are exactly `lm_head(h) +
    final_logits_bias` (BART, PEGASUS, mBART, Marian) or `lm_head(h)` (GPT-2, Llama-like causal
    models); others use the model's own forward.

    One pass over each chunk's float32 logits after the GEMM writes them: no bias pass when
    `final_logits_bias` is zero (checked when its weights change, not per call), and the
    log-normaliser log sum_v exp(z_v) = m + log sum_v exp(z_v - m), m = max_v z_v, as one fused
    reduction on CUDA (a compiled `logsumexp`; eager `torch.logsumexp` where compiling is not
    possible) and in place on the chunk on CPU (no temporary: docs/gpu.md)."""

    ARCHITECTURES = ("bart", "mbart", "pegasus", "marian")
    CAUSAL_ARCHITECTURES = ("gpt2", "llama", "mistral", "qwen2")
    # Logits of one chunk stay below glibc's largest mmap threshold (32 MiB), so the allocator
    # reuses heap memory between chunks instead of mapping (and page-faulting) fresh pages:
    # with 1,024 positions x 50k vocabulary (200 MiB logits plus a 200 MiB temporary per chunk)
    # the logsumexp alone took 40 % of the head's time in a CPU profile.
    CHUNK_BYTES = 24 << 20
    # On CUDA a chunk is sized for the device: float32 logits of this many bytes per chunk
    # (about 2,600 positions of a 50k vocabulary), so the loop is a handful of large GEMMs.
    CUDA_CHUNK_BYTES = 512 << 20

    def __init__(self, model):
        self.model = model
        self._weight_key = None
        self._weight = None
        self._bias_key = None
        self._bias = None
        vocabulary = model.get_output_embeddings().weight.shape[0]
        self.on_cuda = is_cuda(model.get_output_embeddings().weight.device)
        chunk_bytes = self.CUDA_CHUNK_BYTES if self.on_cuda else self.CHUNK_BYTES
        self.positions_per_chunk = max(1, chunk_bytes // (4 * vocabulary))
        self.bias()  # read the bias once now (a host read), not inside a scoring call

    def vocabulary_major_weight(self) -> torch.Tensor:
        """(hidden, vocabulary) copy of the output embedding: it multiplies 10-15 % faster on
        CPU than the transposed view (measured with MKL, 50k vocabulary). Rebuilt whenever the
        model's weight is replaced or changed in place (e.g. a state dict loaded on top)."""
        weight = self.model.get_output_embeddings().weight
        key = (weight.data_ptr(), _version_of(weight), weight.dtype)
        if key != self._weight_key:
            self._weight = weight.detach().t().contiguous()
            self._weight_key = key
        return self._weight

    def bias(self) -> torch.Tensor | None:
        """`final_logits_bias` in float32, or None when there is none or it is all zeros (as in
        the published BART and PEGASUS checkpoints): then no pass adds it. Re-checked only when
        the bias tensor is replaced or changed in place (e.g. a state dict loaded on top)."""
        bias = getattr(self.model, "final_logits_bias", None)
        if bias is None:
            return None
        key = (bias.data_ptr(), _version_of(bias))
        if key != self._bias_key:
            self._bias = bias.reshape(-1).float() if bool(bias.detach().any()) else None
            self._bias_key = key
        return self._bias

    @classmethod
    def for_model(cls, model) -> "OutputHead | None":
        if getattr(model.config, "model_type", None) not in cls.ARCHITECTURES:
            return None
        if model.get_output_embeddings() is None or not hasattr(model, "get_decoder"):
            return None
        return cls(model)

    @classmethod
    def for_causal_model(cls, model) -> "OutputHead | None":
        """The head of a causal LM whose logits are `lm_head(base_model(x))` exactly (no bias,
        scaling or soft-capping), or None."""
        if getattr(model.config, "model_type", None) not in cls.CAUSAL_ARCHITECTURES:
            return None
        head = model.get_output_embeddings()
        if head is None or getattr(head, "bias", None) is not None or getattr(model, "base_model", model) is model:
            return None
        return cls(model)

    def target_logprob_sums(self, hidden: torch.Tensor, labels: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
        """Per row: sum over its first `lengths[row]` positions of log p(label) =
        logit[label] - logsumexp(logits), in float32 (logsumexp as max + log(sum(exp(logits -
        max))), in place on the chunk). The real positions are indexed from the host-side
        lengths, so the loop bounds never wait for the device."""
        owners, columns, total = real_positions(lengths, hidden.device)
        states, targets = hidden[owners, columns], labels[owners, columns]
        token_logprobs = torch.empty(total, dtype=torch.float32, device=hidden.device)
        weight, bias = self.vocabulary_major_weight(), self.bias()
        for start in range(0, total, self.positions_per_chunk):
            stop = start + self.positions_per_chunk
            logits = self._logits(states[start:stop], weight)
            if bias is not None:
                logits += bias
            picked = logits.gather(-1, targets[start:stop, None]).squeeze(-1)
            token_logprobs[start:stop] = picked - self._log_normaliser(logits)
        sums = torch.zeros(labels.shape[0], dtype=torch.float32, device=hidden.device)
        return sums.index_add_(0, owners, token_logprobs)

    def _log_normaliser(self, logits: torch.Tensor) -> torch.Tensor:
        """log sum_v exp(logits[:, v]) per row, float32; may overwrite `logits`."""
        if self.on_cuda:
            return fused_logsumexp(logits)
        peak = logits.amax(dim=-1, keepdim=True)
        return logits.sub_(peak).exp_().sum(dim=-1).log_() + peak.squeeze(-1)

    def _logits(self, states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """float32 logits; on CUDA a half-precision GEMM accumulates into float32 directly
        (no rounding of the logits to bf16/fp16 first)."""
        if self.on_cuda and states.dtype in (torch.bfloat16, torch.float16):
            return torch.mm(states, weight, out_dtype=torch.float32)
        return (states @ weight).float()


_COMPILED_LOGSUMEXP: list = []  # [] not tried yet, [fn] compiled, [None] compiling failed


def _logsumexp_last(logits: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(logits, dim=-1)


def fused_logsumexp(logits: torch.Tensor) -> torch.Tensor:
    """`torch.logsumexp(logits, -1)` compiled once (dynamic row count) into one fused reduction
    that reads the logits once; eager from the first time compiling or running the compiled
    function fails here (no Triton, say). Out-of-memory and accelerator errors are the
    caller's (the batch is split, or the process ends)."""
    from scoring.errors import is_accelerator_error

    if not _COMPILED_LOGSUMEXP:
        _COMPILED_LOGSUMEXP.append(torch.compile(_logsumexp_last, dynamic=True))
    compiled = _COMPILED_LOGSUMEXP[0]
    if compiled is not None:
        try:
            return compiled(logits)
        except Exception as exc:  # noqa: BLE001 - a compiler that fails only costs speed
            if is_out_of_memory(exc) or is_accelerator_error(exc):
                raise
            _COMPILED_LOGSUMEXP[0] = None
    return torch.logsumexp(logits, dim=-1)

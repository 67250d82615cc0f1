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
    final_logits_bias` (BART, PEGASUS, mBART, Marian), or for the causal families of
    `CAUSAL_LOGITS`, whose logits are `lm_head(h)` (h W^T + b: the `lm_head` of Phi and GPT-J
    has a bias b, Phi-3.5-MoE's with `lm_head_bias`, the other families' none) put through that
    family's own transform (`_transform`, docs/gpu.md "Output layer"):

        z = lm_head(h) * m / d,   then   z <- c * tanh(z / c)   where the family soft-caps,

    m = `config.logit_scale` (Cohere, Cohere 2), d = `config.logits_scaling` (Granite), c =
    `config.final_logit_softcapping` (Gemma 2, Gemma 3), each 1 (or absent) in every other
    family; others use the model's own forward.

    One pass over each chunk's float32 logits after the GEMM writes them: no bias pass when
    `final_logits_bias` is zero (checked when its weights change, not per call), and the
    log-normaliser log sum_v exp(z_v) = m + log sum_v exp(z_v - m), m = max_v z_v, as one fused
    reduction on CUDA (a compiled `logsumexp`; eager `torch.logsumexp` where compiling is not
    possible) and in place on the chunk on CPU (no temporary: docs/gpu.md).

    Weight layouts (docs/gpu.md, "Output layer"):
    - CPU: a (hidden, vocabulary) copy, 10-15 % faster with MKL than the transposed view;
    - CUDA (`pad_vocabulary`): the (vocabulary, hidden) layout with zero rows appended up to a
      multiple of VOCABULARY_ALIGNMENT, so the GEMM's operands and its float32 output have
      16-byte-aligned rows (50,265 -> 50,304 for BART); the padded columns are cut off the
      logits (a view) before the bias, the gather and the log-normaliser, so they add nothing;
    - `vocabulary_tile` (off unless set): the fused linear + log-softmax-gather. Logits are
      made a tile of vocabulary columns at a time and folded into a running maximum m and sum
      s (s <- s * exp(m_old - m_new) + sum_v exp(z_v - m_new)), the label's logit picked from
      the tile holding it, so only a (positions x tile) float32 block exists at any time."""

    ARCHITECTURES = ("bart", "mbart", "pegasus", "marian")
    # causal model type -> the config attributes that transform its logits, as its transformers
    # forward applies them (read in `_transform`, in one place); a family whose forward adds
    # anything else, or one not checked against its forward (tests/test_causal_families.py),
    # is not listed and scores through the model's own forward
    CAUSAL_LOGITS: dict[str, tuple[str, ...]] = {
        "gpt2": (), "llama": (), "mistral": (), "ministral": (), "qwen2": (), "qwen3": (), "qwen3_moe": (), "gemma": (),
        "phi3": (), "olmo2": (), "olmo3": (), "smollm3": (), "starcoder2": (), "glm4": (), "exaone4": (),
        "mixtral": (), "qwen2_moe": (), "olmoe": (), "gpt_neox": (), "opt": (), "falcon": (), "deepseek_v3": (),
        "glm4_moe": (), "gpt_oss": (), "seed_oss": (), "ernie4_5": (), "apertus": (), "hunyuan_v1_dense": (),
        "gptj": (), "gpt_bigcode": (), "phimoe": (), "ernie4_5_moe": (), "deepseek_v2": (), "nemotron": (), "bloom": (),
        "phi": (),  # lm_head with a bias (GPT-J's too, Phi-3.5-MoE's with lm_head_bias): `bias()` adds it
        "gemma2": ("final_logit_softcapping",), "gemma3_text": ("final_logit_softcapping",),
        "granite": ("logits_scaling",), "granitemoe": ("logits_scaling",),
        "cohere": ("logit_scale",), "cohere2": ("logit_scale",),
    }
    # Logits of one chunk stay below glibc's largest mmap threshold (32 MiB), so the allocator
    # reuses heap memory between chunks instead of mapping (and page-faulting) fresh pages:
    # with 1,024 positions x 50k vocabulary (200 MiB logits plus a 200 MiB temporary per chunk)
    # the logsumexp alone took 40 % of the head's time in a CPU profile.
    CHUNK_BYTES = 24 << 20
    # On CUDA a chunk is sized for the device: float32 logits of this many bytes per chunk
    # (about 2,600 positions of a 50k vocabulary), so the loop is a handful of large GEMMs.
    CUDA_CHUNK_BYTES = 512 << 20
    # vocabulary rows of the CUDA weight copy are padded to a multiple of this (64 x 2 bytes =
    # 128 bytes for bf16: what Hopper's TMA-based GEMM kernels need for their row strides)
    VOCABULARY_ALIGNMENT = 64

    def __init__(self, model):
        self.model = model
        self._weight_key = None
        self._weight = None
        self._bias_key = None
        self._bias = None
        self.vocabulary = model.get_output_embeddings().weight.shape[0]
        self.on_cuda = is_cuda(model.get_output_embeddings().weight.device)
        self.pad_vocabulary = self.on_cuda
        self.vocabulary_tile: int | None = None
        self.softcap, self.multiplier, self.divisor = logit_transform(model.config)
        chunk_bytes = self.CUDA_CHUNK_BYTES if self.on_cuda else self.CHUNK_BYTES
        self.positions_per_chunk = max(1, chunk_bytes // (4 * self.padded_vocabulary()))
        self.bias()  # read the bias once now (a host read), not inside a scoring call

    def padded_vocabulary(self) -> int:
        """Columns the GEMM writes: the vocabulary, rounded up to the alignment when padding."""
        if not self.pad_vocabulary:
            return self.vocabulary
        alignment = self.VOCABULARY_ALIGNMENT
        return -(-self.vocabulary // alignment) * alignment

    def vocabulary_major_weight(self) -> torch.Tensor:
        """The output embedding as the GEMM reads it: a (hidden, vocabulary) copy, or with
        `pad_vocabulary` a (padded vocabulary, hidden) copy with zero rows past the vocabulary.
        Rebuilt whenever the model's weight is replaced or changed in place (e.g. a state dict
        loaded on top) or the layout is switched."""
        weight = self.model.get_output_embeddings().weight
        key = (weight.data_ptr(), _version_of(weight), weight.dtype, self.pad_vocabulary)
        if key != self._weight_key:
            if self.pad_vocabulary:
                padded = weight.new_zeros((self.padded_vocabulary(), weight.shape[1]))
                padded[: self.vocabulary] = weight.detach()
                self._weight = padded
            else:
                self._weight = weight.detach().t().contiguous()
            self._weight_key = key
        return self._weight

    def bias(self) -> torch.Tensor | None:
        """The logits' bias in float32: `final_logits_bias` (BART and kin), else the output
        layer's own bias (Phi's and GPT-J's `lm_head = Linear(hidden, vocabulary, bias=True)`,
        whose forward is h W^T + b); None when there is none or it is all zeros (as in the published BART and
        PEGASUS checkpoints): then no pass adds it. Re-checked only when the bias tensor is
        replaced or changed in place (e.g. a state dict loaded on top)."""
        bias = getattr(self.model, "final_logits_bias", None)
        if bias is None:
            bias = getattr(self.model.get_output_embeddings(), "bias", None)
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
        """The head of a causal LM of a `CAUSAL_LOGITS` family whose logits are
        `lm_head(base_model(x))` through the family's transform, or None: another family, an
        output layer that is not a plain linear map (h W^T, plus its bias where it has one), a
        transform value that is not a finite positive number (the model's own forward then
        decides what it means), or a model that attends both ways."""
        if getattr(model.config, "model_type", None) not in cls.CAUSAL_LOGITS or not is_causal(model.config):
            return None
        try:
            logit_transform(model.config)
        except ValueError:
            return None
        head = model.get_output_embeddings()
        if not isinstance(head, torch.nn.Linear) or getattr(model, "base_model", model) is model:
            return None
        return cls(model)

    def target_logprob_sums(self, hidden: torch.Tensor, labels: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
        """Per row: sum over its first `lengths[row]` positions of log p(label) =
        logit[label] - logsumexp(logits), in float32 (logsumexp as max + log(sum(exp(logits -
        max))), in place on the chunk). The real positions are indexed from the host-side
        lengths, so the loop bounds never wait for the device."""
        owners, columns, total = real_positions(lengths, hidden.device)
        return self.logprob_sums_at(hidden[owners, columns], labels[owners, columns], owners, labels.shape[0])

    def logprob_sums_at(self, states: torch.Tensor, targets: torch.Tensor, owners: torch.Tensor, rows: int) -> torch.Tensor:
        """Sum of log p(targets[p] | states[p]) over the positions p of each of `rows` rows
        (`owners[p]` the row of position p), float32, a chunk of positions at a time."""
        total = states.shape[0]
        token_logprobs = torch.empty(total, dtype=torch.float32, device=states.device)
        for start in range(0, total, self.positions_per_chunk):
            stop = start + self.positions_per_chunk
            token_logprobs[start:stop] = self.position_logprobs(states[start:stop], targets[start:stop])
        sums = torch.zeros(rows, dtype=torch.float32, device=states.device)
        return sums.index_add_(0, owners, token_logprobs)

    def position_logprobs(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(target) of each (position, hidden) row of `states`, float32, one chunk."""
        if self.vocabulary_tile:
            return self._tiled_logprobs(states, targets)
        logits = self._logits(states, 0, self.vocabulary)
        picked = logits.gather(-1, targets[:, None]).squeeze(-1)
        return picked - self._log_normaliser(logits)

    def _tiled_logprobs(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """`position_logprobs` a vocabulary tile at a time, with a running log-sum-exp."""
        tile = self.vocabulary_tile
        peak = torch.full((states.shape[0],), float("-inf"), dtype=torch.float32, device=states.device)
        total = torch.zeros_like(peak)
        picked = torch.zeros_like(peak)
        for low in range(0, self.vocabulary, tile):
            high = min(low + tile, self.vocabulary)
            logits = self._logits(states, low, high)
            inside = (targets >= low) & (targets < high)
            column = (targets - low).clamp_(0, high - low - 1)
            picked = torch.where(inside, logits.gather(-1, column[:, None]).squeeze(-1), picked)
            new_peak = torch.maximum(peak, logits.amax(dim=-1))
            total = total * (peak - new_peak).exp() + logits.sub_(new_peak[:, None]).exp_().sum(dim=-1)
            peak = new_peak
        return picked - (total.log() + peak)

    def _log_normaliser(self, logits: torch.Tensor) -> torch.Tensor:
        """log sum_v exp(logits[:, v]) per row, float32; may overwrite `logits`."""
        if self.on_cuda:
            return fused_logsumexp(logits)
        peak = logits.amax(dim=-1, keepdim=True)
        return logits.sub_(peak).exp_().sum(dim=-1).log_() + peak.squeeze(-1)

    def _logits(self, states: torch.Tensor, low: int, high: int) -> torch.Tensor:
        """float32 logits of vocabulary columns [low, high): the GEMM, the bias, the soft cap.
        On CUDA a half-precision GEMM accumulates into float32 directly (no rounding of the
        logits to bf16/fp16 first). With the padded layout the GEMM runs up to the next
        aligned column and the padding is cut off as a view (rows keep their aligned stride)."""
        weight, bias = self.vocabulary_major_weight(), self.bias()
        if self.pad_vocabulary:
            alignment = self.VOCABULARY_ALIGNMENT
            columns = weight[low : min(-(-high // alignment) * alignment, weight.shape[0])].t()
        else:
            columns = weight if (low, high) == (0, self.vocabulary) else weight[:, low:high]
        if self.on_cuda and states.dtype in (torch.bfloat16, torch.float16):
            logits = torch.mm(states, columns, out_dtype=torch.float32)
        else:
            logits = (states @ columns).float()
        logits = logits[:, : high - low]
        if bias is not None:
            logits += bias[low:high]
        return self._transform(logits)

    def _transform(self, logits: torch.Tensor) -> torch.Tensor:
        """The family's logit transform, in place on float32 logits (class docstring): times
        `logit_scale`, divided by `logits_scaling`, soft-capped c * tanh(z / c), in the order
        and with the operations the transformers forwards use."""
        if self.multiplier is not None:
            logits.mul_(self.multiplier)
        if self.divisor is not None:
            logits.div_(self.divisor)
        if self.softcap is not None:
            logits.div_(self.softcap).tanh_().mul_(self.softcap)
        return logits


def is_causal(config) -> bool:
    """False for a decoder configured to attend both ways (Gemma 3's
    `use_bidirectional_attention`, or `is_causal` set False): not a left-to-right LM."""
    return bool(getattr(config, "is_causal", True)) and not getattr(config, "use_bidirectional_attention", False)


def logit_transform(config) -> tuple[float | None, float | None, float | None]:
    """(soft cap c, multiplier m, divisor d) of a causal family's logits (`OutputHead.CAUSAL_LOGITS`),
    None where the family does not apply one or its value is 1 (no pass), read only from the
    attributes the family's forward reads: a stray attribute another family ignores changes
    nothing. ValueError for a value that is not a finite positive number."""
    import math

    found: dict[str, float | None] = {}
    for name in OutputHead.CAUSAL_LOGITS.get(getattr(config, "model_type", None), ()):
        value = getattr(config, name, None)
        if value is None and name == "final_logit_softcapping":  # no cap: what the forward does with None
            found[name] = None
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} = {value!r} is not a finite positive number")
        found[name] = None if (value == 1 and name != "final_logit_softcapping") else float(value)
    return found.get("final_logit_softcapping"), found.get("logit_scale"), found.get("logits_scaling")


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

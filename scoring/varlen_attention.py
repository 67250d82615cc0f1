"""Attention over packed sequences: no padding, no materialised mask.

Sequences are laid end to end in one row of T tokens; which token belongs to which sequence is
given by cumulative sequence lengths cu = [0, L_1, L_1 + L_2, ..., T] built on the host from
known lengths (never read back from the device). Attention is then block-diagonal: token i of
sequence k attends to tokens j of sequence k only, with j <= i for causal (decoder)
self-attention: softmax(q_i k_j^T * scale) v_j over exactly those j (docs/gpu.md, "Packed
tokens").

Two kernels, the same numbers:
- CUDA, bfloat16/float16: torch's `torch.nn.attention.varlen.varlen_attn` (FlashAttention on
  cu_seqlens), causal as the window (-1, 0);
- everywhere else (float32, CPU): SDPA per sequence (`is_causal=True`), looping over the
  host-known lengths, which is also the reference the CUDA kernel is checked against.

Plugged into transformers through the engine's attention function (`packed_attention` is
called when a forward is given `ctgscore_packing=PackedSegments(...)`). A packed seq2seq
decoder (scoring/packed_decoder.py) is given a `DecoderPacking`: its self-attention is
`packed_attention` over the targets, its cross-attention `packed_cross_attention`, separate
cu_seqlens for queries (a source's targets) and keys (that source's packed states).

Under `torch.compile` both run as one opaque op (`ctgscore::packed_attention`; source runs:
`ctgscore::source_run_attention`) whose inputs are tensors only, the host lengths as CPU
tensors: dynamo never sees the Python lengths, so a compiled layer does not recompile for every
new number of sequences (docs/gpu.md, "How often a layer compiles").
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch


@dataclass(frozen=True)
class PackedSegments:
    """Sequence boundaries of a packed row: `lengths` on the host (Python ints; a compiled
    layer reads them as `host_lengths`, a CPU tensor, so that it need not recompile for each
    new tuple), `cu_seqlens` (int32, n + 1) on the compute device, `max_length` the longest
    sequence."""

    lengths: tuple[int, ...]
    cu_seqlens: torch.Tensor
    max_length: int
    # `lengths` as a CPU int64 tensor, what a compiled layer reads (`packed_attention_op`)
    host_lengths: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "host_lengths", host_tensor(self.lengths))

    @classmethod
    def of(cls, lengths: Sequence[int], device) -> "PackedSegments":
        """Segments of sequences of `lengths`, cu_seqlens copied to `device` (use the packed
        batch's own copy where there is one: `scoring.ragged.packed_causal`)."""
        lengths = tuple(int(n) for n in lengths)
        return cls(lengths, torch.from_numpy(cu_seqlens(lengths)).to(device), max(lengths))

    @property
    def total(self) -> int:
        return sum(self.lengths)


def host_tensor(lengths: Sequence[int]) -> torch.Tensor:
    """Host-known lengths as a CPU int64 tensor (built on the host: no device read)."""
    return torch.from_numpy(np.asarray(lengths, dtype=np.int64).reshape(-1))


def cu_seqlens(lengths: Sequence[int]) -> np.ndarray:
    """[0, L_1, L_1 + L_2, ..., sum L] as int32 (the layout FlashAttention's varlen kernels read)."""
    counts = np.asarray(lengths, dtype=np.int64)
    out = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=out[1:])
    return out


def varlen_keywords() -> frozenset[str] | None:
    """The keyword parameters of this torch's `varlen_attn`, or None without one. Its signature
    grew release by release (2.10: `is_causal`; later `scale` and `window_size`; then
    `enable_gqa` and `seqused_k`), and a GPU machine may hold an older torch than this one."""
    global _VARLEN_KEYWORDS
    if _VARLEN_KEYWORDS is False:
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:
            _VARLEN_KEYWORDS = None
        else:
            _VARLEN_KEYWORDS = frozenset(inspect.signature(varlen_attn).parameters)
    return _VARLEN_KEYWORDS


_VARLEN_KEYWORDS: frozenset[str] | None | bool = False  # not looked up yet


def kernel_supports(keywords: frozenset[str] | None, grouped: bool = False, used_keys: bool = False) -> bool:
    """Whether a `varlen_attn` with these keyword parameters can run a call that needs a scale
    (always), causal or full attention, grouped-query heads (`grouped`) and keys used only up
    to a per-segment count (`used_keys`). A call it cannot run takes the SDPA reference."""
    if keywords is None or "scale" not in keywords:
        return False
    if not {"window_size", "is_causal"} & keywords:
        return False
    return (not grouped or "enable_gqa" in keywords) and (not used_keys or "seqused_k" in keywords)


def varlen_support() -> dict[str, bool]:
    """Which packed calls this torch's `varlen_attn` runs on CUDA in half precision (the others
    take the SDPA reference): what a benchmark report records beside the torch version."""
    keywords = varlen_keywords()
    return {"plain": kernel_supports(keywords), "grouped_heads": kernel_supports(keywords, grouped=True),
            "source_runs": kernel_supports(keywords, used_keys=True)}


def kernel_keywords(keywords: frozenset[str], causal: bool, grouped: bool = False, used_keys=None) -> dict:
    """The keyword arguments that ask a `varlen_attn` with these parameters for causal (or full)
    attention, grouped-query heads and per-segment used keys."""
    extra: dict = {}
    if "window_size" in keywords:
        extra["window_size"] = (-1, 0) if causal else (-1, -1)
    else:
        extra["is_causal"] = causal
    if grouped:
        extra["enable_gqa"] = True
    if used_keys is not None:
        extra["seqused_k"] = used_keys
    return extra


def varlen_kernel_available(query: torch.Tensor, grouped: bool = False, used_keys: bool = False) -> bool:
    """torch's varlen FlashAttention runs this call here: CUDA, half precision, and a
    `varlen_attn` that takes what the call needs (`kernel_supports`)."""
    if query.device.type != "cuda" or query.dtype not in (torch.bfloat16, torch.float16):
        return False
    return kernel_supports(varlen_keywords(), grouped, used_keys)


def run_varlen_kernel(query, key, value, cu_q, cu_k, max_q: int, max_k: int, scale: float | None, causal: bool,
                      used_keys=None) -> torch.Tensor:
    """`varlen_attn` on packed (T, H, D) tensors, its keywords spelled for this torch."""
    from torch.nn.attention.varlen import varlen_attn

    extra = kernel_keywords(varlen_keywords(), causal, query.shape[1] != key.shape[1], used_keys)
    return varlen_attn(query, key, value, cu_q, cu_k, max_q, max_k, scale=scale, **extra)


def packed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, segments: PackedSegments,
                     scale: float | None, causal: bool = True) -> torch.Tensor:
    """Attention of one packed row. query (1, H, T, D), key/value (1, H_kv, T, D) as
    transformers' attention layers hand them over (H a multiple of H_kv: grouped-query
    attention); returns (1, T, H, D), the layout the layers expect back."""
    if torch.compiler.is_compiling():  # one opaque op: no guard on the Python lengths
        return packed_attention_op(query, key, value, segments.host_lengths, segments.host_lengths, segments.cu_seqlens,
                                   segments.cu_seqlens, scale, causal)
    return segment_attention(query, key, value, segments.lengths, segments.lengths, segments.cu_seqlens, segments.cu_seqlens,
                             scale, causal)


def segment_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, query_lengths: Sequence[int],
                      key_lengths: Sequence[int], cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                      scale: float | None, causal: bool) -> torch.Tensor:
    """Query segment u (1, H, T_q, D) attends to key segment u (1, H_kv, T_k, D), causal only
    for self-attention (the same lengths); the one place that chooses the kernel: torch's
    varlen kernel where `varlen_kernel_available`, SDPA per segment elsewhere. Returns
    (1, T_q, H, D)."""
    if varlen_kernel_available(query, grouped=query.shape[1] != key.shape[1]):
        output = run_varlen_kernel(
            query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1),
            cu_seqlens_q, cu_seqlens_k, max(query_lengths), max(key_lengths), scale, causal,
        )
        return output.unsqueeze(0)
    if causal:
        return reference_packed_attention(query, key, value, query_lengths, scale, causal=True)
    return reference_cross_attention(query, key, value, query_lengths, key_lengths, scale)


def reference_packed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, lengths: Sequence[int],
                               scale: float | None, causal: bool = True) -> torch.Tensor:
    """`packed_attention` as SDPA per sequence (host-known lengths: no device read)."""
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads != kv_heads:
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    output = torch.empty((1, query.shape[2], heads, query.shape[3]), dtype=query.dtype, device=query.device)
    start = 0
    for length in lengths:
        stop = start + length
        part = torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start:stop], key[:, :, start:stop], value[:, :, start:stop], is_causal=causal, scale=scale)
        output[:, start:stop] = part.transpose(1, 2)
        start = stop
    return output


@dataclass(frozen=True)
class SourceRuns:
    """Cross-attention of a decoder chunk whose rows are sorted by source: query row r reads the
    keys/values of source `row_sources[r]` (an index into the chunk's U key rows, a view of the
    pool's rows from the chunk's first source to its last; rows no query uses are skipped),
    each source's first `source_lengths[u]` positions. All host-side ints: no device read.
    `kernel_index` (CUDA only): cu_seqlens of the queries and of the keys, and the keys used
    per segment, for the varlen kernel."""

    row_sources: tuple[int, ...]
    source_lengths: tuple[int, ...]
    kernel_index: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    # the two tuples as CPU int64 tensors, what a compiled layer reads (`source_run_attention_op`)
    host_row_sources: torch.Tensor = field(init=False, repr=False, compare=False)
    host_source_lengths: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "host_row_sources", host_tensor(self.row_sources))
        object.__setattr__(self, "host_source_lengths", host_tensor(self.source_lengths))

    def runs(self) -> list[tuple[int, int, int]]:
        """(source, first row, row count) of every source some row reads, in row order."""
        found: list[tuple[int, int, int]] = []
        for row, source in enumerate(self.row_sources):
            if found and found[-1][0] == source:
                found[-1] = (source, found[-1][1], found[-1][2] + 1)
            else:
                found.append((source, row, 1))
        return found

    def with_kernel_index(self, query_length: int, key_width: int, device) -> "SourceRuns":
        """The same runs with the varlen kernel's index tensors built on the host for queries of
        `query_length` positions per row and key rows `key_width` positions apart."""
        runs = self.runs()
        index = np.zeros(3 * len(runs) + 2, dtype=np.int32)
        cu_q, cu_k, used = index[: len(runs) + 1], index[len(runs) + 1 : 2 * len(runs) + 2], index[2 * len(runs) + 2 :]
        np.cumsum([count * query_length for _, _, count in runs], out=cu_q[1:])
        starts = [source * key_width for source, _, _ in runs] + [len(self.source_lengths) * key_width]
        cu_k[:] = np.asarray(starts) - starts[0]
        used[:] = [self.source_lengths[source] for source, _, _ in runs]
        moved = torch.from_numpy(index)
        moved = moved.pin_memory().to(device, non_blocking=True) if torch.device(device).type == "cuda" else moved.to(device)
        return SourceRuns(self.row_sources, self.source_lengths, tuple(moved.split([len(runs) + 1, len(runs) + 1, len(runs)])))


def source_run_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, runs: SourceRuns,
                         scale: float | None) -> torch.Tensor:
    """Cross-attention of query rows (R, H, L, D) to their own source among key rows
    (U, H, W, D), no mask: every query of a source's rows attends to that source's real
    positions, read once for all of its rows. Returns (R, L, H, D)."""
    if torch.compiler.is_compiling():  # one opaque op: no guard on the Python row layout
        cu_q, cu_k, used = runs.kernel_index if runs.kernel_index is not None else (None, None, None)
        return source_run_attention_op(query, key, value, runs.host_row_sources, runs.host_source_lengths, cu_q, cu_k, used,
                                       scale)
    rows, heads, length, dim = query.shape
    if (runs.kernel_index is not None and varlen_kernel_available(query, grouped=heads != key.shape[1], used_keys=True)
            and key.transpose(1, 2).is_contiguous()):
        cu_q, cu_k, used = runs.kernel_index
        first = runs.runs()[0][0]
        flat_keys = key[first:].transpose(1, 2).reshape(-1, key.shape[1], dim)  # a view: the projection's layout
        flat_values = value[first:].transpose(1, 2).reshape(-1, value.shape[1], dim)
        output = run_varlen_kernel(query.transpose(1, 2).reshape(rows * length, heads, dim), flat_keys, flat_values, cu_q, cu_k,
                                   length * max(count for _, _, count in runs.runs()), key.shape[2], scale, False, used)
        return output.view(rows, length, heads, dim)
    output = torch.empty((rows, length, heads, dim), dtype=query.dtype, device=query.device)
    for source, first_row, count in runs.runs():
        width = runs.source_lengths[source]
        folded = query[first_row : first_row + count].transpose(0, 1).reshape(1, heads, count * length, dim)
        part = torch.nn.functional.scaled_dot_product_attention(
            folded, key[source : source + 1, :, :width], value[source : source + 1, :, :width], scale=scale)
        output[first_row : first_row + count] = part[0].view(heads, count, length, dim).permute(1, 2, 0, 3)
    return output


@dataclass(frozen=True)
class CrossSegments:
    """Cross-attention of a packed decoder row: query group u is the packed tokens of all of
    the chunk's targets of source u (contiguous, `query_lengths[u]` tokens), key group u that
    source's packed states (`key_lengths[u]` tokens), so each source's keys/values are read
    once for all of its targets. Host-side ints and their cu_seqlens (int32, U + 1) on the
    compute device, built on the host: no device read."""

    query_lengths: tuple[int, ...]
    key_lengths: tuple[int, ...]
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    max_query_length: int
    max_key_length: int
    # the two length tuples as CPU int64 tensors, what a compiled layer reads (`packed_attention_op`)
    host_query_lengths: torch.Tensor = field(init=False, repr=False, compare=False)
    host_key_lengths: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "host_query_lengths", host_tensor(self.query_lengths))
        object.__setattr__(self, "host_key_lengths", host_tensor(self.key_lengths))


@dataclass(frozen=True)
class DecoderPacking:
    """The two attention calls of a packed decoder layer: self-attention causal and
    block-diagonal per target (`targets`), cross-attention per source group (`cross`). The
    engine's attention function tells them apart by the module's `is_causal`."""

    targets: PackedSegments
    cross: CrossSegments


def packed_cross_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cross: CrossSegments,
                           scale: float | None) -> torch.Tensor:
    """Non-causal attention of query group u (1, H, T_q, D) to key group u (1, H_kv, T_k, D),
    groups given by `cross`; returns (1, T_q, H, D). torch's varlen kernel with separate
    query and key cu_seqlens on CUDA in half precision, SDPA per group elsewhere."""
    if torch.compiler.is_compiling():  # one opaque op: no guard on the Python lengths
        return packed_attention_op(query, key, value, cross.host_query_lengths, cross.host_key_lengths, cross.cu_seqlens_q,
                                   cross.cu_seqlens_k, scale, False)
    return segment_attention(query, key, value, cross.query_lengths, cross.key_lengths, cross.cu_seqlens_q, cross.cu_seqlens_k,
                             scale, False)


def reference_cross_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, query_lengths: Sequence[int],
                              key_lengths: Sequence[int], scale: float | None) -> torch.Tensor:
    """`packed_cross_attention` as SDPA per group (host-known lengths: no device read)."""
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads != kv_heads:
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    output = torch.empty((1, query.shape[2], heads, query.shape[3]), dtype=query.dtype, device=query.device)
    query_start = key_start = 0
    for query_length, key_length in zip(query_lengths, key_lengths):
        query_stop, key_stop = query_start + query_length, key_start + key_length
        part = torch.nn.functional.scaled_dot_product_attention(
            query[:, :, query_start:query_stop], key[:, :, key_start:key_stop], value[:, :, key_start:key_stop], scale=scale)
        output[:, query_start:query_stop] = part.transpose(1, 2)
        query_start, key_start = query_stop, key_stop
    return output


# explicit schemas: the annotations are strings here (`from __future__ import annotations`), and
# the GPU machines hold an older torch than this one
@torch.library.custom_op("ctgscore::packed_attention", mutates_args=(), schema=(
    "(Tensor query, Tensor key, Tensor value, Tensor query_lengths, Tensor key_lengths, Tensor cu_seqlens_q, "
    "Tensor cu_seqlens_k, float? scale, bool causal) -> Tensor"))
def packed_attention_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, query_lengths: torch.Tensor,
                        key_lengths: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                        scale: float | None, causal: bool) -> torch.Tensor:
    """`packed_attention` (self-attention: the same lengths for queries and keys) or
    `packed_cross_attention` as one op a compiled layer calls without tracing into it: the
    lengths arrive as CPU int64 tensors (`host_tensor`), read here on the host (no device
    read), so dynamo guards on no Python int and a new chunk layout needs no recompile. The
    same kernel choice as the eager functions: torch's varlen kernel where
    `varlen_kernel_available`, the SDPA reference elsewhere. Returns (1, T_q, H, D)."""
    query_host, key_host = query_lengths.numpy().tolist(), key_lengths.numpy().tolist()  # CPU tensors: host memory
    return segment_attention(query, key, value, query_host, key_host, cu_seqlens_q, cu_seqlens_k, scale, causal)


@packed_attention_op.register_fake
def _packed_attention_shape(query, key, value, query_lengths, key_lengths, cu_seqlens_q, cu_seqlens_k, scale, causal):
    return query.new_empty((query.shape[0], query.shape[2], query.shape[1], query.shape[3]))


@torch.library.custom_op("ctgscore::source_run_attention", mutates_args=(), schema=(
    "(Tensor query, Tensor key, Tensor value, Tensor row_sources, Tensor source_lengths, Tensor? cu_seqlens_q, "
    "Tensor? cu_seqlens_k, Tensor? used_keys, float? scale) -> Tensor"))
def source_run_attention_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, row_sources: torch.Tensor,
                            source_lengths: torch.Tensor, cu_seqlens_q: torch.Tensor | None, cu_seqlens_k: torch.Tensor | None,
                            used_keys: torch.Tensor | None, scale: float | None) -> torch.Tensor:
    """`source_run_attention` as one op a compiled decoder layer calls without tracing into it:
    the `SourceRuns` rebuilt here from CPU int64 tensors (host memory, no device read) and the
    kernel index, so a new chunk layout needs no recompile. Returns (R, L, H, D)."""
    index = None if cu_seqlens_q is None else (cu_seqlens_q, cu_seqlens_k, used_keys)
    runs = SourceRuns(tuple(row_sources.numpy().tolist()), tuple(source_lengths.numpy().tolist()), index)
    return source_run_attention(query, key, value, runs, scale)


@source_run_attention_op.register_fake
def _source_run_attention_shape(query, key, value, row_sources, source_lengths, cu_seqlens_q, cu_seqlens_k, used_keys, scale):
    return query.new_empty((query.shape[0], query.shape[2], query.shape[1], query.shape[3]))

"""Where one scoring call's time goes: every kernel of a `torch.profiler` trace put in one
category by its name, and the call's time not covered by any kernel counted as idle.

Categories and the kernel-name patterns that select them (case-insensitive regular
expressions, tried in this order, first match wins):

- not a kernel, left out: ``Command Buffer Full`` (CUPTI's record of launches blocked by a full
  driver queue: CPU time, not GPU time), the synchronisation records (``Stream Sync``,
  ``Event Sync``, ``Context Sync``, ``Stream Wait Event``: waiting, not work) and other CUPTI
  bookkeeping records;
- ``head``: a kernel launched by an operator over the vocabulary (an input whose last
  dimension is the vocabulary, padded by up to 256 columns), by an operator inside a profiler
  range whose name says ``head`` / ``logsumexp`` / ``log_softmax``, or whose own name says
  ``logsumexp``, ``log_softmax``, ``cross_entropy`` or ``nll_loss``: the output layer's GEMM
  and its reductions, whatever kernel cuBLAS picks for them;
- ``memcpy``: ``Memcpy ...``, ``Memset ...`` (copies and fills the driver runs);
- ``attention``: ``flash``, ``fmha``, ``sdpa``, ``attention``, ``attn``, ``mha``, ``varlen``
  (cuDNN's ``cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma...``, FlashAttention's
  ``flash_fwd_kernel``, the memory-efficient ``fmha_cutlassF_...``);
- ``gemm``: ``gemm``, ``nvjet`` (cuBLAS's Hopper kernels, ``nvjet_sm90_tst_...``), ``cutlass``,
  ``xmma``, ``wgmma``, ``hmma``, ``cublas``, ``splitKreduce``, ``matmul``, ``addmm``, ``bmm``,
  a whole-word ``mm``, Inductor's ``triton_tem`` templates and ``triton_mm``;
- ``elementwise``: memory-bound work (on a CPU also the arithmetic ``aten::`` operators): ``elementwise``, ``vectorized``, ``layer_norm``,
  ``rms_norm``, ``reduce``, ``softmax``, ``gelu``, ``silu``, ``copy``, ``cat``, ``index``,
  ``gather``, ``scatter``, ``fill``, ``where``, ``embedding``, Inductor's pointwise / reduction
  kernels (``triton_poi``, ``triton_per``, ``triton_red``) and anything in ``at::native``;
- ``other``: the rest (listed under `top`, so a new kernel family shows up by name).

On CUDA the kernels are the trace's device events (profiler ranges mirrored onto the GPU
timeline and sync records left out), each linked to the operator that launched it (for the
head rule). On a CPU (the dry mode) there are no kernels: each operator's self
time stands in for its kernels, classified by the same patterns.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

CATEGORIES = ("gemm", "attention", "head", "elementwise", "memcpy", "other")
HEAD_PAD = 256  # a vocabulary padded for aligned kernels is at most this much wider

_IGNORE = re.compile(r"^(command buffer full|activity buffer request|\[memory\]|overhead|"
                     r"(stream|event|context|device|unknown) sync|stream wait event)", re.I)
_PATTERNS = [
    ("head", re.compile(r"logsumexp|log_softmax|cross_entropy|nll_loss", re.I)),
    ("memcpy", re.compile(r"^memcpy|^memset|\bmemcpy|\bmemset", re.I)),
    ("attention", re.compile(r"flash|fmha|sdpa|attention|attn|\bmha|varlen", re.I)),
    ("gemm", re.compile(r"gemm|nvjet|cutlass|xmma|wgmma|hmma|cublas|splitkreduce|matmul|addmm|bmm|\bmm\b|triton_tem|triton_mm", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|layer_?norm|rms_?norm|reduce|softmax|gelu|silu|copy|\bcat\b|cat_|index|"
                               r"gather|scatter|fill|where|embedding|triton_(poi|per|red)|at::native|"
                               r"^aten::(add|mul|sub|rsub|div|exp|log|tanh|pow|neg|clamp|masked_fill|sum|mean|amax|max|cumsum|"
                               r"arange|stack|_to_copy|contiguous|clone|zero_|lt|gt|eq|ne|abs|sqrt|rsqrt)", re.I)),
]
_HEAD_RANGE = re.compile(r"head|logsumexp|log_softmax", re.I)


def classify(name: str) -> str | None:
    """The category of a kernel (or CPU operator) by its name alone; None: not a kernel."""
    if _IGNORE.match(name.strip()):
        return None
    for category, pattern in _PATTERNS:
        if pattern.search(name):
            return category
    return "other"


def category(name: str, over_vocabulary: bool) -> str | None:
    """`classify`, with GEMM and memory-bound kernels of an operator over the vocabulary
    (the output layer) counted as `head`."""
    found = classify(name)
    if over_vocabulary and found in ("gemm", "elementwise", "other"):
        return "head"
    return found


def over_vocabulary(shapes: Iterable[Sequence[int]] | None, vocabularies: Sequence[int]) -> bool:
    """True when some input's last dimension is a vocabulary (or it padded by < HEAD_PAD)."""
    for shape in shapes or ():
        if shape and isinstance(shape, (list, tuple)) and isinstance(shape[-1], int):
            if any(v <= shape[-1] < v + HEAD_PAD for v in vocabularies):
                return True
    return False


@dataclass
class Record:
    """One kernel: name, start and end (µs, the trace's clock), whether the output layer's."""

    name: str
    start: float
    end: float
    head: bool = False


def _union(intervals: list[tuple[float, float]]) -> float:
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


def breakdown(records: Sequence[Record], span_us: float, call_seconds: float | None = None, top: int = 12,
              nested: bool = False) -> dict:
    """Time per category (ms), the GPU-busy share and idle time of one call.

    `span_us` is the profiled call's wall time; `call_seconds` the same call's steady-state
    time without the profiler (the median of the timed runs), against which busy and idle are
    given when known (the profiler slows the host side, not the kernels). `nested`: the
    records are operators' self times (CPU), whose busy time is their sum, not their union."""
    per_category: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)
    per_kernel: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    intervals = []
    for record in records:
        found = category(record.name, record.head)
        if found is None:
            continue
        duration = max(record.end - record.start, 0.0)
        per_category[found] += duration
        entry = per_kernel[(record.name, found)]
        entry[0] += duration
        entry[1] += 1
        intervals.append((record.start, record.end))
    busy_us = sum(end - start for start, end in intervals) if nested else _union(intervals)
    wall_us = max(call_seconds * 1e6 if call_seconds else span_us, busy_us)  # noise never makes shares exceed 100 %
    idle_us = max(wall_us - busy_us, 0.0)
    ms = {name: round(value / 1e3, 3) for name, value in per_category.items()}
    ms["idle"] = round(idle_us / 1e3, 3)
    share = {name: (value * 1e3 / wall_us if wall_us else None) for name, value in ms.items()}
    ranked = sorted(per_kernel.items(), key=lambda item: -item[1][0])[:top]
    return {
        "ms": ms,
        "share": share,
        "busy_ms": round(busy_us / 1e3, 3),
        "busy_fraction": min(busy_us / wall_us, 1.0) if wall_us else None,
        "wall_ms": round(wall_us / 1e3, 3),
        "profiled_span_ms": round(span_us / 1e3, 3),
        "busy_fraction_profiled": min(busy_us / span_us, 1.0) if span_us else None,
        "kernels": sum(int(v[1]) for v in per_kernel.values()),
        "top": [{"name": name[:160], "category": cat, "ms": round(v[0] / 1e3, 3), "calls": int(v[1])} for (name, cat), v in ranked],
    }


def _is_cuda(event) -> bool:
    return str(getattr(event, "device_type", "")).endswith("CUDA")


def _not_a_kernel(event) -> bool:
    """A device-side record that is no kernel: a synchronisation (CUPTI's cuda_sync activity)
    or a profiler range mirrored onto the GPU timeline (gpu_user_annotation), which spans the
    kernels inside it."""
    activity = str(getattr(event, "activity_type", "") or "").lower()
    return "sync" in activity or "annotation" in activity or bool(getattr(event, "is_user_annotation", False))


def records_from_events(events, vocabularies: Sequence[int], call_range: str) -> tuple[list[Record], float, str]:
    """(kernels, span of the `call_range` profiler range in µs, what stood in for kernels)
    from `prof.events()`: CUDA kernels when there are any, else CPU operators' self time."""
    events = list(events)
    ranges = [e for e in events if e.name == call_range and not _is_cuda(e)]
    span = (ranges[0].time_range.end - ranges[0].time_range.start) if ranges else 0.0
    # operators: the trace's host events not linked to another one (kernels and runtime calls
    # carry the launching operator's id as their linked correlation id)
    cpu_ops = {e.id: e for e in events if not _is_cuda(e) and not getattr(e, "is_async", False)
               and not getattr(e, "linked_correlation_id", 0)}

    def head_context(op) -> bool:
        depth = 0
        while op is not None and depth < 64:
            if over_vocabulary(getattr(op, "input_shapes", None), vocabularies) or (op.name != call_range and _HEAD_RANGE.search(op.name)):
                return True
            op, depth = op.cpu_parent, depth + 1
        return False

    kernels = [e for e in events if _is_cuda(e) and not _not_a_kernel(e) and e.name != call_range]
    if kernels:
        records = []
        for kernel in kernels:
            op = cpu_ops.get(getattr(kernel, "linked_correlation_id", 0))
            records.append(Record(kernel.name, kernel.time_range.start, kernel.time_range.end, head_context(op)))
        return records, span, "cuda kernels"
    # CPU: operators' self time (an operator minus its children), inside the call's range
    records = []
    for op in cpu_ops.values():
        if not op.name.startswith("aten::"):
            continue
        children = sum(c.time_range.end - c.time_range.start for c in op.cpu_children)
        self_time = (op.time_range.end - op.time_range.start) - children
        if self_time > 0:
            records.append(Record(op.name, op.time_range.start, op.time_range.start + self_time, head_context(op)))
    return records, span, "cpu operators (self time)"


def profile_call(run: Callable[[], object], synchronize: Callable[[], None], vocabularies: Sequence[int], cuda: bool,
                 call_seconds: float | None = None) -> dict:
    """Profile one call of `run` (already warm) and break its time down by category."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    call_range = "bench-call"
    with profile(activities=activities, record_shapes=True) as prof:
        with record_function(call_range):
            run()
            synchronize()
    records, span, source = records_from_events(prof.events(), vocabularies, call_range)
    result = breakdown(records, span, call_seconds, nested=not source.startswith("cuda"))
    result["timeline"] = source
    result["torch"] = torch.__version__
    return result

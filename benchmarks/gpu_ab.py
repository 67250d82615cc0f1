"""A/B of the engine's variants in one process: `make gpu-check` runs it after the four core
cases, and it decides which engine settings become defaults (docs/gpu.md, "`make gpu-check`
and `make gpu-sweep`").

Per workload (BART s->h distinct and grouped, PEGASUS CTRLEval prefix: the seq2seq variants;
GPT-2 perplexity: the causal ones) every variant gets its own engine on the same model (a
second, identically seeded model for a variant that changes its model in place: compiled
layers, the Python GELU kept), and all of
them are timed as the core cases are (held-out rows, ids from Arrow, steady runs with the
device synchronised at their end) but shorter: `ROUNDS` rounds of one run of >= `MIN_SECONDS`
per variant, the default first, the rounds alternating forward and reverse order (A B C,
C B A, A B C), so drift in clocks or temperature reaches every variant alike; the figure is
the median run. Per variant also: the scores of the timed rows against the default's on the
same rows (largest relative difference), the peak device memory of its runs (every variant's
engine resident), the engine's counters for one call.

The variants are data (`VARIANTS`, in priority order: the time limit drops the last first);
a variant whose setting the engine does not have (an attribute or constructor keyword it
lacks, a head it does not use, layers that do not compile on this device) is recorded as
unavailable, not as a failure; one whose path never ran on the rows (source runs without
mixed-source decoder chunks) as "no effect", untimed.

The decision rule and the recommended defaults: `gpu_decide.py`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from benchmarks import gpu_device
from benchmarks.gpu_decide import (
    DEFAULT,
    MIN_GAIN,
    MIN_RUNS,
    TOLERANCE,
    decide,
    recommend,
    recommended_defaults,
    score_gap,
)
from benchmarks.gpu_timing import steady_seconds, synchronize

FLIP = "flip"  # the other way than the default engine's attribute of that name
TILE = "tile"  # the vocabulary tile of this model size (`TILE_COLUMNS`)
TILE_COLUMNS = {"large": 8192, "tiny": 256}
ROUNDS = 3
MIN_SECONDS = {"large": 1.0, "tiny": 0.02}
# compiling a model's layers on its warm-up calls and the new shapes after them (CUDA): 45 s on
# the padded decoder before per-layer caches; packed, the warm-up took 10.7 s with BART-large's
# layers compiled and 4.0 s with PEGASUS-large's (gpu-check-h200-2026-11-28-compiled), eager ~1 s
COMPILE_SECONDS = 30.0
BUILD_SECONDS = {"large": 10.0, "tiny": 0.5}  # building a model, counted once per workload
ENGINE_CLASS = {"seq2seq": "Seq2SeqLikelihood", "causal": "CausalLikelihood"}
WORKLOADS = ("distinct", "grouped", "prefix", "ppl")  # the order of the report
RUN_ORDER = ("ppl", "distinct", "grouped", "prefix")  # GPT-2 is the model the core cases end on


@dataclass(frozen=True)
class Variant:
    """One engine setting against the default: constructor keywords, attributes set on the
    engine after it is built, attributes set on its output head (FLIP and TILE resolved at run
    time); `requires`: engine attributes that must exist; `effect`: an engine counter that is
    0 when the variant's path never ran on the rows (with every other counter as the
    default's, the variant is then not timed: "no effect", never recommended)."""

    name: str
    engines: tuple[str, ...]
    constructor: dict = field(default_factory=dict)
    attributes: dict = field(default_factory=dict)
    head: dict = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    effect: str | None = None
    own_model: bool = False  # the engine changes its model in place: give it a second, identically seeded one

    def compiles(self) -> bool:
        return bool(self.constructor.get("compile_layers"))

    def needs_own_model(self) -> bool:
        return self.own_model or self.compiles()


# priority order: the time limit skips from the end. First the seq2seq layers compiled (about
# 30 s of compiling an arm): the A/B in benchmarks/results/gpu-check-h200-2026-11-28-gelu timed them on
# BART distinct only, 1.064x; grouped and PEGASUS decide whether compiling becomes the seq2seq
# default. Then packing, on by default on CUDA since an earlier A/B (off on CPU), flipped so that
# each run re-checks it; GPT-2's compiled blocks; the fused GELU (on by default on CUDA; flipped
# 0.725x on GPT-2 in that A/B) re-checked last.
VARIANTS = (
    Variant("compiled layers", ("seq2seq",), constructor={"compile_layers": True}),
    Variant("packed decoder+encoder flipped", ("seq2seq",), attributes={"packed_decoder": FLIP, "packed_encoder": FLIP},
            requires=("packed_decoder", "packed_encoder")),
    Variant("packed flipped", ("causal",), attributes={"packed": FLIP}, requires=("packed",)),
    # GPT-2's blocks compiled: at 47 % MFU the causal case is not the one short of its target
    Variant("compiled blocks", ("causal",), constructor={"compile_layers": True}),
    Variant("cross-batch flipped", ("seq2seq",), constructor={"cross_batch": FLIP}),
    Variant("packed encoder only", ("seq2seq",), attributes={"packed_encoder": True, "packed_decoder": False},
            requires=("packed_encoder", "packed_decoder")),
    Variant("tiled head", ("seq2seq", "causal"), head={"vocabulary_tile": TILE}),
    # source runs replace the key/value gathers of mixed-source decoder chunks (cross-batch planning)
    Variant("source runs", ("seq2seq",), attributes={"source_runs": True}, requires=("source_runs",), effect="source_run_chunks"),
    # GPT-2's Python GELU as one kernel (on by default on CUDA): the only workload with one
    Variant("fused GELU flipped", ("causal",), constructor={"fuse_activations": FLIP}, own_model=True),
)


class Unavailable(Exception):
    """The engine has no such setting (here, on this device): the variant is not measured."""


def engine_kind(case: str) -> str:
    return "causal" if case == "ppl" else "seq2seq"


def _shown(value) -> str:
    return ("on" if value else "off") if isinstance(value, bool) or value is None else str(value)


def _change(owner: str, key: str, value, now) -> str:
    return f"{owner}.{key}: {_shown(value)} (now {_shown(now)})"


def variant_engine(variant: Variant, make, default_engine, size: str):
    """(the variant's engine, the one-line changes it implies). `make(options)` builds an engine
    with constructor `options` and returns (engine, unsupported keys). Raises `Unavailable`."""
    owner = type(default_engine).__name__
    flipped = [key for key, value in variant.constructor.items() if value == FLIP]
    if any(not hasattr(default_engine, key) for key in flipped):  # nothing to flip: a setting it does not have
        raise Unavailable(f"{owner} has no {', '.join(key for key in flipped if not hasattr(default_engine, key))}")
    options = {key: (not getattr(default_engine, key)) if value == FLIP else value for key, value in variant.constructor.items()}
    engine, unsupported = make(options)
    if unsupported:
        raise Unavailable(f"{owner} takes no {', '.join(unsupported)}")
    missing = [key for key in variant.requires if not hasattr(engine, key)]
    if missing:
        raise Unavailable(f"{owner} has no {', '.join(missing)}")
    changes = [_change(owner, key, value, getattr(default_engine, key, None)) for key, value in options.items()]
    if variant.compiles() and not getattr(engine, "compiled_layers", 0):
        raise Unavailable("no layer compiled on this device (compile_layers compiles on CUDA only)")
    for key, value in variant.attributes.items():
        value = (not getattr(default_engine, key)) if value == FLIP else value
        setattr(engine, key, value)
        if value != getattr(default_engine, key, None):  # a setting the default already has is no change
            changes.append(_change(owner, key, value, getattr(default_engine, key, None)))
    for key, value in variant.head.items():
        head = getattr(engine, "head", None)
        if head is None or not hasattr(head, key):
            raise Unavailable(f"{owner} has no output head with {key}")
        value = TILE_COLUMNS[size] if value == TILE else value
        setattr(head, key, value)
        changes.append(_change(type(head).__name__, key, value, getattr(default_engine.head, key, None)))
    return engine, changes


def flat_scores(result) -> list[float]:
    """A call's scores as floats: the seq2seq engine's mean NLLs as they are, the causal
    engine's (sum, count) pairs as sum / count (a count of 0 as NaN)."""
    out = []
    for value in result:
        if isinstance(value, tuple):
            total, count = value
            out.append(total / count if count else float("nan"))
        else:
            out.append(float(value))
    return out


def arm_seconds(call_seconds: float, min_seconds: float, rounds: int, compiles: bool) -> float:
    """Estimated seconds of one variant: a warm-up call, the first timed call, a counted call,
    `rounds` runs of >= max(min_seconds, one call) (a run may overshoot by a call); `compiles`:
    its layers compile on the warm-up calls (CUDA)."""
    return rounds * (max(min_seconds, call_seconds) + call_seconds) + 3 * call_seconds + 0.2 + (COMPILE_SECONDS if compiles else 0.0)


def plan(candidates: list[tuple[int, str, str, float]], default_cost: dict[str, float], budget: float) -> tuple[list, list]:
    """(selected, skipped) (case, variant) pairs: candidates (priority, case, variant, seconds)
    taken in priority order while their seconds, plus the default's of a workload not yet
    opened, fit in `budget`."""
    selected, skipped, spent, opened = [], [], 0.0, set()
    for _, case, variant, cost in sorted(candidates, key=lambda c: (c[0], WORKLOADS.index(c[1]))):
        extra = cost + (0.0 if case in opened else default_cost[case])
        if spent + extra <= budget:
            selected.append((case, variant))
            spent += extra
            opened.add(case)
        else:
            skipped.append((case, variant))
    return selected, skipped


class _Arm:
    def __init__(self, name: str, engine, changes: list[str], call, warm_call):
        self.name, self.engine, self.changes, self.call, self.warm_call = name, engine, changes, call, warm_call
        self.runs: list[float] = []
        self.calls: list[int] = []
        self.peak: int | None = None
        self.entry: dict = {"variant": name, "status": "measured", "changes": changes}


def _peak_reset(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def _peak(device: str) -> int | None:
    return torch.cuda.max_memory_allocated() if device.startswith("cuda") else None


def _rounds(bench, arms: list[_Arm], settings: dict) -> int:
    """The interleaved rounds (module docstring): one run per arm per round, forward then
    reverse order; the number of rounds run."""
    device = bench.device
    rounds_run = 0
    for round_index in range(settings["rounds"]):
        # a round that would run past the time limit is not started (its arms keep fewer runs,
        # and fewer than MIN_RUNS decide nothing)
        round_seconds = sum(max(settings["min_seconds"], arm.entry.get("first_call_seconds", 0.0)) for arm in arms)
        if rounds_run and bench.remaining() < round_seconds:
            break
        rounds_run += 1
        for arm in (arms if round_index % 2 == 0 else arms[::-1]):
            if arm.entry["status"] != "measured":
                continue
            try:
                _peak_reset(device)
                timing = steady_seconds(arm.call, device, settings["min_seconds"], 1)
            except Exception as exc:  # noqa: BLE001
                if arm.name == DEFAULT:
                    raise
                arm.entry.update(status="error", reason=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
                continue
            arm.runs += timing["runs"]
            arm.calls += timing["calls"]
            peak = _peak(device)
            arm.peak = peak if arm.peak is None or peak is None else max(arm.peak, peak)
    return rounds_run


def run_workload(bench, case: str, variants: list[Variant], settings: dict) -> dict:
    """Measure the default and `variants` on one workload, interleaved (module docstring)."""
    from benchmarks import bench_gpu

    device, dtype, size = bench.device, settings["dtype"], bench.size
    name, label = bench_gpu.CASES[case]
    budget = bench.args.token_budget
    model = bench.model(name, dtype)
    work = bench.workload(case, model.config.vocab_size)
    pairs = len(work["timed"]["texts"]) if name == "gpt2" else sum(len(t) for t in work["timed"]["targets"])
    default_engine, _ = bench_gpu.make_engine(model, name, budget, {})
    arms = [_Arm(DEFAULT, default_engine, [], bench_gpu.engine_call(default_engine, work["timed_arrow"]),
                 bench_gpu.engine_call(default_engine, work["warm_arrow"]))]
    entries = []
    for variant in variants:
        try:
            target = bench_gpu.build(name, size, getattr(torch, dtype), device) if variant.needs_own_model() else model
            engine, changes = variant_engine(variant, lambda options, m=target: bench_gpu.make_engine(m, name, budget, options),
                                             default_engine, size)
        except Unavailable as exc:
            entries.append({"variant": variant.name, "status": "unavailable", "reason": str(exc)})
            continue
        except Exception as exc:  # noqa: BLE001 - a variant failing must not lose the others
            entries.append({"variant": variant.name, "status": "error", "reason": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"})
            continue
        arms.append(_Arm(variant.name, engine, changes, bench_gpu.engine_call(engine, work["timed_arrow"]),
                         bench_gpu.engine_call(engine, work["warm_arrow"])))
    results: dict[str, list[float]] = {}
    by_name = {v.name: v for v in variants}
    for arm in list(arms):
        try:
            start = time.perf_counter()
            for _ in range(2 if getattr(arm.engine, "compiled_layers", 0) else 1):  # compiling: a second call settles recompiles
                arm.warm_call()
            synchronize(device)
            arm.entry["warm_up_seconds"] = time.perf_counter() - start
            start = time.perf_counter()
            results[arm.name] = flat_scores(arm.call())  # the timed rows, first seen here
            synchronize(device)
            arm.entry["first_call_seconds"] = time.perf_counter() - start
            stats = getattr(arm.engine, "stats", None)
            if hasattr(stats, "clear"):
                stats.clear()
            arm.call()
            arm.entry["engine"] = bench_gpu.engine_info(arm.engine)
            arm.entry["engine_stats_per_call"] = bench_gpu.engine_stats(arm.engine)
            arm.entry["engine_stat_ratios"] = bench_gpu.stat_ratios(arm.entry["engine_stats_per_call"])
            effect = by_name[arm.name].effect if arm.name in by_name else None
            counted = arm.entry["engine_stats_per_call"] or {}
            if effect and not counted.get(effect) and counted == arms[0].entry["engine_stats_per_call"]:
                arm.entry.update(status="no effect", reason=f"{effect} 0 and every other counter as the default's: its path never ran on these rows")
                entries.append(arm.entry)
                arms.remove(arm)
        except Exception as exc:  # noqa: BLE001
            if arm.name == DEFAULT:
                raise
            arm.entry.update(status="error", reason=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            entries.append(arm.entry)
            arms.remove(arm)
    sampler = gpu_device.Sampler(device)  # SM clock and power over the rounds (drift shows here)
    with sampler:
        rounds_run = _rounds(bench, arms, settings)
    tolerance = TOLERANCE[dtype]
    default = arms[0]
    measured = []
    for arm in arms:
        entry = arm.entry
        if entry["status"] == "measured":
            seconds = statistics.median(arm.runs)
            gap = score_gap(results[DEFAULT], results[arm.name])
            entry.update(seconds=seconds, seconds_runs=arm.runs, calls_per_run=arm.calls, pairs_per_s=pairs / seconds,
                         peak_memory_bytes=arm.peak, score_gap=gap, agrees=gap["max_rel"] <= tolerance)
            if arm is not default:
                entry["decision"] = decide(default.runs, arm.runs, entry["agrees"])
                entry["loses"] = decide(arm.runs, default.runs, True)["win"]
        measured.append(entry)
    workload = {"case": label, "model": name, "dtype": dtype, "engine": ENGINE_CLASS[engine_kind(case)], "pairs": pairs,
                "tolerance": tolerance, "rounds_run": rounds_run, "clocks": sampler.summary(),
                "arms": measured + [e for e in entries if e not in measured]}
    order = [DEFAULT] + [v.name for v in variants]
    workload["arms"].sort(key=lambda e: order.index(e["variant"]))
    workload["recommendation"] = recommend(workload)
    return workload


def run(bench, deadline_margin: float = 5.0) -> dict:
    """The A/B on every workload whose core case ran, within `bench`'s time limit; the result
    is also `bench.report['ab']` (saved after every workload)."""
    size = bench.size
    settings = {"dtype": "bfloat16" if bench.device.startswith("cuda") else "float32", "rounds": ROUNDS, "min_seconds": MIN_SECONDS[size],
                "min_runs": MIN_RUNS, "min_gain": MIN_GAIN, "tolerance": TOLERANCE, "tile_columns": TILE_COLUMNS[size]}
    ab = {"settings": settings, "workloads": [], "skipped": [], "variants": [v.name for v in VARIANTS]}
    bench.report["ab"] = ab
    from benchmarks import bench_gpu

    def compiles(variant: Variant) -> bool:  # compile_layers compiles on CUDA only
        return variant.compiles() and bench.device.startswith("cuda")

    core = {r["case"]: r["seconds"] for r in bench.report["runs"] if r["tier"] == "core"}
    candidates, default_cost, known = [], {}, {}
    for case in WORKLOADS:
        label = bench_gpu.CASES[case][1]
        if label not in core:
            ab["skipped"].append({"case": label, "variant": "all", "reason": "its core case did not run"})
            continue
        known[case] = core[label]
        default_cost[case] = arm_seconds(core[label], settings["min_seconds"], ROUNDS, False) + BUILD_SECONDS[size]
        for priority, variant in enumerate(VARIANTS):
            if engine_kind(case) in variant.engines:
                own_model = BUILD_SECONDS[size] if variant.needs_own_model() else 0.0
                candidates.append((priority, case, variant.name,
                                   arm_seconds(core[label], settings["min_seconds"], ROUNDS, compiles(variant)) + own_model))
    selected, skipped = plan(candidates, default_cost, bench.remaining() - deadline_margin)
    ab["planned_seconds"] = sum(c[3] for c in candidates if (c[1], c[2]) in selected) + sum(
        default_cost[case] for case in {case for case, _ in selected})
    for case, variant in skipped:
        ab["skipped"].append({"case": bench_gpu.CASES[case][1], "variant": variant, "reason": "time limit (lower priority)"})
    by_name = {v.name: v for v in VARIANTS}
    for case in RUN_ORDER:
        chosen = [by_name[v] for c, v in selected if c == case]
        if not chosen:
            continue
        need = default_cost[case] + sum(arm_seconds(known[case], settings["min_seconds"], ROUNDS, compiles(v)) for v in chosen)
        while chosen and need > bench.remaining():
            dropped = chosen.pop()
            need -= arm_seconds(known[case], settings["min_seconds"], ROUNDS, compiles(dropped))
            ab["skipped"].append({"case": bench_gpu.CASES[case][1], "variant": dropped.name, "reason": "time limit (ran late)"})
        if not chosen:
            continue
        started = time.monotonic()
        try:
            workload = run_workload(bench, case, chosen, settings)
        except Exception as exc:  # noqa: BLE001 - the default itself failed: this workload has no A/B
            ab["skipped"].append({"case": bench_gpu.CASES[case][1], "variant": "all",
                                  "reason": f"error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"})
            bench.save(bench.report)
            continue
        workload["seconds_total"] = time.monotonic() - started
        if bench.device.startswith("cuda"):
            torch.cuda.empty_cache()  # the variants' engines (and a compiled model) are gone
        ab["workloads"].append(workload)
        ab["workloads"].sort(key=lambda w: [bench_gpu.CASES[c][1] for c in WORKLOADS].index(w["case"]))
        bench.report["recommended_defaults"] = recommended_defaults(ab)
        bench.save(bench.report)
        print(summary_line(workload), flush=True)
    bench.report["recommended_defaults"] = recommended_defaults(ab)
    return ab


def summary_line(workload: dict) -> str:
    parts = []
    for arm in workload["arms"]:
        if arm["status"] != "measured":
            parts.append(f"{arm['variant']} {arm['status']}")
        elif arm["variant"] == DEFAULT:
            parts.append(f"default {arm['seconds'] * 1e3:.1f} ms")
        else:
            parts.append(f"{arm['variant']} {arm['decision']['speedup']:.3f}x{'' if arm['agrees'] else ' (scores differ)'}")
    rec = workload["recommendation"]
    return f"A/B {workload['model']} {workload['case']}: " + "; ".join(parts) + f" -> {rec['variant']}"

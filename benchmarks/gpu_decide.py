"""Which engine variant the A/B of `make gpu-check` (`gpu_ab.py`) recommends, and the A/B's
markdown: the decision rule on the measured runs and scores, the recommended default per
workload and engine-wide.

Decision rule (`decide`), per workload: a variant beats the current default when (1) its
scores agree with the default's (largest relative difference <= `TOLERANCE[dtype]`: 2e-3 in
bfloat16, about half its unit roundoff; 1e-5 in float32), (2) both have >= `MIN_RUNS`
runs, (3) its median call is >= `MIN_GAIN` (3 %) faster, and (4) the run ranges do not
overlap (its slowest run is faster than the default's fastest). The recommended default of a
workload is the winner with the largest speed-up, else the current default. Engine-wide
(`engine_wide`): a variant that wins on at least one workload and loses on none (a loss: the
default wins against it by the same rule, or its scores disagree).
"""

from __future__ import annotations

import statistics

DEFAULT = "default"
# relative score tolerance per dtype: bfloat16 about half its unit roundoff (2^-8 / 2), 15x
# the largest engine-vs-plain gap of the first H200 run (1.4e-3 nats on ~10.8); float32 as the
# CPU parity tests
TOLERANCE = {"bfloat16": 2e-3, "float32": 1e-5}
MIN_GAIN = 0.03
MIN_RUNS = 3


def score_gap(default: list[float], other: list[float]) -> dict:
    """{'max_rel', 'max_abs'} between two calls' scores on the same rows (NaN on both sides
    agrees; NaN on one side, or a different row count, is an infinite gap)."""
    if len(default) != len(other):
        return {"max_rel": float("inf"), "max_abs": float("inf")}
    max_rel = max_abs = 0.0
    for a, b in zip(default, other):
        if a != a or b != b:
            if (a != a) != (b != b):
                return {"max_rel": float("inf"), "max_abs": float("inf")}
            continue
        gap = abs(a - b)
        max_abs = max(max_abs, gap)
        max_rel = max(max_rel, gap / max(abs(a), 1e-12))
    return {"max_rel": max_rel, "max_abs": max_abs}


def decide(default_runs: list[float], variant_runs: list[float], agrees: bool, min_gain: float = MIN_GAIN,
           min_runs: int = MIN_RUNS) -> dict:
    """The decision rule (module docstring) on seconds per call: {'win', 'speedup' (the
    default's median over the variant's), 'reason'}."""
    speedup = statistics.median(default_runs) / statistics.median(variant_runs) if default_runs and variant_runs else None
    if not agrees:
        return {"win": False, "speedup": speedup, "reason": "scores differ beyond tolerance"}
    if min(len(default_runs), len(variant_runs)) < min_runs:
        return {"win": False, "speedup": speedup, "reason": f"fewer than {min_runs} runs"}
    if speedup < 1 + min_gain:
        return {"win": False, "speedup": speedup, "reason": f"{100 * (speedup - 1):+.1f} % (a win needs >= {100 * min_gain:g} %)"}
    if max(variant_runs) >= min(default_runs):
        return {"win": False, "speedup": speedup, "reason": "run ranges overlap"}
    return {"win": True, "speedup": speedup, "reason": f"{100 * (speedup - 1):+.1f} % faster, ranges apart"}


def recommend(workload: dict) -> dict:
    """The workload's recommended default: the winning variant with the largest speed-up, or
    the current default."""
    wins = [arm for arm in workload["arms"] if arm.get("decision", {}).get("win")]
    out = {"case": workload["case"], "model": workload["model"], "engine": workload["engine"]}
    if not wins:
        return {**out, "variant": DEFAULT, "speedup": 1.0, "changes": [], "reason": "no variant won by the rule"}
    best = max(wins, key=lambda arm: arm["decision"]["speedup"])
    return {**out, "variant": best["variant"], "speedup": best["decision"]["speedup"], "changes": best["changes"],
            "reason": best["decision"]["reason"]}


def engine_wide(workloads: list[dict]) -> list[dict]:
    """Per engine and variant measured: the workloads it wins and loses on, and those of the
    same engine it was not measured on (skipped by the time limit, unavailable, failed);
    `default_change` when it wins somewhere, loses nowhere and was measured everywhere (a
    speed-up on one workload says nothing about a workload never timed)."""
    found: dict[tuple[str, str], dict] = {}
    cases_of: dict[str, list[str]] = {}
    for workload in workloads:
        cases_of.setdefault(workload["engine"], []).append(workload["case"])
        for arm in workload["arms"]:
            if arm["variant"] == DEFAULT or arm["status"] != "measured":
                continue
            entry = found.setdefault((workload["engine"], arm["variant"]), {"engine": workload["engine"], "variant": arm["variant"],
                                                                            "changes": arm["changes"], "wins": [], "losses": [],
                                                                            "measured": []})
            entry["measured"].append(workload["case"])
            if arm["decision"]["win"]:
                entry["wins"].append(workload["case"])
            elif not arm["agrees"] or arm.get("loses"):
                entry["losses"].append(workload["case"])
    for entry in found.values():
        measured = entry.pop("measured")
        entry["not_measured"] = [case for case in cases_of[entry["engine"]] if case not in measured]
        entry["default_change"] = bool(entry["wins"]) and not entry["losses"] and not entry["not_measured"]
    return list(found.values())


def recommended_defaults(ab: dict) -> dict:
    """The machine-readable decision: the rule, per workload, engine-wide."""
    settings = ab["settings"]
    rule = (f"a variant wins when its scores agree with the default's (max relative difference <= "
            f"{settings['tolerance'][settings['dtype']]:.3g} in {settings['dtype']}), both have >= {settings['min_runs']} runs, "
            f"its median call is >= {100 * settings['min_gain']:g} % faster and its slowest run is faster than the default's fastest")
    return {"rule": rule, "per_workload": [w["recommendation"] for w in ab["workloads"]], "engine_wide": engine_wide(ab["workloads"])}


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f} %"


def render(ab: dict, heading: str = "##") -> list[str]:
    """Markdown lines: the A/B table per workload, the recommended defaults, what was skipped."""
    settings = ab["settings"]
    out = [f"{heading} A/B of engine variants (one process)", "",
           f"{settings['dtype']}, held-out rows; per variant {settings['rounds']} runs of >= {settings['min_seconds']:g} s, "
           "interleaved (rounds alternate forward and reverse order), the median run; scores compared with the default's "
           "on the same rows; peak memory with every variant's engine resident.", "",
           "| workload | variant | status | ms/call (min-max) | speed-up | max rel. score diff | peak GiB | padded/real | "
           "MiB pooled / gathered | decision |", "|---|---|---|---|---|---|---|---|---|---|"]
    for w in ab["workloads"]:
        for arm in w["arms"]:
            where = f"{w['model']} {w['case']}"
            if arm["status"] != "measured":
                out.append(f"| {where} | {arm['variant']} | {arm['status']}: {arm.get('reason', '')} | | | | | | | |")
                continue
            runs = arm["seconds_runs"]
            memory = f"{arm['peak_memory_bytes'] / 2**30:.2f}" if arm.get("peak_memory_bytes") is not None else "n/a"
            ratios = ", ".join(f"{k.replace('_padded_per_real', '')} {v:.3f}" for k, v in arm.get("engine_stat_ratios", {}).items()) or "n/a"
            decision = arm.get("decision")
            speed = f"{decision['speedup']:.3f}x" if decision else "1 (baseline)"
            verdict = ("**win**: " if decision["win"] else "") + decision["reason"] if decision else ""
            gap = f"{arm['score_gap']['max_rel']:.2e}" + ("" if arm["agrees"] else " **flagged**")
            stats = arm.get("engine_stats_per_call") or {}
            moved = " / ".join(f"{stats.get(key, 0) / 2**20:.1f}" for key in ("bytes_pooled", "bytes_gathered"))
            out.append(f"| {where} | {arm['variant']} | measured | {arm['seconds'] * 1e3:.2f} ({min(runs) * 1e3:.2f}-{max(runs) * 1e3:.2f}) | "
                       f"{speed} | {gap} | {memory} | {ratios} | {moved} | {verdict} |")
    rec = recommended_defaults(ab)
    out += ["", f"{heading} Recommended defaults", "", f"Rule: {rec['rule']}.", "",
            "| workload | engine | fastest agreeing variant | speed-up vs the current default | change |", "|---|---|---|---|---|"]
    for r in rec["per_workload"]:
        change = "; ".join(r["changes"]) or "none (keep the current default)"
        out.append(f"| {r['model']} {r['case']} | {r['engine']} | {r['variant']} | {_pct(r['speedup'] - 1)} | {change} |")
    wide = [e for e in rec["engine_wide"] if e["default_change"]]
    out += ["", "Engine-wide (wins on some workload, loses on none, measured on all): " + (
        "; ".join(f"{'; '.join(e['changes'])} (wins: {', '.join(e['wins'])})" for e in wide) if wide else "none") + "."]
    pending = [e for e in rec["engine_wide"] if e["wins"] and not e["losses"] and e["not_measured"]]
    if pending:
        out += ["", "Not engine-wide yet (wins, loses on none, but not measured on every workload): " + "; ".join(
            f"{'; '.join(e['changes'])} (wins: {', '.join(e['wins'])}; not measured: {', '.join(e['not_measured'])})"
            for e in pending) + "."]
    if ab["skipped"]:
        out += ["", "A/B skipped: " + "; ".join(f"{s['case']} {s['variant']} ({s['reason']})" for s in ab["skipped"]) + "."]
    return out

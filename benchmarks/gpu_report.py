"""The GPU benchmarks' reports in words: one console line per measured item and the markdown
summary (`summary.md`, `bench_gpu.md`, `sweep.md`) the README's GPU numbers come from."""

from __future__ import annotations

from benchmarks import gpu_decide, gpu_profile


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def clocks(entry: dict) -> str:
    """'median SM clock / median power' sampled during the timed runs ('n/a' without a GPU)."""
    sampled = entry.get("clocks") or {}
    clock, power = sampled.get("sm_clock_mhz", {}).get("median"), sampled.get("power_w", {}).get("median")
    return f"{clock:.0f} / {power:.0f}" if clock is not None and power is not None else "n/a"


def line(entry: dict) -> str:
    """One console line per measured item."""
    text = (f"{entry['model']:8s} {entry['dtype']:9s} {entry['case']:16s} {entry['mode']:6s} {entry['pairs_per_s']:10.1f} pairs/s"
            f"  {entry['seconds'] * 1e3:8.1f} ms/call (median of {len(entry['seconds_runs'])} runs of >= {min(entry['wall_per_run']):.3g} s)"
            f"  MFU {_pct(entry['mfu'])}  of GEMM ceiling {_pct(entry['gemm_ceiling_fraction'])}")
    if entry.get("peak_memory_bytes") is not None:
        text += f"  peak {entry['peak_memory_bytes'] / 2**30:.1f} GiB"
    if "host_reads_per_call" in entry:
        text += f"  host reads/call {entry['host_reads_per_call']}"
    for key, value in entry.get("engine_stat_ratios", {}).items():
        text += f"  {key} {value:.2f}"
    if "max_abs_nll_gap_to_engine" in entry:
        text += f"  max |engine - plain| NLL {entry['max_abs_nll_gap_to_engine']:.2e}"
    if "breakdown" in entry:
        b = entry["breakdown"]
        text += "\n    " + ", ".join(f"{k} {v:.1f} ms" for k, v in b["ms"].items()) + f"; busy {_pct(b['busy_fraction'])}"
    return text


def machine_lines(report: dict) -> list[str]:
    """The markdown lines naming the GPU, its peaks, the versions and the GEMM ceiling."""
    machine, peaks = report["machine"], report["machine"]["peaks"]
    out = []
    if peaks.get("bf16_tflops"):
        out.append(f"Peaks ({peaks['part']}, {peaks['source']}): bf16 dense {peaks['bf16_tflops']:g} TFLOP/s, IEEE fp32 "
                   f"{peaks['fp32_tflops']:g} TFLOP/s.")
    else:
        out.append(f"Peaks: none ({peaks.get('reason')}); MFU is null.")
    if report.get("peak_override"):
        out.append(f"Peak override (command line): {report['peak_override']}.")
    out.append(f"torch {machine['torch']}, CUDA {machine.get('cuda')}, cuDNN {machine.get('cudnn')}, driver {machine.get('driver')}, "
               f"transformers {machine['transformers']}; {machine.get('sm_count', 'n/a')} SMs, max SM clock "
               f"{machine.get('sm_clock_max_mhz', 'n/a')} MHz, power limit {machine.get('power_limit_w', 'n/a')} W.")
    if machine.get("varlen_attn") is not None:
        out.append(varlen_line(machine["varlen_attn"], machine["torch"]))
    if report["gemm_ceiling"]:
        out.append("")
        out.append("GEMM ceiling (steady `torch.mm`): " + "; ".join(
            f"{g['m']}x{g['k']}x{g['n']} {g['dtype']} {g['tflops']:.4g} TFLOP/s" for g in report["gemm_ceiling"]) + ".")
    return out


def varlen_line(support: dict[str, bool], torch_version: str) -> str:
    """Which packed attention calls ran torch's varlen kernel (CUDA, half precision) with this
    torch, and which took the SDPA reference: a packed variant's time depends on it."""
    names = {"plain": "packed self- and cross-attention", "grouped_heads": "grouped-query heads",
             "source_runs": "source runs (`seqused_k`)"}
    kernel = [names[k] for k in names if support.get(k)]
    sdpa = [names[k] for k in names if not support.get(k)]
    return (f"Packed attention with torch {torch_version}: varlen kernel for {', '.join(kernel) or 'nothing'}; "
            f"SDPA for {', '.join(sdpa) or 'nothing'}.")


def render_markdown(report: dict, heading: str = "#") -> str:
    """The summary the README's numbers come from: machine, method, core table, breakdowns,
    engine counters, extras, what was skipped."""
    settings = report["settings"]
    out = [f"{heading} GPU benchmark: {report['machine']['name']}", ""] + machine_lines(report)
    out.append("")
    out.append(f"Method: models `{settings['size']}`, token budget {settings['token_budget']:,}; each time is the median of "
               f"{settings['measurements']} runs, each repeating the call for >= {settings['min_seconds']:g} s, on held-out rows whose "
               f"shapes the warm-up never saw (SummEval split by document, CTRLEval by row, {int(settings['held_out_share'] * 100)} % timed); ids from "
               "Arrow `list<int32>` arrays built outside the timing. MFU = useful FLOPs / time / this GPU's peak for the run's dtype.")
    runs = report["runs"]
    core = [r for r in runs if r.get("tier") == "core"]
    other = [r for r in runs if r.get("tier") != "core"]

    def table(entries):
        rows = ["| model | dtype | case | mode | pairs | pairs/s | ms/call (min-max) | first call ms | useful TFLOP/s | MFU | of GEMM ceiling |"
                " GPU busy | peak GiB | host reads/call | SM MHz / W |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in entries:
            busy = r.get("breakdown", {}).get("busy_fraction")
            memory = f"{r['peak_memory_bytes'] / 2**30:.1f}" if r.get("peak_memory_bytes") is not None else "n/a"
            case = f"{r['case']}, {r['variant']}" if r.get("variant") else r["case"]
            rows.append(f"| {r['model']} | {r['dtype']} | {case} | {r['mode']} | {r['pairs']} | {r['pairs_per_s']:,.1f} | "
                        f"{r['seconds'] * 1e3:.1f} ({min(r['seconds_runs']) * 1e3:.1f}-{max(r['seconds_runs']) * 1e3:.1f}) | "
                        f"{r['first_call_seconds'] * 1e3:.1f} | {r['useful_tflops']:.4g} | {_pct(r['mfu'])} | {_pct(r['gemm_ceiling_fraction'])} | "
                        f"{_pct(busy)} | {memory} | {r.get('host_reads_per_call', '')} | {clocks(r)} |")
        return rows

    out += ["", f"{heading}# Core: bfloat16, the engine", ""] + (table(core) if core else ["(none measured)"])
    profiled = [r for r in runs if "breakdown" in r]
    if profiled:
        cats = list(gpu_profile.CATEGORIES) + ["idle"]
        out += ["", f"{heading}# Where the time goes (ms per steady call; share of it)", "",
                f"Kernels by name pattern (`benchmarks/gpu_profile.py`); idle = the steady call time not covered by any kernel. "
                f"Timeline: {profiled[0]['breakdown']['timeline']}.", "",
                "| case | " + " | ".join(cats) + " | busy |", "|---" * (len(cats) + 2) + "|"]
        for r in profiled:
            b = r["breakdown"]
            cells = [f"{b['ms'][c]:.1f} ({_pct(b['share'][c])})" for c in cats]
            out.append(f"| {r['model']} {r['case']} | " + " | ".join(cells) + f" | {_pct(b['busy_fraction'])} |")
        out += ["", "Top kernels of each profiled call:", ""]
        for r in profiled:
            tops = ", ".join(f"`{k['name'][:60]}` {k['category']} {k['ms']:.1f} ms" for k in r["breakdown"]["top"][:5])
            out.append(f"- {r['model']} {r['case']}: {tops}")
    counted = [r for r in runs if r.get("engine_stats_per_call")]
    if counted:
        out += ["", f"{heading}# Engine counters per call", ""]
        for r in counted:
            ratios = ", ".join(f"{k} {v:.3f}" for k, v in r["engine_stat_ratios"].items())
            stats = ", ".join(f"{k} {v:,}" for k, v in r["engine_stats_per_call"].items())
            out.append(f"- {r['model']} {r['dtype']} {r['case']}: {ratios + '; ' if ratios else ''}{stats}")
    if report.get("ab"):
        out += [""] + gpu_decide.render(report["ab"], f"{heading}#")
    if other:
        out += ["", f"{heading}# Extras (float32 over the IEEE fp32 peak; plain forwards; sweeps)", ""] + table(other)
        engine_rate = {(r["case"], r["dtype"]): r["pairs_per_s"] for r in runs if r["mode"] == "engine" and r.get("tier") != "sweep"}
        plain = [r for r in other if r["mode"] == "plain"]
        if plain:
            out.append("")
        for r in plain:
            ratio = engine_rate.get((r["case"], r["dtype"]))
            gap = r.get("max_abs_nll_gap_to_engine")
            speedup = f"{ratio / r['pairs_per_s']:.2f}x" if ratio else "n/a"
            nll = f", max |engine - plain| mean NLL {gap:.2e}" if gap is not None else ""
            out.append(f"- {r['model']} {r['case']} {r['dtype']}: engine / plain {speedup}{nll}")
    if report["skipped"]:
        out += ["", f"{heading}# Skipped", ""] + [f"- {s['model']} {s['dtype']} {s['case']} {s['mode']}: {s['reason']}" for s in report["skipped"]]
    out += ["", f"Total {report.get('seconds_total', 0):.0f} s{' (time limit reached)' if report.get('time_limit_hit') else ''}."]
    return "\n".join(out) + "\n"

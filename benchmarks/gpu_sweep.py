"""`make gpu-sweep`: the engine's settings swept on a GPU, a second command after `make
gpu-check`, with its own time limit; it writes whatever it finished.

    python3 -m benchmarks.gpu_sweep --out DIR --time-limit 420               # on the GPU
    python3 -m benchmarks.gpu_sweep --out DIR --device cpu --tiny            # dry run (the test suite)

Grid, in this order (the job's default budget first, since about 12 points fit in 7 minutes):
each token budget (32k, 64k, 128k); per budget compile off, then on; per setting each bfloat16
case (BART s->h distinct and grouped, PEGASUS CTRLEval prefix, GPT-2 perplexity) with
cross-batch decoder planning on and off (the causal engine has no such planning: one point).
Narrow it with `--budgets`, `--cases`, `--no-compile` to reach the rest in a later run. Every point is
measured as `bench_gpu.py` measures the core cases (held-out rows, ids from Arrow, runs of
>= `--min-seconds`, median of `--measurements`), with its peak device memory and the
engine's counters. A setting the engine's constructor does not take is listed as skipped, as
is every point the time limit leaves out. Writes `sweep.json` and `sweep.md` after every point.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import bench_gpu, gpu_report  # noqa: E402

BUDGETS = (32_768, 65_536, 131_072)
CASES = ("distinct", "grouped", "prefix", "ppl")


def grid(budgets=BUDGETS, cases=CASES, compile_settings=(False, True)) -> list[dict]:
    """The sweep's points in the order they run: {'case', 'token_budget', 'cross_batch', 'compile_layers'}."""
    points = []
    for budget in budgets:
        for compile_layers in compile_settings:
            for case in cases:
                for cross_batch in ((None,) if case == "ppl" else (True, False)):
                    points.append({"case": case, "token_budget": budget, "cross_batch": cross_batch, "compile_layers": compile_layers})
    return points


def _on_off(value) -> str:
    return "n/a" if value is None else "on" if value else "off"


def render(report: dict) -> str:
    """sweep.md: one row per point measured, then what was skipped."""
    out = [f"# GPU sweep: {report['machine']['name']}", ""] + gpu_report.machine_lines(report) + [""]
    settings = report["settings"]
    out.append(f"bfloat16, the engine; each time the median of {settings['measurements']} runs of >= {settings['min_seconds']:g} s on "
               "held-out rows. Ratios: the engine's `..._padded` / `..._real` counters for one call.")
    out += ["", "| case | token budget | cross-batch | compile (layers compiled) | pairs/s | ms/call | MFU | of GEMM ceiling | peak GiB |"
            " padded/real |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        point = r["sweep"]
        memory = f"{r['peak_memory_bytes'] / 2**30:.1f}" if r.get("peak_memory_bytes") is not None else "n/a"
        ratios = ", ".join(f"{k} {v:.3f}" for k, v in r.get("engine_stat_ratios", {}).items()) or "n/a"
        out.append(f"| {r['model']} {r['case']} | {point['token_budget']:,} | {_on_off(point['cross_batch'])} | "
                   f"{_on_off(point['compile_layers'])} ({r.get('engine', {}).get('compiled_layers', 'n/a')}) | {r['pairs_per_s']:,.1f} | {r['seconds'] * 1e3:.1f} | {gpu_report._pct(r['mfu'])} | "
                   f"{gpu_report._pct(r['gemm_ceiling_fraction'])} | {memory} | {ratios} |")
    if report["skipped"]:
        out += ["", "## Skipped", ""]
        for s in report["skipped"]:
            point = s.get("sweep", {})
            out.append(f"- {s['model']} {s['case']} budget {point.get('token_budget')}, cross-batch {_on_off(point.get('cross_batch'))}, "
                       f"compile {_on_off(point.get('compile_layers'))}: {s['reason']}")
    out += ["", f"Total {report.get('seconds_total', 0):.0f} s{' (time limit reached)' if report.get('time_limit_hit') else ''}."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = bench_gpu.parser()
    parser.description = __doc__.splitlines()[0]
    parser.set_defaults(time_limit=420.0)
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)), help="token budgets, comma-separated")
    parser.add_argument("--cases", default=",".join(CASES), help=f"cases, comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--no-compile", action="store_true", help="leave out the compile-on half")
    args = bench_gpu.finish_args(parser.parse_args(argv))
    out = pathlib.Path(args.out or "out/gpu-sweep")
    out.mkdir(parents=True, exist_ok=True)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r} (choose from {', '.join(CASES)})")
    points = grid(tuple(int(b) for b in args.budgets.split(",")), cases, (False,) if args.no_compile else (False, True))
    started = time.monotonic()

    def save(report: dict) -> None:  # after every point: a sweep cut short keeps what it finished
        report["seconds_total"] = time.monotonic() - started
        (out / "sweep.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "sweep.md").write_text(render(report))

    report = bench_gpu.new_report(args)
    report["settings"]["sweep_points"] = points
    items = [(p["case"], "bfloat16", "engine", "sweep",
              {"token_budget": p["token_budget"], "cross_batch": p["cross_batch"], "compile_layers": p["compile_layers"] or None},
              False, {"sweep": p}) for p in points]
    report = bench_gpu.measure(args, save, items, report)
    save(report)
    print(f"wrote {out / 'sweep.json'} and {out / 'sweep.md'}")
    return report


if __name__ == "__main__":
    main()

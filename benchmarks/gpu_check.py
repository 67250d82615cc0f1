"""`make gpu-check`: everything a lent GPU should measure first, in one command, one folder
(flat, at most 8 files) and one time limit (`--time-limit`, default 480 s: a lent GPU gives
about 15 minutes with its start-up, and the sweeps are a second command):

    python3 -m benchmarks.gpu_check --out DIR                       # on the GPU
    python3 -m benchmarks.gpu_check --out DIR --device cpu --tiny   # dry run (the test suite)

1. `bench_gpu.py`: the four core bfloat16 cases (BART s->h distinct and grouped 16 per
   source, PEGASUS CTRLEval prefix, GPT-2 perplexity) at steady state (runs of >= 5 s, median
   of 5, held-out rows, ids from Arrow) with their kernel-time breakdowns, the GEMM ceiling;
   then the A/B of engine variants on the same four workloads in one process (`gpu_ab.py`:
   3 interleaved runs of >= 1 s per variant, scores against the default's, the recommended
   defaults, lower-priority variants skipped when they would not fit); then extras (plain
   forwards, float32) while time is left -> `bench_gpu.json` (rewritten
   after every case), `bench_gpu.log`; time is kept back for the two steps below;
2. `pytest -m gpu` on the smoke tests and the packed-kernel tests (`GPU_TESTS`) -> `pytest_gpu.log`;
3. end to end on real rows (`data/sample`: SummEval for BARTScore s->h, CTRLEval texts for
   CTRLEval coherence on PEGASUS), tiny models and, without `--tiny`, large-config random
   models (BART-large and PEGASUS-large sizes with the tiny tokenizers): the Ray job when Ray
   is importable (and `--no-ray` is not given), else the same rows through the two stages the
   job's actor runs (`prepare_rows` on a metric built without weights, then
   `score_prepared_rows` on the device) -> `end_to_end.json`, `end_to_end.log`;
4. `summary.json` and `summary.md` (rewritten after every step): what ran, where, how long,
   each step's outcome, the benchmark's tables and the recommended defaults
   (`summary.json["recommended_defaults"]`; `summary.md` is where the README's GPU numbers
   come from).

Budget on an H100 / H200 (call times from the first H200 run, scaled to the held-out sets:
BART distinct 0.73 s, grouped 0.31 s, PEGASUS prefix 0.13 s, GPT-2 0.47 s per call): the GEMM
ceiling about 10 s; each core case 5 runs x >= 5 s plus a warm-up, the first call on new
shapes, a host-read call and a profiled call: about 26-30 s, about 150 s for the four with
model builds; the A/B in the time left (arms of about 4-8 s each, a model build per workload,
about 90 s more for an arm that compiles; in priority order, what does not fit is listed as
skipped: a 450 s run on an H200 reached compiled layers on BART distinct, every packing flip
and the GELU); extras until 375 s (each skipped when its estimate would not fit);
`pytest -m gpu` (41 s on the H200) and end to end (27 s) in the 105 s kept back.

Logs are written as the steps run (and echoed), so a run cut short keeps what it measured.

Needs only the repository on PYTHONPATH, torch, transformers, tokenizers, sentencepiece,
pyarrow and pytest: no install, no download.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
LARGE = {"d_model": 1024, "layers": 12, "heads": 16, "ffn": 4096}
LARGE_PEGASUS = {"d_model": 1024, "layers": 16, "heads": 16, "ffn": 4096}


def _rows(limit: int) -> tuple[list[dict], list[dict]]:
    import pyarrow.parquet as pq

    summeval = [row for f in sorted(SAMPLE.glob("summeval-*.parquet")) for row in pq.read_table(f).to_pylist()]
    ctrleval = [row for f in sorted(SAMPLE.glob("ctrleval_*.parquet")) for row in pq.read_table(f).to_pylist()]
    return summeval[:limit], ctrleval[:limit]


def _models(work: pathlib.Path, tiny: bool) -> dict[str, dict]:
    """{label: (metric, params)} for the tiny models and, unless tiny, large-config ones."""
    from ctgscore.testing import tiny_models

    paths = tiny_models.build_tiny_models(work / "tiny")
    models = {"bart-tiny": ("bartscore", {"model": paths["bart"], "directions": ["s_h"]}),
              "pegasus-tiny": ("ctrleval", {"model": paths["pegasus"], "iwf": paths["iwf"], "aspects": ["coherence"]})}
    if not tiny:
        bart = tiny_models.build_bart(work / "bart-large-config", seed=2, sizes=LARGE)
        pegasus = tiny_models.build_pegasus(work / "pegasus-large-config", seed=1, sizes=LARGE_PEGASUS)
        models["bart-large-config"] = ("bartscore", {"model": str(bart), "directions": ["s_h"]})
        models["pegasus-large-config"] = ("ctrleval", {"model": str(pegasus), "iwf": paths["iwf"], "aspects": ["coherence"]})
    return models


def _two_stage(metric_name: str, params: dict, rows: list[dict]) -> list[dict]:
    """The job actor's path without Ray: ids prepared by a weightless metric, scored on the device."""
    from scoring.models import without_weights
    from scoring.registry import build_metric

    with without_weights():
        light = build_metric(metric_name, params)
    full = build_metric(metric_name, params)
    todo = [i for i, row in enumerate(rows) if light.precheck(row, None) is None and light.validate(row) is None]
    table, reasons = light.prepare_rows([rows[i] for i in todo])
    scored = iter(full.score_prepared_rows(table))
    results = [light.precheck(row, None) or light.empty_result(light.validate(row)) for row in rows]
    for i, reason in zip(todo, reasons):
        results[i] = light.empty_result(reason) if reason is not None else next(scored)
    return results


def _ray_job(metric_name: str, params: dict, rows: list[dict], work: pathlib.Path, device: str) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job

    folder = work / f"job-{metric_name}-{abs(hash(params['model'])) % 10_000}"
    (folder / "in").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "in" / "rows.parquet")
    gpus = 1 if device.startswith("cuda") else 0
    config = parse_config({"input": str(folder / "in"), "output": str(folder / "out"), "progress": False,
                           "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5, "num_gpus": gpus},
                           "metrics": [{"name": metric_name, "params": params}]})
    return run_job(config)["metrics"][metric_name]


def end_to_end(out: pathlib.Path, device: str, tiny: bool, rows: int, use_ray: bool, deadline: float | None = None) -> dict:
    """Real rows through the job's path on each model; models not started by `deadline`
    (time.monotonic) are listed as skipped."""
    report: dict = {"device": device, "path": None, "runs": [], "skipped": []}
    summeval, ctrleval = _rows(rows)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = pathlib.Path(tmp)
        models = _models(work, tiny)
        ray_ok = use_ray
        if use_ray:
            try:
                import ray  # noqa: F401
            except ImportError:
                ray_ok = False
        report["path"] = "ray job (ray_jobs.score_corpus.run_job)" if ray_ok else "two stages without Ray (prepare_rows -> score_prepared_rows)"
        print(f"end to end: {report['path']} on {device}", flush=True)
        for label, (metric_name, params) in models.items():
            if deadline is not None and time.monotonic() > deadline:
                report["skipped"].append(label)
                print(f"end to end: {label} skipped (time limit)", flush=True)
                continue
            data = summeval if metric_name == "bartscore" else ctrleval
            params = {**params, "device": device, "dtype": "bfloat16" if device.startswith("cuda") else "float32"}
            start = time.perf_counter()
            if ray_ok:
                summary = _ray_job(metric_name, params, data, work, device)
                entry = {"rows": summary["rows_out"], "errors": summary["rows_error"], "retry": summary.get("rows_retry", 0)}
            else:
                results = _two_stage(metric_name, params, data)
                errors = [r["error"] for r in results if r["error"]]
                score_columns = [c for c in results[0] if c.startswith(("bartscore_", "ctrleval_"))] if results else []
                values = [r[c] for r in results for c in score_columns if r[c] is not None]
                entry = {"rows": len(results), "errors": len(errors), "error_samples": errors[:3],
                         "finite_scores": sum(1 for v in values if v == v and abs(v) != float("inf")), "scores": len(values)}
            entry.update(model=label, metric=metric_name, dtype=params["dtype"], seconds=round(time.perf_counter() - start, 3))
            entry["rows_per_s"] = round(entry["rows"] / entry["seconds"], 1) if entry["seconds"] else None
            report["runs"].append(entry)
            print(json.dumps(entry), flush=True)
    (out / "end_to_end.json").write_text(json.dumps(report, indent=1) + "\n")
    unscored = [run["model"] for run in report["runs"] if run["rows"] and run["errors"] == run["rows"]]
    if unscored:  # every row an error: the machinery failed (a missing package, say), not the rows
        raise RuntimeError(f"no row scored by {', '.join(unscored)} (error_samples in end_to_end.json)")
    return report


class _Tee(io.TextIOBase):
    """Writes to the console and to a log file as it goes (a run cut short keeps its log)."""

    def __init__(self, console, log):
        self.console, self.log = console, log

    def write(self, text: str) -> int:
        self.console.write(text)
        self.log.write(text)
        self.log.flush()
        return len(text)

    def flush(self) -> None:
        self.console.flush()


def _step(name: str, log: pathlib.Path, run) -> dict:
    """Run one step with its output in `log` (and on the console); its outcome (never raises)."""
    start = time.perf_counter()
    outcome: dict = {"step": name}
    with open(log, "w") as handle:
        try:
            with contextlib.redirect_stdout(_Tee(sys.stdout, handle)):
                outcome["result"] = run()
            outcome["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - one step failing must not lose the others' numbers
            outcome["ok"] = False
            outcome["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            handle.write(f"\nerror: {outcome['error']}\n")
    outcome["seconds"] = round(time.perf_counter() - start, 1)
    print(f"gpu-check: {name}: {'ok' if outcome['ok'] else outcome['error']} ({outcome['seconds']} s)", flush=True)
    return outcome


def _markdown(summary: dict, out: pathlib.Path) -> str:
    """summary.md: the steps, the benchmark's tables (gpu_report.render_markdown), end to end."""
    from benchmarks import gpu_report

    lines = ["# make gpu-check", "", f"Device {summary['device']}; torch {summary['torch']}; transformers {summary['transformers']}; "
             f"time limit {summary['time_limit_s']:g} s.", "", "| step | outcome | seconds |", "|---|---|---|"]
    for step in summary["steps"]:
        outcome = "ok" if step.get("ok") else step.get("error", "failed")
        lines.append(f"| {step['step']} | {outcome} | {step['seconds']} |")
    bench = out / "bench_gpu.json"
    if bench.exists():
        lines += ["", gpu_report.render_markdown(json.loads(bench.read_text()), heading="##")]
    e2e = out / "end_to_end.json"
    if e2e.exists():
        report = json.loads(e2e.read_text())
        lines += ["", f"## End to end ({report['path']})", "", "| model | metric | dtype | rows | errors | rows/s |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['metric']} | {r['dtype']} | {r['rows']} | {r['errors']} | {r['rows_per_s']} |" for r in report["runs"]]
        if report.get("skipped"):
            lines.append(f"\nSkipped (time limit): {', '.join(report['skipped'])}.")
    return "\n".join(lines) + "\n"


# `pytest -m gpu` runs these: the smoke tests, and the packed kernels (torch's varlen_attn, spelled
# for the installed torch) against the SDPA reference
GPU_TESTS = ("tests/test_gpu_smoke.py", "tests/test_packed_attention.py", "tests/test_packed_decoder.py")
# seconds kept back from the benchmark for the steps after it (their H200 times: 41 s, 27 s)
PYTEST_RESERVE, E2E_RESERVE = 60.0, 45.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="benchmark, GPU tests and an end-to-end run, into one folder")
    parser.add_argument("--out", required=True, help="folder for everything measured (created; flat, <= 8 files)")
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny models, few rows, short timing floors (the dry run)")
    parser.add_argument("--rows", type=int, default=None, help="real rows per metric end to end (default 300; 24 with --tiny)")
    parser.add_argument("--no-ray", action="store_true", help="end to end through the two stages even when Ray is importable")
    parser.add_argument("--skip-pytest", action="store_true", help="leave out `pytest -m gpu`")
    parser.add_argument("--time-limit", type=float, default=480.0, help="seconds for all steps (default 480); optional work is skipped")
    parser.add_argument("--bench-args", default="", help="more arguments for bench_gpu.py (e.g. '--core-only')")
    args = parser.parse_args(argv)
    started = time.monotonic()
    deadline = started + args.time_limit
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = args.rows or (24 if args.tiny else 300)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    steps: list[dict] = []
    import transformers
    from transformers.models.bart.modeling_bart import BartDecoder

    from scoring.engine_setup import require_cache_keyword
    from scoring.errors import UsageError

    try:  # the image's own transformers (5.17) when .whl did not travel: stop now, not case by case
        require_cache_keyword(BartDecoder)
    except UsageError as exc:
        print(f"gpu-check: {exc}", file=sys.stderr)
        return 2

    summary = {"device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu", "torch": torch.__version__,
               "cuda": torch.version.cuda, "transformers": transformers.__version__, "tiny": args.tiny, "rows": rows,
               "time_limit_s": args.time_limit, "steps": steps}

    def save_summary() -> None:  # after every step: a run cut short keeps what it measured
        summary["seconds_total"] = round(time.monotonic() - started, 1)
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        (out / "summary.md").write_text(_markdown(summary, out))

    from benchmarks import bench_gpu

    reserve = (0 if args.skip_pytest else PYTEST_RESERVE) + E2E_RESERVE
    bench_args = ["--device", device, "--out", str(out / "bench_gpu.json"), "--markdown", str(out / "summary.md"),
                  "--time-limit", f"{max(args.time_limit - reserve, 1.0):.0f}"]
    bench_args += ["--tiny"] if args.tiny else ["--token-budget", "32768"]
    bench_args += args.bench_args.split()
    def bench():
        report = bench_gpu.main(bench_args)
        summary["recommended_defaults"] = report.get("recommended_defaults")
        failed = [f"{s['model']} {s['case']}: {s['reason']}" for s in report["skipped"] if s["reason"].startswith("error")]
        if failed:  # a case that raised (not one the time limit left out) fails the step
            raise RuntimeError("; ".join(failed))
        ab = report.get("ab") or {"workloads": [], "skipped": []}
        variants = [arm for w in ab["workloads"] for arm in w["arms"]]
        return {"measured": len(report["runs"]), "skipped": len(report["skipped"]), "time_limit_hit": report["time_limit_hit"],
                "ab_variants": {status: sum(1 for a in variants if a["status"] == status) for status in ("measured", "unavailable", "error")},
                "ab_skipped": len(ab["skipped"])}

    steps.append(_step("bench_gpu", out / "bench_gpu.log", bench))
    save_summary()

    if not args.skip_pytest:
        def pytest_gpu():
            timeout = max(deadline - time.monotonic() - E2E_RESERVE, 30.0)
            done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "-m", "gpu", *GPU_TESTS],
                                  cwd=REPO, capture_output=True, text=True, timeout=timeout,
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
            print(done.stdout[-20000:] + done.stderr[-5000:])
            last = (done.stdout.strip().splitlines() or [""])[-1]
            if done.returncode not in (0, 5):  # 5: nothing collected/all deselected
                raise RuntimeError(f"pytest -m gpu exited {done.returncode}: {last}")
            return last
        steps.append(_step("pytest -m gpu", out / "pytest_gpu.log", pytest_gpu))
        save_summary()

    e2e = _step("end to end", out / "end_to_end.log", lambda: end_to_end(out, device, args.tiny, rows, not args.no_ray, deadline))
    steps.append({k: v for k, v in e2e.items() if k != "result"})
    save_summary()
    print(f"gpu-check: wrote {sorted(p.name for p in out.iterdir())} to {out} in {time.monotonic() - started:.0f} s")
    return 0 if all(step.get("ok") for step in steps) else 1


if __name__ == "__main__":
    sys.exit(main())

"""`ctgscore meta` on a small input (64 rows): default flags (`--tasks auto`) against `--tasks 0`
(in this process) and `--tasks 2` (Ray), wall time of the whole command, runs alternated.
Target: the default within 1.2x of `--tasks 0`. Writes benchmarks/results/meta_cli.md."""

from __future__ import annotations

import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ctgscore.testing.cli import QUIET_ENV

RESULTS = pathlib.Path(__file__).parent / "results" / "meta_cli.md"
ROWS, RUNS = 64, 3
VARIANTS = {"default (auto)": [], "--tasks 0": ["--tasks", "0"], "--tasks 2 (Ray)": ["--tasks", "2"]}


def scores(folder: pathlib.Path) -> pathlib.Path:
    rng = np.random.default_rng(0)
    human = rng.normal(size=ROWS)
    path = folder / "scores.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(ROWS)], "doc_id": [str(i // 8) for i in range(ROWS)],
                             "system": [f"s{i % 8}" for i in range(ROWS)], "human_q": human,
                             "m1": human + rng.normal(size=ROWS), "m2": rng.normal(size=ROWS)}), path)
    return path


def main() -> int:
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        path = scores(pathlib.Path(tmp))
        for run in range(RUNS):
            for name, flags in VARIANTS.items():
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "ctgscore", "meta", "-s", str(path), "-o",
                                f"{tmp}/r{run}{len(flags)}", "--no-progress", *flags], check=True,
                               env={**os.environ, **QUIET_ENV}, capture_output=True)
                times[name].append(time.perf_counter() - started)
    base = statistics.median(times["--tasks 0"])
    lines = ["# `ctgscore meta` on 64 rows (`benchmarks/bench_meta_cli.py`)", "",
             f"{RUNS} runs each, alternated; load average at end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.", "",
             "| flags | median wall (s) | runs (s) | vs --tasks 0 |", "|---|---|---|---|"]
    for name, values in times.items():
        med = statistics.median(values)
        lines.append(f"| {name} | {med:.1f} | {', '.join(f'{v:.1f}' for v in values)} | {med / base:.2f}x |")
    ratio = statistics.median(times["default (auto)"]) / base
    lines += ["", f"Target: default within 1.2x of `--tasks 0`: {'met' if ratio <= 1.2 else 'NOT met'} ({ratio:.2f}x)."]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

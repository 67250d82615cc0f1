"""Report pages of a dump with many systems: `ctgscore meta`'s report.md, report.html and
leaderboard.html, and `compare`'s board.html and board.md, at 20, 100 and 500 systems.

`python -m benchmarks.bench_many_systems [--systems 20 100 500]`

Each size runs twice in this process: with every pair on the page (`meta_eval.page_pairs.
ALL_PAIRS_MAX` raised past the count: the pages as they were before pages were bounded) and as
the pages are now (above 50 systems, the pairs that matter and one line naming the JSON with
every pair). The dump: one dataset, n systems x 10 documents, a human column and a metric whose
system means spread evenly. Measured: the bytes of each page and its render time (meta: the time
inside `meta_eval.report.write_report`, plots included; compare: `ctgscore.cli.compare.render`
from the same comparisons); the JSON outputs are listed to show they keep every pair.
The leaderboard command's board.html is `compare`'s page with another file named in its
left-out line (same size within a few bytes). Writes benchmarks/results/many_systems.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import tempfile
import time

import numpy as np
import pandas as pd

from benchmarks.data import publish

RESULTS = pathlib.Path(__file__).parent / "results" / "many_systems.md"
META_PAGES = ("report.md", "report.html", "leaderboard.html")
MACHINE = ("results.json", "leaderboard.json")


def dump(folder: pathlib.Path, systems: int, docs: int = 10) -> pathlib.Path:
    rng = np.random.default_rng(0)
    rows = [{"id": f"{s}-{k}", "dataset": "news", "system": f"sys{s:03d}", "doc_id": f"doc{k}"}
            for s in range(systems) for k in range(docs)]
    frame = pd.DataFrame(rows)
    frame["human_q"] = np.repeat(np.linspace(0, 3, systems), docs) + rng.normal(size=len(frame))
    frame["m1"] = frame["human_q"] + rng.normal(size=len(frame))
    frame["error"] = None
    path = folder / "scores.parquet"
    frame.to_parquet(path, index=False)
    return path


@contextlib.contextmanager
def all_pairs(on: bool):
    """Every pair on every page while `on` (the pages before they were bounded)."""
    from meta_eval import page_pairs

    kept = page_pairs.ALL_PAIRS_MAX
    page_pairs.ALL_PAIRS_MAX = 10**9 if on else kept
    try:
        yield
    finally:
        page_pairs.ALL_PAIRS_MAX = kept


def measure(systems: int, every_pair: bool) -> tuple[dict[str, float], dict[str, int]]:
    """(render seconds per command, bytes per file)."""
    from ctgscore.cli.compare import compare_scores, render
    from ctgscore.testing.cli import run_cli_in_process
    from meta_eval import report

    times, sizes = {}, {}
    write_report = report.write_report

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return write_report(*args, **kwargs)
        finally:
            times["meta"] = time.perf_counter() - started

    with tempfile.TemporaryDirectory() as tmp, all_pairs(every_pair):
        root = pathlib.Path(tmp)
        scores = dump(root, systems)
        report.write_report = timed
        try:
            done = run_cli_in_process(["meta", "-s", scores, "-o", root / "meta", "--resamples", "100", "--trials",
                                       "100", "--no-checklist", "--tasks", "0", "--no-progress"])
        finally:
            report.write_report = write_report
        assert done.returncode == 0, done.stderr[-2000:]
        for name in META_PAGES + MACHINE:
            sizes[f"meta {name}"] = (root / "meta" / name).stat().st_size
        comparisons, *_ = compare_scores(str(scores), None, None, dict(n_resamples=100, trials=100, seed=0))
        started = time.perf_counter()
        for fmt in ("html", "md"):
            sizes[f"compare board.{fmt}"] = len(render(comparisons, fmt).encode("utf-8"))
        times["compare"] = time.perf_counter() - started
    return times, sizes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, nargs="+", default=[20, 100, 500])
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    measure(5, False)  # warm-up: imports and first calls are not timed
    lines = ["# Report pages with many systems (`benchmarks/bench_many_systems.py`)", "",
             "One dataset, n systems x 10 documents, 2 score columns (a human, a metric), 100 resamples; "
             "\"all pairs\" is every pair on the page (as before), \"now\" the pages as written now "
             "(above 50 systems: the pairs that matter and one line naming the JSON with every pair).", "",
             "| systems | file | bytes, all pairs | bytes, now | ratio |", "|---|---|---|---|---|"]
    timing = ["", "| systems | render | seconds, all pairs | seconds, now | ratio |", "|---|---|---|---|---|"]
    for n in args.systems:
        before_times, before = measure(n, True)
        after_times, after = measure(n, False)
        lines += [f"| {n} | {name} | {before[name]:,} | {after[name]:,} | {after[name] / before[name]:.3f} |"
                  for name in before]
        timing += [f"| {n} | {name} | {before_times[name]:.2f} | {after_times[name]:.2f} | "
                   f"{after_times[name] / before_times[name]:.3f} |" for name in before_times]
        print(lines[-len(before):], timing[-2:], flush=True)
    lines += timing + ["", f"Load average at end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs."]
    return publish(lines, RESULTS, write=not args.no_write)


if __name__ == "__main__":
    raise SystemExit(main())

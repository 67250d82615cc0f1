"""Report pages when one name in the data is huge: `ctgscore meta`, `compare` and the
leaderboard page on a dump whose dataset, system and metric column each have one name of
200,000 characters beside ordinary ones.

`python -m benchmarks.bench_long_names [--length 200000]`

Each command runs once in this process (`ctgscore.testing.cli.run_cli_in_process`, `--tasks 0`);
the leaderboard page is the one `ctgscore leaderboard` writes (`compare`'s HTML with the moves
since a previous refresh), rendered from the same comparisons without running a scoring job.
Measured: wall time of each command and the size of every page it writes, against the same dump
with names of 8 characters in the same run; "extra bytes per long character" is how many bytes a
page grows per character of the three long names (about 1: each written whole once, in the
leaderboard page's folded list; 0: shown cut only). Writes benchmarks/results/long_names.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import tempfile
import time

import numpy as np
import pandas as pd

from benchmarks.data import publish

RESULTS = pathlib.Path(__file__).parent / "results" / "long_names.md"
SHORT = 8  # the long names' length in the baseline run
PAGES = {"meta": ["report.html", "report.md", "leaderboard.html"], "compare": ["board.html", "board.md"],
         "leaderboard": ["board.html"]}


def dump(folder: pathlib.Path, length: int) -> pathlib.Path:
    """Two datasets x three systems x 20 documents; one dataset, one system and one metric column
    have a name of `length` characters."""
    rng = np.random.default_rng(0)
    long_dataset, long_system, long_metric = "D" * length, "S" * length, "M" * length
    rows = [{"id": f"{d}-{s}-{k}", "dataset": dataset, "system": system, "doc_id": f"doc{k}"}
            for d, dataset in enumerate(["news", long_dataset]) for s, system in enumerate(["s1", "s2", long_system])
            for k in range(20)]
    frame = pd.DataFrame(rows)
    frame["human_q"] = rng.normal(size=len(frame))
    frame["m1"] = frame["human_q"] + rng.normal(size=len(frame))
    frame[long_metric] = rng.normal(size=len(frame))
    frame["error"] = None
    path = folder / "scores.parquet"
    frame.to_parquet(path, index=False)
    return path


def measure(length: int) -> tuple[dict[str, float], dict[str, int]]:
    """(wall seconds per command, bytes per page) for a dump whose long names have `length` characters."""
    from ctgscore.cli.compare import compare_scores, render
    from ctgscore.testing.cli import run_cli_in_process

    times, sizes = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        scores = dump(root, length)
        started = time.perf_counter()
        done = run_cli_in_process(["meta", "-s", scores, "-o", root / "meta", "--resamples", "200", "--trials", "200",
                                   "--no-checklist", "--tasks", "0", "--no-progress"])
        times["meta"] = time.perf_counter() - started
        assert done.returncode == 0, done.stderr[-2000:]
        (root / "compare").mkdir()
        started = time.perf_counter()
        for suffix in ("html", "md"):
            done = run_cli_in_process(["compare", "-s", scores, "-o", root / "compare" / f"board.{suffix}",
                                       "--resamples", "200", "--trials", "200"])
            assert done.returncode == 0, done.stderr[-2000:]
        times["compare"] = time.perf_counter() - started
        comparisons, *_ = compare_scores(str(scores), None, None, dict(n_resamples=200, trials=200, seed=0))
        previous = json.loads((root / "meta" / "leaderboard.json").read_text())
        started = time.perf_counter()
        (root / "leaderboard").mkdir()
        (root / "leaderboard" / "board.html").write_text(render(comparisons, "html", previous), encoding="utf-8")
        times["leaderboard"] = time.perf_counter() - started
        for command, pages in PAGES.items():
            for page in pages:
                sizes[f"{command} {page}"] = (root / command / page).stat().st_size
    return times, sizes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=200_000)
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    measure(SHORT)  # warm-up: imports and first calls are not timed
    short_times, short_sizes = measure(SHORT)
    times, sizes = measure(args.length)
    lines = [f"# Report pages with one name of {args.length:,} characters (`benchmarks/bench_long_names.py`)", "",
             "Dataset, system and metric column each have one such name beside ordinary ones "
             f"(2 datasets x 3 systems x 20 documents), against the same dump with names of {SHORT} characters; "
             f"load average at end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.", "",
             f"| command | wall (s), {args.length:,} | wall (s), {SHORT} |", "|---|---|---|"]
    lines += [f"| {command} | {seconds:.1f} | {short_times[command]:.1f} |" for command, seconds in times.items()]
    lines += ["", f"| page | bytes, {args.length:,} | bytes, {SHORT} | extra bytes per long character |",
              "|---|---|---|---|"]
    lines += [f"| {page} | {size:,} | {short_sizes[page]:,} | {(size - short_sizes[page]) / (3 * args.length):.2f} |"
              for page, size in sizes.items()]
    return publish(lines, RESULTS, write=not args.no_write)


if __name__ == "__main__":
    raise SystemExit(main())

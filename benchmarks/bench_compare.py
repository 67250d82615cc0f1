"""Leaderboard statistics at dump scale: `ctgscore compare` on the same grid, 10x the rows.

`python -m benchmarks.bench_compare [--prompts 10000 --systems 20 --samples 10 100 --shard-rows 500000]`

Two synthetic score dumps with the same (prompt x system) grid, 10 and 100 samples per
(prompt, system): 2M and 20M rows for the defaults, shards ordered by system then prompt (as
generation dumps are), each row carrying an id, a 40-70 character text and a human column the
comparison does not need. Each measurement runs in a fresh subprocess that reports its own peak
RSS (`resource.getrusage`): the compare (in-process partial aggregation, 1,000 bootstrap
resamples, 10,000 randomisation trials, one score column) on each dump, and a plain
`pyarrow.parquet.read_table` of the four columns the compare needs on the big dump. Targets:
driver peak RSS at 20M rows <= 1.2x that at 2M; the 20M compare within the 2M
compare's time plus 3x the plain read.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results" / "compare.md"
NEEDED = ["doc_id", "system", "dataset", "m", "error"]

COMPARE = r"""
import json, resource, sys, time
from ctgscore.cli.compare import compare_scores
import ctgscore.cli.meta, meta_eval.compare, meta_eval.partials, scipy.stats  # imports are not timed
started = time.perf_counter()
comps, skipped, columns, acc, datasets = compare_scores(sys.argv[1], ["m"], None, dict(
    n_resamples=1000, trials=10000, seed=0), tasks=int(sys.argv[2]))
wall = time.perf_counter() - started
board = [(s.system, s.rank, s.mean) for s in comps[0].systems]
print("RESULT " + json.dumps({"wall_s": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                              "rows": acc.rows, "cells": acc.n_cells, "units": comps[0].n_units, "top": board[:3]}))
"""

BASELINE = r"""
import json, resource, sys, time
from ctgscore.scores import load_scores
from meta_eval import compare
import scipy.stats  # imports are not timed
started = time.perf_counter()
frame = load_scores(sys.argv[1])
comps = compare.compare_systems(frame, ["m"], n_resamples=1000, trials=10000, seed=0)
wall = time.perf_counter() - started
print("RESULT " + json.dumps({"wall_s": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                              "top": [(s.system, s.rank, s.mean) for s in comps[0].systems][:3]}))
"""

READ = r"""
import json, resource, sys, time
import pyarrow.parquet as pq
import pyarrow.dataset  # imports are not timed
started = time.perf_counter()
table = pq.read_table(sys.argv[1], columns=json.loads(sys.argv[2]))
wall = time.perf_counter() - started
print("RESULT " + json.dumps({"wall_s": wall, "rows": table.num_rows,
                              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def make_dump(folder: pathlib.Path, prompts: int, systems: int, samples: int, shard_rows: int) -> int:
    """Rows ordered by (system, prompt, sample); score m = system effect + prompt effect + noise."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    words = "the a cat dog sat on mat ran fast slow big small red blue green tree house river".split()
    pool = pa.array([" ".join(rng.choice(words, size=12)) for _ in range(2000)])
    prompt_effect = rng.normal(0, 1, prompts)
    folder.mkdir(parents=True, exist_ok=True)
    total = prompts * systems * samples
    for shard, start in enumerate(range(0, total, shard_rows)):
        index = np.arange(start, min(start + shard_rows, total), dtype=np.int64)
        system = index // (prompts * samples)
        prompt = (index // samples) % prompts
        score = 0.01 * system + prompt_effect[prompt] + rng.normal(0, 1, len(index))
        table = pa.table({
            "id": index, "dataset": pa.array(["synthetic"] * len(index)),
            "system": pa.array([f"sys{k:02d}" for k in range(systems)]).take(pa.array(system)),
            "doc_id": pa.array(prompt), "text": pool.take(pa.array(rng.integers(0, len(pool), len(index)))),
            "human_quality": rng.normal(3, 1, len(index)), "m": score,
            "error": pa.nulls(len(index), pa.string())})
        pq.write_table(table, folder / f"part-{shard:05d}.parquet", row_group_size=100_000)
    return total


def child(code: str, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not line:
        raise RuntimeError(f"benchmark child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(line[-1][len("RESULT "):])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=10_000)
    parser.add_argument("--systems", type=int, default=20)
    parser.add_argument("--samples", type=int, nargs=2, default=[10, 100])
    parser.add_argument("--shard-rows", type=int, default=500_000)
    parser.add_argument("--tasks", type=int, default=0, help="Ray tasks for the compare (0: in-process)")
    parser.add_argument("--workdir", default=None, help="where to write the dumps (default: a temp folder)")
    parser.add_argument("--baseline", action="store_true",
                        help="also time the row-frame path (load_scores + pandas pivot) on the small dump")
    parser.add_argument("--no-write", action="store_true", help="print the table, do not write results/")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        small_dir, big_dir = pathlib.Path(tmp) / "small", pathlib.Path(tmp) / "big"
        small_rows = make_dump(small_dir, args.prompts, args.systems, args.samples[0], args.shard_rows)
        big_rows = make_dump(big_dir, args.prompts, args.systems, args.samples[1], args.shard_rows)
        print(f"dumps: {small_rows:,} and {big_rows:,} rows", flush=True)
        small = child(COMPARE, str(small_dir), str(args.tasks))
        read = child(READ, str(big_dir), json.dumps(NEEDED))
        big = child(COMPARE, str(big_dir), str(args.tasks))
        base = child(BASELINE, str(small_dir)) if args.baseline else None
        size = {name: sum(p.stat().st_size for p in d.iterdir()) / 2**20 for name, d in (("s", small_dir), ("b", big_dir))}
    rss_ratio = big["peak_rss_mb"] / small["peak_rss_mb"]
    budget = small["wall_s"] + 3 * read["wall_s"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    where = "in-process" if args.tasks <= 1 else f"{args.tasks} Ray tasks"
    lines = [
        f"# bench_compare: {args.prompts:,} prompts x {args.systems} systems, {args.samples[0]} vs "
        f"{args.samples[1]} samples per cell ({where})", "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; dumps {size['s']:.0f} MB and "
        f"{size['b']:.0f} MB of Parquet (id, dataset, system, doc_id, text, human_quality, m, error).", "",
        f"| measure | {small['rows']:,}-row dump | {big['rows']:,}-row dump | target | result |", "|---|---|---|---|---|",
        f"| rows | {small['rows']:,} | {big['rows']:,} | | |",
        f"| cells folded (units x systems) | {small['cells']:,} | {big['cells']:,} | same grid | |",
        f"| compare wall | {small['wall_s']:.1f} s | {big['wall_s']:.1f} s | <= {small['wall_s']:.1f} + 3 x "
        f"{read['wall_s']:.1f} = {budget:.1f} s | {verdict(big['wall_s'] <= budget)} |",
        f"| driver peak RSS | {small['peak_rss_mb']:.0f} MB | {big['peak_rss_mb']:.0f} MB | <= 1.2x | "
        f"{rss_ratio:.2f}x, {verdict(rss_ratio <= 1.2)} |",
        f"| plain pyarrow read of {', '.join(NEEDED)} | | {read['wall_s']:.1f} s, {read['peak_rss_mb']:.0f} MB | | |",
        *([f"| row-frame path (load_scores + pandas pivot, the code before partial sums) | "
            f"{base['wall_s']:.1f} s, {base['peak_rss_mb']:.0f} MB | not run | | |"] if base else []),
        "", f"Top three on both dumps: {small['top']} / {big['top']}.", ""]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

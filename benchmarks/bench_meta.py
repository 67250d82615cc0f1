"""Paired bootstrap speed: ours (Ray tasks, sorted layouts) vs a per-resample scipy loop.

`python -m benchmarks.bench_meta [--rows 100000 --resamples 1000 --baseline-resamples 100 --tasks 4]`

Workload: 1,000 paired-bootstrap resamples of Spearman and Kendall tau-b
of two metrics against one human column over 100k rows. The baseline is the loop people write:
per resample draw row indices, then `scipy.stats.spearmanr` and `scipy.stats.kendalltau` for metric
A and for metric B. It draws exactly the same rows as ours (same per-block generators), so the
numbers must agree; it is timed on `--baseline-resamples` resamples and extrapolated linearly to
all resamples (stated in the table). Ours runs through `ray_jobs.runners.ray_runner` (each call
puts the prepared layouts into the object store, counted); Ray start-up (ray.init and starting
the task workers) is timed separately and not counted. Rounds of ours and of the baseline alternate so that load
changes on the shared machine affect both.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import time

import numpy as np
from scipy import stats
from tqdm import tqdm

from meta_eval import bootstrap

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "meta.md"


def make_data(rows: int, seed: int = 0):
    """Human = mean of 3 annotators' 1-5 ratings (13 levels, many ties); two noisy metrics."""
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 6, (rows, 3)).mean(axis=1)
    quality = human + rng.normal(0, 1, rows)
    a = quality + rng.normal(0, 1.0, rows)
    b = quality + rng.normal(0, 1.5, rows)
    return np.column_stack([a, b]), human


def baseline(metrics, human, seed: int, blocks: list[tuple[int, int]]):
    """Per-resample scipy loop on the same resamples as ours (the same block generators)."""
    n = len(human)
    out = {"spearman": [], "kendall": []}
    for block, size in blocks:
        rng = bootstrap.block_rng(seed, block)
        for _ in range(size):
            idx = rng.integers(0, n, n)
            h = human[idx]
            out["spearman"].append([stats.spearmanr(metrics[idx, j], h).statistic for j in range(2)])
            out["kendall"].append([stats.kendalltau(metrics[idx, j], h).statistic for j in range(2)])
    return {k: np.array(v) for k, v in out.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--baseline-resamples", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=2, help="Ray tasks (2 on 2 cores; 4 x 0.5 CPU thrash the caches, measured)")
    parser.add_argument("--num-cpus", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds of ours and baseline")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    # Both sides run with one BLAS thread (ours sets it in every task; the baseline gets the same),
    # so neither pays for OpenBLAS threads fighting over 2 shared cores.
    threadpool_limits(limits=1, user_api="blas")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray starts its workers at nice 15; on this shared machine they would then lose the CPU to
    # every normal-priority process, the baseline included. Same priority on both sides.
    os.environ.setdefault("RAY_worker_niceness", "0")
    import ray

    from ray_jobs.runners import ray_runner

    metrics, human = make_data(args.rows, args.seed)
    methods = ("spearman", "kendall")
    load_start = os.getloadavg()[0]

    t0 = time.perf_counter()
    prep = bootstrap.prepare(metrics, human, "sample", methods, "b")
    prep_time = time.perf_counter() - t0
    blocks = bootstrap.plan_blocks(args.resamples)
    rounds = np.array_split(np.arange(len(blocks)), args.rounds)
    per_round = max(1, args.baseline_resamples // args.rounds)
    base_measured, base_count, diff = 0.0, 0, 0.0

    def baseline_round(round_blocks, ours_part, offset):
        """Time the baseline on the first resamples of a round and compare with ours."""
        nonlocal base_measured, base_count, diff
        first = round_blocks[0]
        sub = [(first[0], min(first[1], per_round))]
        t0 = time.perf_counter()
        part = baseline(metrics, human, args.seed, sub)
        base_measured += time.perf_counter() - t0
        base_count += sub[0][1]
        for m in methods:
            diff = max(diff, float(np.max(np.abs(part[m] - ours_part[m][offset:offset + sub[0][1]]))))

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=1 << 30)
    runner = ray_runner(args.tasks, args.num_cpus)
    # start the task workers (process start + imports), as a long-running cluster would have them
    bootstrap.distribution_of_blocks(prep, args.seed, [(0, 1)] * args.tasks, runner)
    ray_start = time.perf_counter() - t0

    # Each round: ours with Ray on a quarter of all resamples, then ours in one process and the
    # baseline on the first resamples of that quarter, so load changes on this shared machine hit
    # all three alike.
    ours_time, local_time, local_count = prep_time, 0.0, 0
    ours_parts = []
    diff_local = 0.0
    for round_ids in tqdm(rounds, desc="rounds"):
        round_blocks = [blocks[i] for i in round_ids]
        t0 = time.perf_counter()
        part = bootstrap.distribution_of_blocks(prep, args.seed, round_blocks, runner)
        ours_time += time.perf_counter() - t0
        ours_parts.append(part)
        first = round_blocks[0]
        sub = [(first[0], min(first[1], per_round))]
        t0 = time.perf_counter()
        local = bootstrap.run_blocks(prep, args.seed, sub)
        local_time += time.perf_counter() - t0
        local_count += sub[0][1]
        for m in methods:
            diff_local = max(diff_local, float(np.max(np.abs(local[m] - part[m][: sub[0][1]]))))
        baseline_round(round_blocks, part, 0)
    ray.shutdown()
    local_per = local_time / local_count
    base_per_a = base_measured / base_count
    base_time = base_measured / base_count * args.resamples
    load_end = os.getloadavg()[0]
    k = base_count
    local_time = local_per * args.resamples

    rows = [
        ("workload", f"{args.rows:,} rows, {args.resamples:,} paired resamples, Spearman + Kendall tau-b, "
                     "2 metrics vs 1 human (13 rating levels)"),
        ("machine", f"{os.cpu_count()} CPUs ({platform.machine()}), load average {load_start:.1f} at start, "
                    f"{load_end:.1f} at end (shared machine); one BLAS thread on both sides; "
                    f"Ray worker niceness {os.environ['RAY_worker_niceness']}"),
        ("baseline: per-resample scipy loop", f"{base_measured:.1f} s measured on {k} resamples (alternating "
                                             "with ours) -> "
                                             f"**{base_time:.1f} s** for {args.resamples} (linear extrapolation)"),
        ("ours, one process (no Ray)", f"{local_time:.1f} s for {args.resamples} (measured on {local_count}, "
                                       f"extrapolated; baseline alongside: {base_per_a * 1000:.0f} ms/resample "
                                       f"vs ours {local_per * 1000:.0f} ms)"),
        (f"ours, {args.tasks} Ray tasks x {args.num_cpus} CPU on 2 CPUs", f"**{ours_time:.1f} s** measured "
                                                                          f"for all {args.resamples}, incl. {prep_time:.2f} s setup "
                                                                          f"(+{ray_start:.1f} s ray.init and worker start-up, not counted)"),
        ("speed-up vs baseline", f"**{base_time / ours_time:.1f}x** (one process: {base_time / local_time:.1f}x)"),
        ("max abs difference vs baseline (same resamples)", f"{diff:.1e}"),
        ("max abs difference Ray vs one process", f"{diff_local:.1e}"),
    ]
    from scoring.tables import markdown_table

    table = "# Paired bootstrap benchmark (meta_eval)\n\n" + markdown_table(["quantity", "value"], rows)
    print(table)
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

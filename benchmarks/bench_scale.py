"""The scoring job at scale: does the driver stay small while the rows grow?

A synthetic dump of short texts (generated here: `--rows` rows, default 10,000,000, in
shards of `--shard-rows`) goes through `text_stats` on a local Ray (all this machine's CPUs,
2 actors). The same job also runs over the first 100,000 rows. Each job runs in its own
driver process, which reports its own peak RSS and CPU time (`resource.getrusage`), so Ray's
other processes are not counted. Targets (docs/job.md, "Pipeline": the driver never touches rows):

* driver peak RSS over the big dump within 1.2x of the 100,000-row job;
* driver CPU per row <= 1 us (the big job's driver CPU over its rows; the marginal cost
  between the two jobs is shown too);
* steady throughput (rows/s after the first part is committed) >= 0.9x the in-process
  scorer on the same cores: one process reading the same Parquet, building rows, scoring,
  keying and building the output table (`RowMetric.output_table`), times the number of
  scoring actors (the Ray job scores with 2 actors, the in-process scorer uses one core);
* an unchanged re-run <= 2% of the first run's time.

    .venv/bin/python -m benchmarks.bench_scale                 # writes benchmarks/results/scale.md
    .venv/bin/python -m benchmarks.bench_scale --rows 400000    # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results" / "scale.md"
WORDS = "the a cat dog sat on mat ran fast slow big small red blue green tree house river".split()
ACTORS = 2

DRIVER = r"""
import json, resource, sys, time
from ray_jobs.config import parse_config
from ray_jobs.score_corpus import run_job
config = parse_config(json.loads(sys.argv[1]))
started = time.perf_counter()
manifest = run_job(config)
wall = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_SELF)
report = manifest["metrics"]["text_stats"]
print("RESULT " + json.dumps({
    "wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime,
    "rows_scored": report["rows_scored"], "rows_cached": report["rows_cached"], "rows_out": report["rows_out"],
    "steady_rows_per_s": report["steady_rows_per_s"], "parts_written": report["parts_written"],
}))
"""


def make_dump(folder: pathlib.Path, rows: int, shard_rows: int) -> None:
    """Short synthetic texts (2-12 words from a small vocabulary), unique ids."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    pool = pa.array([" ".join(rng.choice(WORDS, size=int(rng.integers(2, 13)))) for _ in range(5000)])
    folder.mkdir(parents=True, exist_ok=True)
    for shard, start in enumerate(range(0, rows, shard_rows)):
        count = min(shard_rows, rows - start)
        ids = pa.array([f"r{i}" for i in range(start, start + count)])
        texts = pool.take(pa.array(rng.integers(0, len(pool), size=count)))
        pq.write_table(pa.table({"id": ids, "text": texts}), folder / f"part-{shard:05d}.parquet", row_group_size=50_000)


def run_driver(config: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(config)], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.split("RESULT ", 1)[1].splitlines()[0])


def in_process_rows_per_s(folder: pathlib.Path, rows: int) -> float:
    """One process: read Parquet, rows, score, key and build the output table."""
    import pyarrow.parquet as pq

    from scoring.registry import build_metric
    from scoring.schema import rows_from_table

    metric = build_metric("text_stats")
    done, started = 0, None
    for path in sorted(folder.glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
            if started is None:  # the first batch warms up
                metric.output_table(rows_from_table(batch)[0][:100])
                started = time.perf_counter()
            table_rows, _ = rows_from_table(batch)
            metric.output_table(table_rows)
            done += len(table_rows)
            if done >= rows:
                return done / (time.perf_counter() - started)
    return done / (time.perf_counter() - started)


def job_config(input_dir: pathlib.Path, output_dir: pathlib.Path, temp_dir: str) -> dict:
    return {
        "input": str(input_dir), "output": str(output_dir), "metrics": [{"name": "text_stats"}],
        "batch_size": 5000, "part_rows": 50_000, "progress": False,
        "pool": {"min_size": ACTORS, "max_size": ACTORS, "num_cpus": 0.5},
        "ray": {"num_cpus": os.cpu_count(), "object_store_memory": 2 << 30, "temp_dir": temp_dir},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--small-rows", type=int, default=100_000)
    parser.add_argument("--shard-rows", type=int, default=100_000)
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    args = parser.parse_args(argv)

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-scale-"))
    temp_dir = tempfile.mkdtemp(prefix="rbs", dir="/tmp")
    load_before = os.getloadavg()
    try:
        started = time.perf_counter()
        make_dump(work / "big", args.rows, args.shard_rows)
        make_dump(work / "small", args.small_rows, min(args.shard_rows, args.small_rows))
        generate_s = time.perf_counter() - started
        in_process = in_process_rows_per_s(work / "big", min(args.rows, 300_000))
        small = run_driver(job_config(work / "small", work / "small-out", temp_dir))
        big = run_driver(job_config(work / "big", work / "big-out", temp_dir))
        rerun = run_driver(job_config(work / "big", work / "big-out", temp_dir))
        in_process_after = in_process_rows_per_s(work / "big", min(args.rows, 300_000))
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    baseline = (in_process + in_process_after) / 2
    rss_ratio = big["peak_rss_mb"] / small["peak_rss_mb"]
    cpu_per_row_us = 1e6 * big["cpu_s"] / args.rows
    marginal_us = 1e6 * (big["cpu_s"] - small["cpu_s"]) / (args.rows - args.small_rows)
    steady_ratio = big["steady_rows_per_s"] / (ACTORS * baseline)
    rerun_share = rerun["wall_s"] / big["wall_s"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    lines = [
        "# Scoring job at scale (`benchmarks/bench_scale.py`)",
        "",
        f"Synthetic dump: {args.rows:,} rows of 2-12 words in shards of {args.shard_rows:,} (generated in {generate_s:.0f} s), "
        f"`text_stats`, local Ray on {os.cpu_count()} CPUs, {ACTORS} actors x 0.5 CPU, parts of 50,000 rows. "
        f"The machine is shared with other sessions: load average {load_before[0]:.1f} before, {load_after[0]:.1f} after.",
        "",
        "| measure | 100k-row job | big job | target | result |",
        "|---|---|---|---|---|",
        f"| driver peak RSS | {small['peak_rss_mb']:.0f} MB | {big['peak_rss_mb']:.0f} MB | <= 1.2x | {rss_ratio:.2f}x, {verdict(rss_ratio <= 1.2)} |",
        f"| driver CPU (user+sys) | {small['cpu_s']:.1f} s | {big['cpu_s']:.1f} s | | |",
        f"| driver CPU per row | {1e6 * small['cpu_s'] / args.small_rows:.1f} us | {cpu_per_row_us:.2f} us (marginal {marginal_us:.2f} us) | <= 1 us | {verdict(cpu_per_row_us <= 1)} |",
        f"| wall | {small['wall_s']:.1f} s | {big['wall_s']:.1f} s | | |",
        f"| steady rows/s (after the first part) | ({small['parts_written']} parts: too few) | {big['steady_rows_per_s']:,.0f} | | |",
        f"| in-process scorer rows/s (1 process, mean before/after) | | {baseline:,.0f} | | |",
        f"| steady / ({ACTORS} x in-process) | | {steady_ratio:.2f} | >= 0.9 | {verdict(steady_ratio >= 0.9)} |",
        f"| unchanged re-run | | {rerun['wall_s']:.2f} s ({rerun['rows_scored']} scored, {rerun['rows_cached']:,} reused) | <= 2% of first | {100 * rerun_share:.2f}%, {verdict(rerun_share <= 0.02)} |",
        "",
        f"Parts written by the big job: {big['parts_written']}; rows out {big['rows_out']:,}.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

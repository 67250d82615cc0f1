"""Meta-evaluation job: `python -m ray_jobs.meta_eval --scores PATH_OR_S3 --out DIR ...`.

Reads stored per-row scores (never re-scores), computes correlations, paired bootstrap
significance (chunks of resamples as Ray tasks) and the metric preference checklist, and writes
results.json + report.md/html + PNG plots (see meta_eval.report).
"""

from __future__ import annotations

import argparse
import sys
import time


def _parse_pairs(values: list[str], flag: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        parts = value.split("::")
        if len(parts) != 2 or not all(parts):
            raise SystemExit(f"{flag}: {value!r} is not SYSTEM_A::SYSTEM_B")
        pairs.append((parts[0], parts[1]))
    return pairs


def run(args) -> int:
    from meta_eval import io, pipeline, report

    started = time.time()
    table = io.read_table(args.scores, humans=args.human_columns, metrics=args.metrics)
    if args.lower_is_better is not None:
        table.lower_is_better = set(args.lower_is_better)
    pairs = args.pairs
    if args.easy_pairs is not None or args.hard_pairs is not None:
        table.easy_pairs = _parse_pairs(args.easy_pairs or [], "--easy-pairs")
        table.hard_pairs = _parse_pairs(args.hard_pairs or [], "--hard-pairs")
        pairs = "given"
    if not table.metrics:
        raise SystemExit(f"{args.scores}: no metric columns found (pass --metrics)")
    opts = pipeline.Options(methods=args.methods, variant=args.kendall_variant, boot_levels=args.level,
                            boot_method=args.boot_method, resamples=args.resamples, seed=args.seed,
                            tasks=args.tasks, num_cpus=args.num_cpus, pairs=pairs)
    if args.tasks > 0 and args.resamples > 0:
        from meta_eval.bootstrap import ensure_ray

        ensure_ray()
    results = pipeline.run_meta(table, opts)
    paths = report.write_report(results, args.out, args.format)
    print(f"meta-eval: {table.n_input_rows} rows ({table.n_error_rows} with an error in some metric run), "
          f"{len(table.metrics)} metrics x {len(table.humans)} human aspects, "
          f"{time.time() - started:.1f}s -> {args.out}")
    for name, path in paths.items():
        print(f"  {name}: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from meta_eval.cli import add_arguments

    parser = argparse.ArgumentParser(prog="python -m ray_jobs.meta_eval", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

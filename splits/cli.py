"""`ctgscore splits`: CompMCTG splits for given aspects or a corpus (issue 5).

    ctgscore splits --aspects '{"sentiment": ["Positive", "Negative"], "tense": [...], ...}' \\
        --protocol acd --seed 0 --restarts 3000 --tasks 2 --out splits.json
    ctgscore splits --corpus corpus.parquet --protocol holdout --out holdout.json --partition-dir parts/

`--aspects` also takes a JSON file or a CompMCTG dataset name (Fyelp, Amazon, Yelp, Mixture).
With `--tasks` > 1 the climb's restarts run as Ray tasks (same splits as with 1 task).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--aspects", help="JSON {aspect: [values]}, a JSON file, or Fyelp|Amazon|Yelp|Mixture")
    src.add_argument("--corpus", help="Parquet file/folder with an `attributes` map column or one column per aspect")
    parser.add_argument("--aspect-columns", default=None, help="comma-separated aspect columns of --corpus")
    parser.add_argument("--protocol", required=True, choices=["original", "holdout", "acd", "fewshot", "mindiv", "random"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--restarts", type=int, default=1000, help="hill-climbing restarts (when not exhaustive)")
    parser.add_argument("--tasks", type=int, default=1, help="Ray tasks for the restarts (1 = in process)")
    parser.add_argument("--alpha", type=float, default=0.1, help="Chernoff coefficient α (seen side)")
    parser.add_argument("--max-splits", type=int, default=None,
                        help="distinct optimal splits kept (default: CompMCTG count for known datasets, else 10)")
    parser.add_argument("--seen-size", type=int, default=None, help="override |seen| (acd/mindiv/random/fewshot)")
    parser.add_argument("--search", choices=["auto", "exhaustive", "climb"], default="auto")
    parser.add_argument("--moves", choices=["coverage", "original"], default="coverage")
    parser.add_argument("--recombine", choices=["auto", "on", "off"], default="auto",
                        help="2-for-2 value-exchange moves when no single swap improves (auto: small seen sides)")
    parser.add_argument("--max-iters", type=int, default=1000)
    parser.add_argument("--patience", type=int, default=None, help="stop a restart after this many tie moves in a row")
    parser.add_argument("--exhaustive-limit", type=int, default=1_000_000)
    parser.add_argument("--out", required=True, help="output JSON")
    parser.add_argument("--partition-dir", default=None, help="with --corpus: write train/test_iid/test_comp Parquet per split")
    parser.add_argument("--iid-fraction", type=float, default=0.1, help="share of seen-combination rows in test_iid")
    parser.add_argument("--report", action="store_true",
                        help="with --corpus: also write OUT.report.json/.md (pred_<aspect>, perplexity, text columns)")


def register(subparsers) -> None:
    parser = subparsers.add_parser("splits", help="CompMCTG splits: Original, Hold-Out, ACD, Few-Shot",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from splits.aspects import SplitsInputError, from_corpus, parse_aspects_arg
    from splits.protocols import build_splits

    try:
        columns = [c.strip() for c in args.aspect_columns.split(",")] if args.aspect_columns else None
        if (args.partition_dir or args.report) and not args.corpus:
            raise SplitsInputError("--partition-dir and --report need --corpus")
        universe = from_corpus(args.corpus, columns) if args.corpus else parse_aspects_arg(args.aspects)
        runner, started_ray = None, False
        if args.tasks > 1 or getattr(args, "force_ray", False):
            import ray

            from ray_jobs.build_splits import ray_runner

            started_ray = not ray.is_initialized()
            runner = ray_runner(args.tasks)
        try:
            result = build_splits(
                universe, args.protocol, seed=args.seed, restarts=args.restarts, alpha=args.alpha,
                max_splits=args.max_splits, seen_size=args.seen_size, search=args.search, moves=args.moves,
                max_iters=args.max_iters, patience=args.patience, exhaustive_limit=args.exhaustive_limit,
                runner=runner, tasks=args.tasks, recombine={"auto": None, "on": True, "off": False}[args.recombine],
            )
        finally:
            if started_ray:
                import ray

                ray.shutdown()
        data = result.to_json()
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=2, ensure_ascii=False))
        best = max((s.divergence for s in result.splits), default=None)
        print(f"{len(result.splits)} {args.protocol} splits, max divergence {best}, written to {out}")
        if args.partition_dir:
            from splits.partition import partition_corpus

            manifest = partition_corpus(args.corpus, data, args.partition_dir, iid_fraction=args.iid_fraction,
                                        seed=args.seed, aspect_columns=columns)
            print(f"partitions of {len(manifest['splits'])} splits written to {args.partition_dir}")
        if args.report:
            from splits.report import protocol_report, report_markdown

            rep = protocol_report(args.corpus, data, aspect_columns=columns)
            out.with_suffix(".report.json").write_text(json.dumps(rep, indent=2, ensure_ascii=False, default=str))
            out.with_suffix(".report.md").write_text(report_markdown(rep))
            print(f"report written to {out.with_suffix('.report.json')}")
    except SplitsInputError as exc:
        print(f"ctgscore splits: error: {exc}", file=sys.stderr)
        return 2
    return 0

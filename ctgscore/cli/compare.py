"""`ctgscore compare`: two or more systems on stored score columns, per dataset: paired
bootstrap and approximate randomisation (intervals and p-values), and a leaderboard
(per-system mean, 95% interval, rank). Rows are paired across systems by `doc_id`.

    ctgscore compare -s out/run --columns bartscore_s_h perplexity -o leaderboard.md
    ctgscore compare -s scores.parquet --systems sysA sysB --format csv -o leaderboard.csv
"""

from __future__ import annotations

import argparse
import pathlib

from ctgscore.cli import common
from scoring.errors import InputError, UsageError

TESTS = ["bootstrap", "randomization"]
FORMATS = {".md": "md", ".markdown": "md", ".csv": "csv", ".json": "json"}


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "compare", parents=[parent], help="compare systems: paired bootstrap, randomisation, leaderboard",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-s", "--scores", required=True,
                        help="scores: the job's output folder or s3:// prefix, or a Parquet file")
    parser.add_argument("--columns", nargs="+", default=None, metavar="COLUMN",
                        help="score columns to compare on (default: every numeric score column)")
    parser.add_argument("--systems", nargs="+", default=None, metavar="SYSTEM",
                        help="systems to compare (default: all; at least two)")
    parser.add_argument("--unit", default="doc_id", help="column that pairs rows across systems (default doc_id)")
    parser.add_argument("--tests", nargs="+", default=TESTS, choices=TESTS, help="significance tests to run")
    parser.add_argument("--resamples", type=int, default=1000, help="paired bootstrap resamples")
    parser.add_argument("--trials", type=int, default=10000, help="approximate randomisation trials")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level for `better`")
    parser.add_argument("--lower-is-better", nargs="*", default=None, metavar="COLUMN",
                        help="columns where lower is better (default: perplexity columns)")
    parser.add_argument("--tasks", type=int, default=0,
                        help="Ray tasks for the resamples (0 or 1: in this process); same numbers either way")
    parser.add_argument("--num-cpus", type=float, default=0.5, help="CPUs per Ray task")
    parser.add_argument("-o", "--output", default=None,
                        help="write the tables here (.md, .csv or .json; default: Markdown on stdout)")
    parser.add_argument("--format", choices=["md", "csv", "json"], default=None,
                        help="output format (default: from the output's suffix, else md)")
    parser.set_defaults(handler=handle)


def output_format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    if args.output:
        suffix = pathlib.Path(args.output).suffix.lower()
        if suffix not in FORMATS:
            raise UsageError(f"-o {args.output}: cannot tell the format from {suffix or 'no suffix'!r}; "
                             "pass --format md|csv|json")
        return FORMATS[suffix]
    return "md"


def default_columns(frame) -> list[str]:
    import pandas as pd

    from scoring import schema

    return [c for c in frame.columns if schema.is_score_column(c) and c != "error"
            and pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])]


def render(comparisons, fmt: str) -> str:
    from meta_eval import compare

    if fmt == "csv":
        return compare.leaderboard_csv(compare.leaderboard(comparisons))
    if fmt == "json":
        return compare.comparisons_json(comparisons)
    return compare.comparison_markdown(comparisons)


def compare_groups(frame, columns: list[str], lower: set[str], options: dict):
    """`meta_eval.compare.system_comparison` for every (dataset, column); a pair that cannot be
    compared (one system there, no paired documents) is skipped with its reason instead of
    failing the others. Returns (comparisons, skipped reasons)."""
    from meta_eval import compare
    from scoring.errors import InputError

    if "dataset" in frame and frame["dataset"].notna().any():
        groups = [(str(name), part) for name, part in frame.groupby("dataset", sort=True)]
    else:
        groups = [("all", frame)]
    comparisons, skipped = [], []
    for name, part in groups:
        for column in columns:
            try:
                comparisons.append(compare.system_comparison(part, column, dataset=name,
                                                             lower_is_better=column in lower, **options))
            except InputError as exc:
                reason = str(exc)
                skipped.append(reason if f"dataset {name!r}" in reason else f"dataset {name!r}, column {column!r}: {reason}")
    return comparisons, skipped


def handle(args: argparse.Namespace) -> int:
    if args.resamples < 1 or args.trials < 1 or args.tasks < 0:
        raise UsageError("--resamples and --trials must be >= 1 and --tasks >= 0")
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha}: expected a number between 0 and 1")
    fmt = output_format(args)
    output = common.check_output_file(args.output) if args.output else None
    common.check_input_path(args.scores, "scores")
    from ctgscore.cli.meta import make_runner  # heavy imports after the cheap checks
    from ctgscore.scores import load_scores
    from meta_eval import compare

    frame = load_scores(args.scores)
    columns = args.columns or default_columns(frame)
    if not columns:
        raise InputError(f"scores {args.scores}: no numeric score columns to compare on")
    missing = [c for c in columns if c not in frame]
    if missing:
        raise InputError(f"scores {args.scores}: no column {missing[0]!r} (score columns: "
                         f"{', '.join(default_columns(frame)) or 'none'})")
    lower = args.lower_is_better if args.lower_is_better is not None else [
        c for c in columns if c.split(".")[-1].startswith("perplexity")]
    options = dict(systems=args.systems, unit=args.unit, tests=args.tests, n_resamples=args.resamples,
                   trials=args.trials, seed=args.seed, alpha=args.alpha, runner=make_runner(args.tasks, args.num_cpus))
    comparisons, skipped = compare_groups(frame, columns, set(lower), options)
    if not comparisons:
        raise InputError(f"scores {args.scores}: nothing to compare ({skipped[0]})")
    text = render(comparisons, fmt)
    if output is not None:
        output.write_text(text, encoding="utf-8")
    board = compare.leaderboard(comparisons)
    from meta_eval.results import to_json_dict

    summary = {"ok": True, "command": "compare", "output": str(output) if output else None, "format": fmt,
               "leaderboard": to_json_dict(board), "comparisons": to_json_dict(list(comparisons)), "skipped": skipped}
    if output is None:
        lines = [text.rstrip("\n")]
    else:
        lines = [f"compare: {len(comparisons)} comparisons ({', '.join(columns)}) -> {output}"]
        for comp in comparisons:
            ranking = ", ".join(f"{s.rank}. {s.system} {s.mean:.4g}" for s in comp.systems)
            lines.append(f"  {comp.dataset} / {comp.column}: {ranking}")
    lines += [f"  skipped: {reason}" for reason in skipped]
    common.emit(args, summary, lines)
    return 0

"""`ctgscore splits`: CompMCTG splits (Original, Hold-Out, ACD, Few-Shot, and min-divergence and
random splits for comparison) for given aspects or a corpus.

    ctgscore splits --aspects Fyelp --protocol acd --seed 0 --restarts 3000 --tasks 2 -o splits.json
    ctgscore splits --corpus corpus.parquet --protocol holdout -o holdout.json --partition-dir parts/

`--aspects` takes JSON `{aspect: [values]}`, a JSON file, or a CompMCTG dataset name (Fyelp,
Amazon, Yelp, Mixture). With `--tasks` > 1 the climb's restarts run as Ray tasks; the splits are
the same for any number of tasks.
"""

from __future__ import annotations

import argparse
import functools
import json

from ctgscore.cli import common
from scoring import atomic_files
from scoring.errors import CtgscoreError, InputError, UsageError

PROTOCOLS = ["original", "holdout", "acd", "fewshot", "mindiv", "random"]


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "splits", parents=[parent], help="CompMCTG splits: Original, Hold-Out, ACD, Few-Shot",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--aspects", help="JSON {aspect: [values]}, a JSON file, or Fyelp|Amazon|Yelp|Mixture")
    source.add_argument("--corpus", help="Parquet file/folder with an `attributes` map column or one column per aspect")
    parser.add_argument("--aspect-columns", default=None, help="comma-separated aspect columns of --corpus")
    parser.add_argument("--protocol", required=True, choices=PROTOCOLS)
    parser.add_argument("-o", "--output", required=True, help="output JSON file (its folder must exist)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--restarts", type=int, default=1000, help="hill-climbing restarts (when not exhaustive)")
    parser.add_argument("--tasks", type=int, default=1,
                        help="Ray tasks for the restarts (0 or 1: in this process); same splits either way")
    parser.add_argument("--num-cpus", type=common.cpus, default=0.5, help="CPUs per Ray task")
    parser.add_argument("--chernoff-alpha", type=float, default=0.1,
                        help="Chernoff coefficient alpha of the compound divergence (weight of the seen side)")
    parser.add_argument("--max-splits", type=int, default=None,
                        help="distinct optimal splits kept (default: CompMCTG count for known datasets, else 10)")
    parser.add_argument("--seen-size", type=int, default=None, help="override |seen| (acd/mindiv/random/fewshot)")
    parser.add_argument("--search", choices=["auto", "exhaustive", "climb", "original"], default="auto",
                        help="original: the CompMCTG code's seeded draws and climb (rebuilds the paper's splits)")
    parser.add_argument("--moves", choices=["coverage", "original"], default="coverage")
    parser.add_argument("--recombine", choices=["auto", "on", "off"], default="auto",
                        help="2-for-2 value-exchange moves when no single swap improves (auto: small seen sides)")
    parser.add_argument("--duplicates", choices=["sets", "ordered"], default="sets",
                        help="keep distinct splits (sets), or CompMCTG's ordered seen lists, whose repeats weight "
                             "its averages (ordered; docs/fidelity.md)")
    parser.add_argument("--max-iters", type=int, default=1000)
    parser.add_argument("--patience", type=int, default=None, help="stop a restart after this many tie moves in a row")
    parser.add_argument("--exhaustive-limit", type=int, default=1_000_000)
    parser.add_argument("--partition-dir", default=None,
                        help="with --corpus: write train/test_iid/test_comp Parquet per split into this folder")
    parser.add_argument("--iid-fraction", type=float, default=0.1, help="share of seen-combination rows in test_iid")
    parser.add_argument("--report", action="store_true",
                        help="with --corpus: also write OUTPUT.report.json/.md (pred_<aspect>, perplexity, text columns)")
    parser.set_defaults(handler=handle)


def _as_user_error(exc: Exception, args: argparse.Namespace) -> Exception:
    """The splits library's `SplitsInputError`: a `UsageError` when it is about `--aspects`
    (a flag value), an `InputError` when it is about the corpus."""
    if type(exc).__name__ != "SplitsInputError":
        return exc
    if args.corpus:
        if getattr(exc, "missing_columns", None) and args.aspect_columns:  # a flag names columns the corpus lacks
            return UsageError(f"--aspect-columns: {exc}")
        return exc if isinstance(exc, CtgscoreError) else InputError(str(exc))
    return UsageError(f"--aspects: {exc}")


def build(args: argparse.Namespace, universe):
    from splits.protocols import build_splits, local_runner

    runner = functools.partial(local_runner, progress=common.progress_bars(args))
    if args.tasks > 1:
        from ray_jobs.runners import splits_runner

        runner = splits_runner(args.tasks, num_cpus=args.num_cpus)
    recombine = {"auto": None, "on": True, "off": False}[args.recombine]
    return build_splits(
        universe, args.protocol, seed=args.seed, restarts=args.restarts, alpha=args.chernoff_alpha,
        max_splits=args.max_splits, seen_size=args.seen_size, search=args.search, moves=args.moves,
        max_iters=args.max_iters, patience=args.patience, exhaustive_limit=args.exhaustive_limit,
        runner=runner, tasks=max(args.tasks, 1), recombine=recombine, duplicates=args.duplicates,
    )


def handle(args: argparse.Namespace) -> int:
    try:
        return _handle(args)
    except Exception as exc:
        translated = _as_user_error(exc, args)
        if translated is exc:
            raise
        raise translated from exc


def check_numbers(args: argparse.Namespace) -> None:
    """Usage errors (exit 2) for numbers no run could use, before any work: a negative seed
    (numpy takes none: it was an internal error), an `--iid-fraction` outside [0, 1) (it failed
    after the splits were written), a `--patience` below 1 or a negative `--exhaustive-limit`
    (silently accepted)."""
    from meta_eval.defaults import check_counts

    check_counts(args.seed, "--seed")
    if not 0 <= args.iid_fraction < 1:
        raise UsageError(f"--iid-fraction {args.iid_fraction}: expected a share from 0 up to (not including) 1")
    if args.patience is not None and args.patience < 1:
        raise UsageError(f"--patience {args.patience}: expected 1 or more tie moves")
    if args.exhaustive_limit < 0:
        raise UsageError(f"--exhaustive-limit {args.exhaustive_limit}: expected 0 or more")


def _handle(args: argparse.Namespace) -> int:
    from splits.aspects import from_corpus, parse_aspects_arg

    if (args.partition_dir or args.report) and not args.corpus:
        raise UsageError("--partition-dir and --report need --corpus")
    if args.tasks < 0:
        raise UsageError(f"--tasks {args.tasks}: expected 0 or more")
    check_numbers(args)
    output = common.check_output_file(args.output)
    columns = [c.strip() for c in args.aspect_columns.split(",")] if args.aspect_columns else None
    if columns is not None:
        from scoring.display_names import quoted

        if "" in columns:
            raise UsageError(f"--aspect-columns {quoted(args.aspect_columns)}: an empty column name")
        from collections import Counter

        twice = sorted(c for c, n in Counter(columns).items() if n > 1)
        if twice:
            raise UsageError(f"--aspect-columns: column {quoted(twice[0])} is named twice")
    if args.corpus:
        common.check_input_path(args.corpus, "corpus")
        universe = from_corpus(args.corpus, columns)
    else:
        universe = parse_aspects_arg(args.aspects)
    result = build(args, universe)
    data = result.to_json()
    atomic_files.write_text(output, json.dumps(data, indent=2, ensure_ascii=False))
    best = max((s.divergence for s in result.splits), default=None)
    shown = "–" if best is None else f"{best:.4f}"
    lines = [f"splits: {len(result.splits)} {args.protocol} splits, max divergence {shown} -> {output}"]
    summary = {"ok": True, "command": "splits", "protocol": args.protocol, "output": str(output),
               "splits": len(result.splits), "max_divergence": best}
    if universe.rows is not None:  # a corpus: its rows whose aspect key is not valid UTF-8 went into no split
        from meta_eval.row_account import RowAccount

        rows = universe.rows
        lines += RowAccount.lines(rows["rows_used"], rows["rows_left_out"], first=rows.get("rows_left_out_first"))
        summary.update(rows)  # flat, as every command's --json gives its account
    if args.partition_dir:
        from splits.partition import partition_corpus

        folder = common.prepare_output_dir(args.partition_dir, "partition folder")
        manifest = partition_corpus(args.corpus, data, str(folder), iid_fraction=args.iid_fraction,
                                    seed=args.seed, aspect_columns=columns)
        lines.append(f"partitions of {len(manifest['splits'])} splits -> {folder}")
        summary["partition_dir"] = str(folder)
    if args.report:
        from splits.report import protocol_report, report_markdown

        rep = protocol_report(args.corpus, data, aspect_columns=columns)
        report_json, report_md = output.with_suffix(".report.json"), output.with_suffix(".report.md")
        atomic_files.write_text(report_json, json.dumps(rep, indent=2, ensure_ascii=False, default=str))
        atomic_files.write_text(report_md, report_markdown(rep))
        lines.append(f"report -> {report_json}, {report_md}")
        summary["report"] = [str(report_json), str(report_md)]
    common.emit(args, summary, lines)
    return 0

"""`ctgscore meta`: correlations with human judgments, paired bootstrap significance between
metrics, the metric preference checklist, and the report, from stored scores (never re-scores).

With `--tasks N` (N >= 2) the bootstrap's resample blocks run as N Ray tasks; `--tasks 0` or 1
runs them in this process. The default, `auto`, stays in this process unless rows x resamples
reach `RAY_WORK` (100,000 rows at 1,000 resamples): from `benchmarks/bench_meta.py`, one
process spends about 0.26 ms per row and 1,000 resamples, 2 Ray tasks half that, and starting
Ray costs about 10 s, so Ray pays from roughly 80,000 rows at 1,000 resamples. Either way the
numbers are the same for the same seed.
"""

from __future__ import annotations

import argparse
import time

from ctgscore.cli import common
from scoring.errors import CtgscoreError, InputError, UsageError

LEVELS = ["sample", "document", "system"]
RESAMPLED = ["pearson", "spearman", "kendall", "pairwise_accuracy"]  # meta_eval.correlation.RESAMPLED
METHODS = RESAMPLED + ["soft_pairwise_accuracy", "tie_calibrated_accuracy"]  # meta_eval.correlation.METHODS
RAY_WORK = 100_000 * 1000  # `--tasks auto`: Ray tasks from rows x resamples >= this, this process below
AUTO_TASKS = 2


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "meta", parents=[parent], help="correlations, paired bootstrap, checklist, report",
        description="Meta-evaluation of stored per-row scores against human judgments (docs/meta_eval.md).",
    )
    parser.add_argument("-s", "--scores", required=True,
                        help="scores: the job's output folder or s3:// prefix, a Parquet file, or a checklist CSV")
    parser.add_argument("-o", "--output", required=True, help="report folder (created when missing)")
    parser.add_argument("--human-columns", nargs="+", default=None, metavar="COLUMN",
                        help="human aspects (default: every human_* column)")
    parser.add_argument("--metrics", nargs="+", default=None, metavar="COLUMN",
                        help="metric score columns (default: every numeric score column)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap, the permutation tests and SPA")
    parser.add_argument("--resamples", type=int, default=None,
                        help="bootstrap resamples and permutation trials, SPA's sign flips included (0 = no "
                             "significance, SPA then 1000; default 1000, raised under --correction so that 1/(N+1) is "
                             "at most half of alpha / the pairs of a block)")
    parser.add_argument("--tie-averaging", default="item", choices=["item", "pool"],
                        help="tie-calibrated accuracy: per document then averaged, as WMT24 (item, the default), "
                             "or over all pairs pooled (pool)")
    parser.add_argument("--tasks", default="auto",
                        help=f"Ray tasks for the resamples (0 or 1: in this process; default auto: this process "
                             f"while rows x resamples < {RAY_WORK:,} (100,000 rows at 1,000 resamples, where Ray's "
                             f"~10 s start-up pays), {AUTO_TASKS} Ray tasks from there on); same numbers either way")
    parser.add_argument("--num-cpus", type=common.cpus, default=0.5, help="CPUs per Ray task")
    parser.add_argument("--level", nargs="+", default=["sample"], choices=LEVELS,
                        help="bootstrap level(s): rows (sample) or documents (document, system) are resampled")
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS, help="correlations to report")
    parser.add_argument("--boot-method", default="spearman", choices=RESAMPLED,
                        help="correlation the significance test compares (pairwise_accuracy: document/system level)")
    parser.add_argument("--significance", default="bootstrap", choices=["bootstrap", "bartscore_subsample", "perm_both"],
                        help="metric-vs-metric test: paired bootstrap (two-sided), the BARTScore paper's 80%% "
                             "subsample test, or PERM-BOTH (Deutsch et al. 2021; system level, --resamples trials)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level")
    parser.add_argument("--correction", default="none", choices=["none", "holm", "bh"],
                        help="multiple-comparison correction over each block's metric pairs (Holm, Benjamini-Hochberg)")
    parser.add_argument("--draws", type=int, default=1000, help="draws of the bartscore_subsample test")
    parser.add_argument("--trials", type=int, default=10000,
                        help="approximate randomisation trials of the system comparison")
    parser.add_argument("--no-compare-systems", action="store_true",
                        help="leave out the system comparison and leaderboard")
    parser.add_argument("--no-checklist", action="store_true", help="leave out the metric preference checklist")
    parser.add_argument("--kendall-variant", default="b", choices=["b", "c"])
    parser.add_argument("--pairs", default="given", choices=["given", "ranking"],
                        help="checklist Easy/Hard pairs: stored ones when known, or from the human ranking")
    parser.add_argument("--easy-pairs", nargs="*", default=None, metavar="SYS_A::SYS_B",
                        help="given Easy system pairs (override stored/ranking pairs), e.g. 'M11::M0'")
    parser.add_argument("--hard-pairs", nargs="*", default=None, metavar="SYS_A::SYS_B")
    parser.add_argument("--lower-is-better", nargs="*", default=None, metavar="COLUMN",
                        help="metric columns where lower is better (default: perplexity)")
    parser.add_argument("--format", default="both", choices=["both", "html", "md"],
                        help="report text: self-contained HTML and Markdown (both, the default), or one of them")
    parser.set_defaults(handler=handle)


def parse_pairs(values: list[str], flag_name: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        parts = value.split("::")
        if len(parts) != 2 or not all(parts):
            raise UsageError(f"{flag_name} {value!r}: expected SYSTEM_A::SYSTEM_B")
        pairs.append((parts[0], parts[1]))
    return pairs


def check_pairs(table, flags: dict[str, list[tuple[str, str]]]) -> None:
    """Refuse (exit 2) a given pair that names a system the scores do not have, or pairs a
    system with itself (it was an internal error, or a comparison of nothing)."""
    from scoring.display_names import quoted, quoted_list

    systems = set(table.frame["system"].dropna().astype(str)) if "system" in table.frame else set()
    for flag, pairs in flags.items():
        for a, b in pairs:
            if a == b:
                raise UsageError(f"{flag} {quoted(a)}::{quoted(b)}: a pair of two different systems is expected")
            unknown = [name for name in (a, b) if name not in systems]
            if unknown:
                raise UsageError(f"{flag}: system {quoted(unknown[0])} is not in the scores "
                                 f"(systems: {quoted_list(sorted(systems), 50, quote=False)})")


def read_table(args: argparse.Namespace):
    """The scores as a `meta_eval.io.Table`; a missing path or column is the user's input problem."""
    from meta_eval import io

    try:
        return io.read_table(args.scores, humans=args.human_columns, metrics=args.metrics)
    except InputError as exc:
        named = (args.human_columns or []) + (args.metrics or [])
        if getattr(exc, "missing_column", None) in named:  # a misspelled --metrics/--human-columns: exit 2
            raise UsageError(str(exc)) from None
        raise
    except CtgscoreError:
        raise
    except (KeyError, ValueError) as exc:
        raise InputError(str(exc.args[0]) if exc.args else str(exc)) from exc


def make_runner(tasks: int, num_cpus: float):
    """The runner the statistics fan out with: `tasks` Ray tasks, or this process for 0 or 1."""
    if tasks <= 1:
        from meta_eval.runner import local_runner

        return local_runner
    from ray_jobs.runners import ray_runner

    return ray_runner(tasks, num_cpus=num_cpus)


def run_pipeline(table, args: argparse.Namespace, pairs: str):
    from meta_eval import pipeline

    if args.resamples is None:
        from meta_eval.defaults import resamples_for

        k = len(table.metrics)
        args.resamples = resamples_for(k * (k - 1) // 2, args.alpha, args.correction)
    opts = pipeline.Options(
        methods=args.methods, variant=args.kendall_variant, boot_levels=args.level, boot_method=args.boot_method,
        significance=args.significance, correction=args.correction, alpha=args.alpha, resamples=args.resamples,
        draws=args.draws,
        seed=args.seed, pairs=pairs, run_checklist=not args.no_checklist,
        compare_systems=not args.no_compare_systems, trials=args.trials, tie_averaging=args.tie_averaging,
    )
    tasks = args.tasks if args.tasks != "auto" else (AUTO_TASKS if table.n_input_rows * args.resamples >= RAY_WORK else 0)
    runner = make_runner(tasks, args.num_cpus) if args.resamples > 0 else None
    return pipeline.run_meta(table, opts, runner=runner, progress=common.progress_bars(args))


def handle(args: argparse.Namespace) -> int:
    if args.tasks != "auto":
        try:
            args.tasks = int(args.tasks)
        except ValueError:
            raise UsageError(f"--tasks {args.tasks!r}: a number of Ray tasks, or auto") from None
    if (args.resamples or 0) < 0 or (args.tasks != "auto" and args.tasks < 0) or args.draws < 1 or args.trials < 1:
        raise UsageError("--resamples and --tasks must be >= 0, --draws and --trials >= 1")
    from meta_eval.defaults import check_counts

    check_counts(args.seed, "--seed", **{"--resamples": args.resamples, "--draws": args.draws, "--trials": args.trials})
    started = time.time()
    easy = parse_pairs(args.easy_pairs, "--easy-pairs") if args.easy_pairs is not None else None
    hard = parse_pairs(args.hard_pairs, "--hard-pairs") if args.hard_pairs is not None else None
    common.check_input_path(args.scores, "scores")
    output = common.prepare_output_dir(args.output, "report folder")
    from meta_eval import report  # heavy (pandas, scipy, matplotlib): after the cheap checks
    from meta_eval.row_account import RowAccount

    table = read_table(args)
    if args.lower_is_better is not None:
        common.check_lower_is_better(args.lower_is_better, table.metrics, "metric")
        table.lower_is_better = set(args.lower_is_better)
    pairs = args.pairs
    if easy is not None or hard is not None:
        check_pairs(table, {"--easy-pairs": easy or [], "--hard-pairs": hard or []})
        table.easy_pairs, table.hard_pairs = easy or [], hard or []
        pairs = "given"
    if not table.metrics:
        raise InputError(f"scores {args.scores}: no metric columns found (pass --metrics)")
    results = run_pipeline(table, args, pairs)
    paths = report.write_report(results, output, fmt=args.format, scores=args.scores)
    elapsed = time.time() - started
    summary = {"ok": True, "command": "meta", "output": str(output), "rows": table.n_input_rows,
               "error_rows": table.n_error_rows, "skipped_rows": table.n_skipped_rows, "metrics": list(table.metrics), "humans": list(table.humans),
               "rows_in": (results.input.rows_used or 0) + sum(results.input.rows_left_out.values()),
               "rows_used": results.input.rows_used, "rows_left_out": dict(results.input.rows_left_out),
               **({"rows_left_out_first": dict(results.input.rows_left_out_first)}
                  if results.input.rows_left_out_first else {}),
               "files": {name: str(path) for name, path in paths.items()}, "wall_s": round(elapsed, 3)}
    lines = [f"meta: {table.n_input_rows} rows ({table.n_error_rows} with an error in some metric run, "
             f"{table.n_skipped_rows} skipped by some metric run), "
             f"{len(table.metrics)} metrics x {len(table.humans)} human aspects, {elapsed:.1f} s -> {output}"]
    lines += RowAccount.lines(results.input.rows_used, results.input.rows_left_out,
                              first=results.input.rows_left_out_first)
    if table.not_numeric:
        summary["columns_not_numeric"] = dict(table.not_numeric)
        lines.append("  not metrics (no numbers; name one with --metrics to see why): "
                     + ", ".join(f"{name} ({dtype})" for name, dtype in table.not_numeric.items()))
    plots = [path for path in paths.values() if str(path).endswith(".png")]
    lines += [f"  {name}: {path}" for name, path in paths.items() if not str(path).endswith(".png")]
    if plots:
        lines.append(f"  {len(plots)} plots under {output}")
    common.emit(args, summary, lines)
    return 0

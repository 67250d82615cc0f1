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
from meta_eval.defaults import DEFAULT_RESAMPLES
from scoring.console_text import LINE_LIMIT
from scoring.errors import InputError, UsageError

TESTS = ["bootstrap", "randomization"]
FORMATS = {".md": "md", ".markdown": "md", ".csv": "csv", ".json": "json", ".html": "html", ".htm": "html"}


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
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                        help=f"paired bootstrap resamples (default {DEFAULT_RESAMPLES}, as meta)")
    parser.add_argument("--trials", type=int, default=10000, help="approximate randomisation trials")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level for `better`")
    parser.add_argument("--lower-is-better", nargs="*", default=None, metavar="COLUMN",
                        help="columns where lower is better (default: perplexity columns)")
    parser.add_argument("--tasks", type=int, default=0,
                        help="Ray tasks reading the files and running the resamples (0 or 1: in this process); "
                             "same numbers either way")
    parser.add_argument("--num-cpus", type=common.cpus, default=0.5, help="CPUs per Ray task")
    parser.add_argument("-o", "--output", default=None,
                        help="write the tables here (.md, .csv, .json or .html, the leaderboard page; "
                             "default: Markdown on stdout)")
    parser.add_argument("--format", choices=["md", "csv", "json", "html"], default=None,
                        help="output format (default: from the output's suffix, else md)")
    parser.add_argument("--previous", default=None, metavar="JSON",
                        help="the previous refresh's leaderboard JSON: the page shows what moved since")
    parser.set_defaults(handler=handle)


def output_format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    if args.output:
        suffix = pathlib.Path(args.output).suffix.lower()
        if suffix not in FORMATS:
            raise UsageError(f"-o {args.output}: cannot tell the format from {suffix or 'no suffix'!r}; "
                             "pass --format md|csv|json|html")
        return FORMATS[suffix]
    return "md"


def _score_fields(label: str, files: list[str]) -> list[tuple[str, bool]]:
    """(column, numeric and not boolean) for the score columns of a run (its first file's schema)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scoring import schema
    from scoring.s3_filesystem import url_to_fs

    fs, root = url_to_fs(files[0])
    try:
        with fs.open(root, "rb") as handle:
            fields = pq.read_schema(handle)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is named
        raise InputError(f"{files[0]}: cannot read it as Parquet ({type(exc).__name__}: {exc})") from None
    return [(f.name, (pa.types.is_integer(f.type) or pa.types.is_floating(f.type)))
            for f in fields if schema.is_score_column(f.name) and f.name != schema.ERROR]


def plan_columns(path: str, columns: list[str] | None):
    """The metric runs under `path`, a `meta_eval.partials.PartialSpec`-ready mapping of the
    wanted score columns (named as `load_scores` names them), and the (label, file) items."""
    from scoring.job_output import output_names, run_files

    runs = [(label, files) for label, files in run_files(path) if files]
    fields = {label: _score_fields(label, files) for label, files in runs}
    names = output_names((label, [name for name, _ in cols]) for label, cols in fields.items())
    named = {names[(label, name)]: (label, name, numeric) for label, cols in fields.items() for name, numeric in cols}
    numeric = [out for out, (_, _, ok) in named.items() if ok]
    columns = list(dict.fromkeys(columns or numeric))  # a column named twice is compared once (twice, it was skipped)
    if not columns:
        raise InputError(f"scores {path}: no numeric score columns to compare on")
    missing = [c for c in columns if c not in named]
    if missing:
        from scoring.display_names import quoted, quoted_list

        raise UsageError(f"--columns: scores {path} have no column {quoted(missing[0])} "
                         f"(score columns: {quoted_list(numeric)})")
    wanted: dict[str, list] = {}
    for out in columns:
        label, name, _ = named[out]
        wanted.setdefault(label, []).append((name, out))
    items = [(label, f) for label, files in runs if label in wanted for f in files]
    return columns, {label: tuple(pairs) for label, pairs in wanted.items()}, items


def render(comparisons, fmt: str, previous: dict | None = None, rows=None, pairs_in: str | None = None) -> str:
    """The comparisons as `fmt`; `rows` (a `RowAccount`) adds the rows left out of every group:
    a line under the tables (md, html), `rows` in the JSON (CSV: one row per system only).
    `pairs_in` (a `meta_eval.page_pairs.IN_*` text; default `compare`'s own JSON) names the
    output holding every pair, for a page that shows only some (more than 50 systems)."""
    from meta_eval import compare, page_pairs

    pairs_in = pairs_in or page_pairs.IN_COMPARE

    if fmt == "csv":
        return compare.leaderboard_csv(compare.leaderboard(comparisons))
    if fmt == "json":
        return compare.comparisons_json(comparisons, **({"rows": rows.as_dict()} if rows is not None else {}))
    if fmt == "html":
        from meta_eval.report.leaderboard import leaderboard_html

        return leaderboard_html(comparisons, previous=previous, rows=rows, pairs_in=pairs_in)
    from scoring.display_names import cut_note

    text = compare.comparison_markdown(comparisons, pairs_in=pairs_in)
    if rows is not None and rows.line():
        from scoring.tables import markdown_text

        text += f"\n**Rows {markdown_text(rows.line())}.**\n"
    return text + cut_note(text, "`compare -o FILE.json` (or `.csv`)")


def compare_grids(grids, lower: set[str], options: dict) -> tuple[list, list[str]]:
    """`meta_eval.compare.grid_comparison` for every (dataset, column) grid; the grids that
    cannot be compared (one system there, no complete unit) are skipped, one reason line per
    dataset (its columns grouped by reason). Returns (comparisons, skipped lines)."""
    from meta_eval import compare
    from scoring.display_names import quoted, quoted_list

    comparisons, reasons = [], {}
    for grid in grids:
        try:
            comparisons.append(compare.grid_comparison(grid, lower_is_better=grid.column in lower, **options))
        except InputError as exc:
            reason = str(exc).split(f"{compare.where_of(grid.dataset, grid.column)}: ", 1)[-1]
            reasons.setdefault(grid.dataset, {}).setdefault(reason, []).append(grid.column)
    skipped = []
    for dataset, by_reason in reasons.items():
        parts = [f"{len(cols)} column{'s' if len(cols) > 1 else ''} ({quoted_list(cols, quote=False)}): {reason}"
                 for reason, cols in by_reason.items()]
        skipped.append(f"dataset {quoted(dataset)}: " + "; ".join(parts))
    return comparisons, skipped


def compare_scores(path: str, columns: list[str] | None, lower_is_better: list[str] | None, options: dict,
                   tasks: int = 0, num_cpus: float = 0.5):
    """Read only the needed columns of the dump under `path` file by file (in Ray tasks when
    `tasks` > 1), fold the per-(dataset, unit, system) partial sums, and compare the systems of
    every (dataset, column). Returns (comparisons, skipped lines, columns, accumulator, datasets)."""
    from ctgscore.cli.meta import make_runner
    from meta_eval.io import default_lower_is_better
    from meta_eval.partials import PartialSpec, accumulate

    columns, runs, items = plan_columns(path, columns)
    unit = options.get("unit", "doc_id")
    if unit in ("system", "dataset") or unit in columns:
        from scoring.display_names import quoted

        raise UsageError(f"--unit {quoted(unit)}: the unit pairs rows across systems, so it cannot be the system, "
                         "dataset or a compared score column (give the document id column, e.g. doc_id)")
    spec = PartialSpec(runs=runs, unit=unit)
    runner = make_runner(tasks, num_cpus)
    try:
        acc = accumulate(spec, items, runner=runner, width=2 * max(1, tasks))
    except InputError as exc:
        if unit != "doc_id" and getattr(exc, "missing_column", None) == unit:  # a column the user named, not
            raise UsageError(f"--unit: {exc}") from None  # the default, which a dump may lack (exit 1)
        raise
    systems = options.get("systems")
    if systems:
        unknown = [s for s in systems if s not in acc.systems]
        if unknown:
            from scoring.display_names import quoted_list

            raise UsageError(f"--systems: {quoted_list(unknown)} not found in {path} "
                             f"(systems: {quoted_list(acc.all_systems(), 50, quote=False)})")
    if lower_is_better is not None:
        common.check_lower_is_better(lower_is_better, columns)
    lower = lower_is_better if lower_is_better is not None else default_lower_is_better(columns) & set(columns)
    grids = acc.grids()
    comparisons, skipped = compare_grids(grids, set(lower), dict(options, runner=runner))
    return comparisons, skipped, columns, acc, sorted({g.dataset for g in grids})


def handle(args: argparse.Namespace) -> int:
    if args.resamples < 1 or args.trials < 1 or args.tasks < 0:
        raise UsageError("--resamples and --trials must be >= 1 and --tasks >= 0")
    from meta_eval.defaults import check_counts

    check_counts(args.seed, "--seed", **{"--resamples": args.resamples, "--trials": args.trials})
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha}: expected a number between 0 and 1")
    fmt = output_format(args)
    output = common.check_output_file(args.output) if args.output else None
    common.check_input_path(args.scores, "scores")
    previous = read_previous(args.previous) if getattr(args, "previous", None) else None
    from meta_eval import compare
    from meta_eval.results import to_json_dict

    options = dict(systems=args.systems, unit=args.unit, tests=args.tests, n_resamples=args.resamples,
                   trials=args.trials, seed=args.seed, alpha=args.alpha)
    comparisons, skipped, columns, acc, datasets = compare_scores(args.scores, args.columns, args.lower_is_better, options,
                                                        args.tasks, args.num_cpus)
    if not comparisons:
        raise InputError(f"scores {args.scores}: nothing to compare ({skipped[0]})")
    if previous is not None:
        check_previous_matches(previous, comparisons, args.previous)
    rows = acc.account
    text = render(comparisons, fmt, previous, rows)
    if output is not None:
        from meta_eval.report.files import write_text

        write_text(output, text)  # a symlink at the output is replaced, not followed
    board = compare.leaderboard(comparisons)
    summary = {"ok": True, "command": "compare", "output": str(output) if output else None, "format": fmt,
               "rows": acc.input_rows, "rows_read": acc.rows, "error_rows": acc.error_rows, "cells": acc.n_cells,
               "rows_in": rows.rows_in, "rows_used": rows.rows_used, "rows_left_out": dict(rows.left_out),
               **({"rows_left_out_first": dict(rows.first)} if rows.first else {}),
               "leaderboard": to_json_dict(board), "comparisons": to_json_dict(list(comparisons)), "skipped": skipped}
    limit = LINE_LIMIT
    if output is None:  # the document itself on stdout: printed whole, line by line by the console rule
        if fmt == "json":
            from scoring.console_text import console_json

            text = console_json(text)  # JSON escapes, so the printed document still parses
        lines, limit = text.rstrip("\n").split("\n"), None
    else:
        lines = [f"compare: {len(comparisons)} of {len(datasets) * len(columns)} comparisons "
                 f"({len(datasets)} dataset{'s' if len(datasets) > 1 else ''} x {len(columns)} "
                 f"column{'s' if len(columns) > 1 else ''}: {', '.join(columns)}) from {acc.input_rows} rows -> {output}"]
        for comp in comparisons:
            ranking = ", ".join(f"{s.rank}. {s.system} {s.mean:.4g}" for s in comp.systems)
            lines.append(f"  {comp.dataset} / {comp.column}: {ranking}")
    lines += [f"  skipped: {reason}" for reason in skipped]
    if rows.line() and (output is not None or fmt == "csv"):  # md, html and json on stdout carry it themselves
        lines.append(f"  left out: {rows.line()}")
    common.emit(args, summary, lines, limit)
    return 0


def read_previous(path: str, label: str = "--previous") -> dict:
    """A previous leaderboard: any leaderboard JSON (`meta_eval.compare.leaderboard_document`:
    the meta report's `leaderboard.json`, `compare -o board.json`, the leaderboard command's)
    or the meta report's `results.json` (its system comparisons), as a dict with a
    `leaderboard` list of (dataset, column, system, rank) rows. A file that is not there, or
    not one of these, is a usage error (exit 2): the flag names the wrong file. `label` names
    the file in errors (the `leaderboard` command reads its own folder's board, not a flag)."""
    import os

    if not os.path.isfile(path):
        raise UsageError(f"{label} {path}: {'not a regular file' if os.path.lexists(path) else 'no such file'}")
    from scoring.json_files import UnreadableJson, read_json

    try:
        data = read_json(path)
    except (OSError, UnreadableJson) as exc:  # not JSON, not UTF-8 (a Parquet file), nested past the reader
        reason = exc if isinstance(exc, UnreadableJson) else type(exc).__name__
        raise UsageError(f"{label} {path}: not a leaderboard JSON (cannot read it as JSON: "
                         f"{reason}); give the leaderboard.json or results.json of an earlier run") from None
    if isinstance(data, dict) and isinstance(data.get("leaderboard"), list):
        return {**data, "leaderboard": _checked_rows(data["leaderboard"], path, "leaderboard", label)}
    rows = _results_leaderboard(data)
    if rows is None:
        raise UsageError(f"{label} {path}: not a leaderboard JSON (no 'leaderboard' list and no system comparisons; "
                         "write one with `ctgscore compare -o board.json`, `ctgscore leaderboard` or `ctgscore meta`)")
    return {"leaderboard": _checked_rows(rows, path, "system comparisons", label)}


#: the largest rank a previous leaderboard may hold (a board of a billion systems is no board)
MAX_RANK = 10**9


def _checked_rows(rows: list, path: str, where: str, label: str = "--previous") -> list[dict]:
    """The rows of a previous leaderboard, each checked as this command wrote it: an object
    whose `dataset`, `column` and `system` are strings and whose `rank` is a whole number >= 1
    (at most `MAX_RANK`; a digit string is read as one), one row per (dataset, column, system). A file edited into
    anything else is refused naming the row and field, rather than failing the page or moving
    a system by a rank nobody computed."""
    from scoring.display_names import quoted

    checked, seen = [], {}
    for index, row in enumerate(rows):
        at = f"{label} {path}: {where}[{index}]"
        if not isinstance(row, dict):
            raise UsageError(f"{at}: expected an object, got {type(row).__name__}")
        for key in ("dataset", "column", "system"):
            if not isinstance(row.get(key), str):
                raise UsageError(f"{at}.{key}: expected a string, got {_kind(row.get(key))}")
        rank = row.get("rank")
        if isinstance(rank, str) and rank.isascii() and rank.isdigit() and len(rank) <= 18:
            rank = int(rank)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= MAX_RANK:
            raise UsageError(f"{at}.rank: expected a whole number from 1 to {MAX_RANK:,}, got {_kind(rank)}")
        key = (row["dataset"], row["column"], row["system"])
        if key in seen:
            raise UsageError(f"{at}: system {quoted(row['system'])} of {quoted(row['dataset'])} / {quoted(row['column'])} "
                             "is ranked twice "
                             f"(also {where}[{seen[key]}])")
        seen[key] = index
        checked.append({**row, "rank": rank})
    return checked


def _kind(value) -> str:
    """A value as an error names it: its type, and a short repr for scalars."""
    if isinstance(value, (dict, list)):
        return f"{type(value).__name__} of {len(value)}"
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


def _results_leaderboard(data) -> list[dict] | None:
    """The leaderboard rows of a meta report's `results.json` (`groups[].systems[]`: one system
    comparison per dataset and column), or None when `data` is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
        return None
    rows = []
    for group in data["groups"]:
        for comp in (group.get("systems") or []) if isinstance(group, dict) else []:
            if not isinstance(comp, dict) or not isinstance(comp.get("systems"), list):
                continue
            rows += [{"dataset": comp.get("dataset"), "column": comp.get("column"), "system": row.get("system"),
                      "rank": row.get("rank"), "mean": row.get("mean")}
                     for row in comp["systems"] if isinstance(row, dict) and row.get("rank") is not None]
    return rows or None


def check_previous_matches(previous: dict, comparisons, path: str) -> None:
    """Refuse a previous leaderboard that shares no dataset (or no score column of a shared
    dataset) with this one: every system would show as "new"."""
    from scoring.display_names import quoted_list

    def named(values) -> str:
        return quoted_list(sorted((str(v) for v in values)))

    rows = [row for row in previous.get("leaderboard", []) if isinstance(row, dict)]
    if not rows:
        return
    before = {(row.get("dataset"), row.get("column")) for row in rows}
    now = {(comp.dataset, comp.column) for comp in comparisons}
    if before & now:
        return
    before_sets, now_sets = {d for d, _ in before}, {d for d, _ in now}
    if not before_sets & now_sets:
        raise UsageError(f"--previous {path}: a leaderboard of dataset {named(before_sets)}, these scores are of dataset "
                         f"{named(now_sets)}; give the previous leaderboard of the same dataset")
    shared = before_sets & now_sets
    raise UsageError(f"--previous {path}: ranks columns {named({c for d, c in before if d in shared})} of dataset "
                     f"{named(shared)}, these are {named({c for d, c in now if d in shared})}; give the previous "
                     "leaderboard of the same columns")

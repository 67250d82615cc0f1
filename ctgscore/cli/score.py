"""`ctgscore score`: score a local Parquet file (or folder) in this process with one metric.

Rows out == rows in: each output row has the carried columns, the metric's score columns,
`error`, `warning`, `skipped`, `signature` and `row_key` (docs/schema.md). The summary line
gives the counts (rows with an error, skipped, with a warning) and each score column's mean over the rows that have it; a metric that applies
to no row of the file is a usage error (exit 2, `scoring.applicability`).
"""

from __future__ import annotations

import argparse
import sys

from ctgscore.cli import common
from scoring.display_names import quoted
from scoring.errors import InputError


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "score", parents=[parent], help="score a local Parquet file in-process with one metric",
        description="Canonical rows in; carried columns, score columns, error, warning, signature and row_key "
                    "out; rows out == rows in. `ctgscore metrics` lists the metrics and their parameters.",
    )
    parser.add_argument("-m", "--metric", required=True, help="registered metric name (see `ctgscore metrics`)")
    common.add_param_options(parser)
    parser.add_argument("-i", "--input", required=True, help="input Parquet file or folder of shards")
    parser.add_argument("-o", "--output", required=True, help="output Parquet file (its folder must exist)")
    parser.add_argument("--chunk-rows", type=int, default=256, help="rows handed to the metric at a time")
    common.add_limit_option(parser)
    common.add_error_rate_option(parser, common.DEFAULT_MAX_ERROR_RATE,
                                 f"default {common.DEFAULT_MAX_ERROR_RATE:g}; 1 never fails on row errors")
    parser.set_defaults(handler=handle)


def read_input(path: str):
    """The input Parquet (a file, or a folder's shards in path order) as one Arrow table; an
    unreadable file is an `InputError` naming it (an inflating one is refused before, by
    `check_inflation`). A column of Arrow type null (pandas writes an all-None column so) takes
    its canonical type, so a shard where it is all null joins the others (`schema.typed_nulls`).
    Of a folder, each shard is checked on its own first (`check_shard`), so an error names the
    shard and its own row, never a row number of the shards joined: a carried column of another
    type, a bad id, a column whose type differs from the shards before it, an id in two shards."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scoring.schema import typed_nulls

    common.check_input_path(path)
    files = input_files(path)
    tables = []
    for file in files:
        try:
            tables.append(typed_nulls(pq.read_table(file)))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InputError(f"input {file}: cannot read it as Parquet ({exc})") from None
    if not tables:
        raise InputError(f"input {path}: no Parquet shard in it (*.parquet)")
    if len(tables) > 1:
        for file, table in zip(files, tables):
            check_shard(table, file)
    try:
        joined = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InputError(_disagreeing_shard(tables, files) or f"input {path}: its shards' columns do not agree ({exc})") from None
    if len(tables) > 1 and _repeats_an_id(joined):  # the Python walk only where some id repeats
        _check_ids_across(tables, files)
    return joined


def _repeats_an_id(table) -> bool:
    """Whether some id occurs twice in `table` (each shard's ids are already checked)."""
    import pyarrow.compute as pc

    ids = table.column("id")
    return len(pc.unique(ids)) != len(ids)


def check_shard(table, file: str) -> None:
    """One shard of a folder: its `id` column present and usable (`schema.id_problem`, rows
    counted in this shard) and its carried columns of their canonical types; an `InputError`
    naming the shard otherwise."""
    from scoring import schema

    if schema.ID not in table.column_names:
        raise InputError(f"input {file}: no column 'id' (every shard needs one)")
    wrong = schema.wrong_type([n for n in table.column_names if n == schema.ID or schema.is_carried(n)], table.schema)
    if wrong is not None:
        raise InputError(f"input {file}: column {quoted(wrong[0])} is {wrong[1]}, expected {wrong[2]}")
    reason = schema.id_problem(table.column(schema.ID).combine_chunks())
    if reason is not None:
        raise InputError(f"input {file}: {reason}")


def _disagreeing_shard(tables, files) -> str | None:
    """The first shard whose columns cannot join those of the shards before it, named with the
    column and both types (None when each joins: the caller keeps Arrow's own message)."""
    import pyarrow as pa

    merged = tables[0].schema
    for file, table in zip(files[1:], tables[1:]):
        try:
            merged = pa.unify_schemas([merged, table.schema], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            clash = [f"{quoted(name)} is {table.schema.field(name).type} here, {merged.field(name).type} in {files[0]}"
                     + (" or a later shard" if len(files) > 2 else "")
                     for name in table.schema.names if name in merged.names and table.schema.field(name).type != merged.field(name).type]
            return f"input {file}: column {clash[0] if clash else exc} (the shards of a folder must agree)"
    return None


def _check_ids_across(tables, files) -> None:
    """An id in two shards of a folder: an `InputError` naming both shards and rows (one output
    file holds one row per id; the job keeps both rows, keyed by shard)."""
    first: dict[str, tuple[str, int]] = {}
    for file, table in zip(files, tables):
        for row, value in enumerate(table.column("id").to_pylist()):
            if value in first:
                where, at = first[value]
                raise InputError(f"input {file}: row {row}: duplicate id {quoted(value)}, also row {at} of {where} "
                                 "(ids must be unique; `ctgscore run` keeps one id in several shards apart)")
            first[value] = (file, row)


def input_files(path: str) -> list[str]:
    """The Parquet files of `path`: itself, or a folder's data files (`schema.is_data_file`:
    `*.parquet` not starting with `_` or `.`) in path order; a local one that is not a regular
    file (a named pipe, a device, a symlink to one) is an InputError naming it."""
    import os

    from scoring.errors import InputError
    from scoring.local_files import refuse_not_regular
    from scoring.schema import is_data_file

    if not os.path.isdir(path):
        files = [path]
    else:
        files = []
        for folder, folders, names in os.walk(path):
            folders[:] = [name for name in folders if not name.startswith((".", "_"))]  # bookkeeping, as Arrow skips it
            files += [os.path.join(folder, name) for name in names if is_data_file(name)]
    if "://" not in path:  # a named pipe would block the read, a device never end
        for file in files:
            refuse_not_regular(file, "input ", InputError)
    return sorted(files)


def check_inflation(path: str, max_inflation: float) -> None:
    """Every Parquet file of `path` (a file or a folder of shards) read by its footer only:
    one that declares absurdly more bytes than it holds is an `InputError` naming both sizes."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from scoring.limits import inflation_problem

    common.check_input_path(path)
    for file in input_files(path):
        try:
            with open(file, "rb") as handle:
                metadata = pq.ParquetFile(handle).metadata
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InputError(f"input {file}: cannot read it as Parquet ({exc})") from None
        problem = inflation_problem(metadata, os.path.getsize(file), max_inflation)
        if problem is not None:
            raise InputError(f"input {file}: {problem}")


def check_columns(table, metric, path: str) -> list[str]:
    """The input columns the run reads (metric columns + carried); `InputError` naming a missing
    `id` or `text`, a column of the wrong type or a bad id (`scoring.schema.id_problem`);
    `NotApplicable` (exit 2) when no score of the metric can apply to a row of these columns,
    naming the column it needs and the closest names present. A column only some scores need
    may be absent: those scores are left out (`skipped` says so)."""
    from scoring import applicability, schema

    names = table.column_names
    for column in schema.REQUIRED_COLUMNS:
        if column not in names:
            raise InputError(f"input {path}: no column {column!r} (metric {metric.name!r} needs "
                             f"{', '.join(metric.required_columns)}; have {', '.join(names)})")
    applicability.check_columns(metric.name, applicability.score_needs_by_label(metric), names, f"absent from {path}")
    wanted = set(metric.read_columns()) | {schema.ID}
    selected = [n for n in names if n in wanted or schema.is_carried(n)]
    wrong = schema.wrong_type(selected, table.schema)
    if wrong is not None:
        raise InputError(f"input {path}: column {quoted(wrong[0])} is {wrong[1]}, expected {wrong[2]}")
    reason = schema.id_problem(table.column(schema.ID).combine_chunks())
    if reason is not None:
        raise InputError(f"input {path}: {reason}")
    return selected


def score_table(metric, table, chunk_rows: int = 256, progress: bool = True):
    """Score an Arrow table with a row metric; returns the output table (same row count, same
    order). Values that cannot be decoded (invalid UTF-8) become their row's error."""
    import pyarrow as pa
    from tqdm import tqdm

    from scoring.schema import rows_from_table

    parts = []
    from scoring.console_text import console_text

    with tqdm(total=table.num_rows, desc=console_text(metric.name, 60), unit="row", disable=not progress, file=sys.stderr) as bar:
        for offset in range(0, table.num_rows, chunk_rows):
            rows, decode_errors = rows_from_table(table.slice(offset, chunk_rows))
            results = [metric.precheck(row, error) for row, error in zip(rows, decode_errors)]
            clean = [i for i, result in enumerate(results) if result is None]
            scored = metric.score_rows([rows[i] for i in clean])
            for index, result in zip(clean, scored):
                results[index] = result
            parts.append(metric.output_table(rows, results))
            bar.update(len(rows))
    if not parts:
        return metric.output_table([], [])
    output = pa.concat_tables(parts)
    if output.num_rows != table.num_rows:
        raise RuntimeError(f"{output.num_rows} output rows for {table.num_rows} input rows")
    return output


def handle(args: argparse.Namespace) -> int:
    from scoring.errors import UsageError
    from scoring.registry import check_params

    common.check_rate(args.max_error_rate)
    if args.chunk_rows < 1:
        raise UsageError(f"--chunk-rows {args.chunk_rows}: expected a positive number")
    params = common.collect_params(args)
    check_params(args.metric, params)
    limits, max_inflation = common.limits_from(args)
    common.check_not_input(args.output, args.input)
    output = common.check_output_file(args.output)
    check_inflation(args.input, max_inflation)
    table = read_input(args.input)
    metric = common.build_metric(args.metric, params)
    metric.row_limits = limits
    table = table.select(check_columns(table, metric, args.input))
    result = score_table(metric, table, args.chunk_rows, progress=common.progress_bars(args))
    common.write_parquet_atomic(result, output)
    errors = result.num_rows - result.column("error").null_count
    warned = result.num_rows - result.column("warning").null_count  # scored, with a note (truncation, special tokens)
    counts = skip_counts(result, metric.output_columns)
    skipped = counts["skipped"]  # rows the metric does not apply to (no score at all)
    problem = common.error_rate_message(f"metric {metric.name}", errors, result.num_rows, args.max_error_rate)
    if result.num_rows and skipped == result.num_rows:
        from scoring.applicability import NotApplicable, no_row_message

        raise NotApplicable(no_row_message(metric.name, result.num_rows, counts["reasons"]))
    reasons = common.error_reasons(result)
    means = score_means(result, metric.output_columns)
    summary = {"ok": problem is None, "command": "score", "metric": metric.name, "output": str(output),
               "rows": result.num_rows, "errors": errors, "skipped": skipped, "partial": counts["partial"], "warnings": warned,
               "skip_reasons": counts["reasons"], "error_reasons": reasons, "means": means,
               "max_error_rate": args.max_error_rate, "signature": metric.signature_string()}
    partial = f", {counts['partial']} with some scores left out" if counts["partial"] else ""
    partial += f", {warned} with a warning" if warned else ""
    lines = [f"score: {metric.name}: {result.num_rows} rows, {errors} with an error, {skipped} skipped{partial}; "
             f"{mean_text(means)} -> {output}"]
    if common.progress_enabled(args):  # --no-progress: the summary lines only
        lines += [f"  skipped: {count} x {reason}" for reason, count in counts["reasons"].items()]
        lines += common.reason_lines(reasons)
    common.emit(args, summary, lines)
    if problem:
        common.print_error(problem)
        return 1
    return 0


def skip_counts(result, score_columns) -> dict:
    """Rows skipped whole (no score at all), rows with some scores left out, and the rows per
    `skipped` reason (most frequent first)."""
    import pyarrow.compute as pc

    reasons = result.column("skipped")
    errors_null = pc.is_null(result.column("error"))
    no_score = errors_null
    for column in score_columns:
        no_score = pc.and_(no_score, pc.is_null(result.column(column)))
    has_reason = pc.is_valid(reasons)
    skipped = pc.sum(pc.and_(has_reason, no_score)).as_py() or 0
    with_reason = reasons.drop_null().to_pylist()
    counted: dict[str, int] = {}
    for reason in with_reason:
        counted[reason] = counted.get(reason, 0) + 1
    return {"skipped": skipped, "partial": len(with_reason) - skipped,
            "reasons": dict(sorted(counted.items(), key=lambda item: -item[1]))}


def score_means(result, score_columns) -> dict[str, dict]:
    """Per score column: the mean over the rows that have it, and how many do (as sacreBLEU
    and comet-score print the score beside the counts)."""
    import pyarrow.compute as pc

    means = {}
    for column in score_columns:
        values = result.column(column)
        count = len(values) - values.null_count
        mean = pc.mean(values).as_py() if count else None
        means[column] = {"mean": mean, "rows": count}
    return means


def mean_text(means: dict[str, dict]) -> str:
    """`mean bartscore_s_h -3.2104 (80 rows), ...` (`n/a` for a column no row has)."""
    parts = [f"{column} {value['mean']:.4f} ({value['rows']} rows)" if value["mean"] is not None else f"{column} n/a (0 rows)"
             for column, value in means.items()]
    return "mean " + ", ".join(parts)

"""`ctgscore constraints convert|score|report`: CoDI-Eval instruction sets and responses to
canonical rows, in-process scoring with the `codi` metric, and the CoDI report.

    ctgscore constraints convert --instructions DIR [--responses SYSTEM=DIR ...] -o rows.parquet
    ctgscore constraints score -i rows.parquet -o scores.parquet [--params JSON|@file]
    ctgscore constraints report -i rows.parquet --scores scores.parquet -o REPORT_DIR

The same scoring runs in the Ray job as metric `codi` (`{name: codi, params: {...}}`).
"""

from __future__ import annotations

import argparse

from ctgscore.cli import common
from scoring.errors import CtgscoreError, InputError, UsageError


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "constraints", parents=[parent], help="CoDI-Eval constraint scoring (convert, score, report)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    steps = parser.add_subparsers(dest="step", required=True, metavar="STEP")

    convert = steps.add_parser("convert", parents=[parent], help="instruction sets (+ responses) -> canonical Parquet")
    convert.add_argument("--instructions", required=True, help="folder with <task>_lite.jsonl files")
    convert.add_argument("--responses", action="append", default=[], metavar="SYSTEM=DIR",
                         help="responses of one system: DIR/<task>.jsonl or DIR/<task>/generation.jsonl (repeatable)")
    convert.add_argument("--codi-tasks", nargs="+", default=None, metavar="TASK",
                         help="subset of CoDI tasks (default: all six)")
    convert.add_argument("--limit", type=int, default=None, help="first N instructions of each task only")
    convert.add_argument("-o", "--output", required=True, help="output Parquet file (its folder must exist)")
    convert.set_defaults(handler=_guarded(handle_convert))

    score = steps.add_parser("score", parents=[parent], help="score canonical rows in-process with metric 'codi'")
    score.add_argument("-i", "--input", required=True, help="canonical Parquet file or folder")
    score.add_argument("-o", "--output", required=True, help="output scores Parquet file (its folder must exist)")
    common.add_param_options(score)
    score.add_argument("--chunk-rows", type=int, default=512, help="rows handed to the metric at a time")
    common.add_limit_option(score)
    common.add_error_rate_option(score, common.DEFAULT_MAX_ERROR_RATE,
                                 f"default {common.DEFAULT_MAX_ERROR_RATE:g}")
    score.set_defaults(handler=_guarded(handle_score))

    report = steps.add_parser("report", parents=[parent], help="accuracies, CoDI score and Self-BLEU -> JSON + Markdown")
    report.add_argument("-i", "--input", required=True, help="canonical Parquet (constraint, text, system)")
    report.add_argument("--scores", required=True, help="scores Parquet (id, codi_success, codi_toxicity, error)")
    report.add_argument("-o", "--output", required=True, help="report folder (created when missing)")
    report.add_argument("--no-self-bleu", action="store_true", help="skip Self-BLEU")
    report.add_argument("--self-bleu", choices=["nltk", "sacrebleu"], default="nltk",
                        help="Self-BLEU as CoDI-Eval computes it (nltk, default) or with sacreBLEU")
    report.add_argument("--toxicity-threshold", type=float, default=0.5,
                        help="a detoxic response passes when every toxicity score is below this")
    report.set_defaults(handler=_guarded(handle_report))


def _guarded(handler):
    """Value errors of the CoDI modules as `InputError` (the converter raises one already)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except CtgscoreError:
            raise
        except ValueError as exc:
            if type(exc).__module__.startswith("scoring.codi"):
                raise InputError(str(exc)) from exc
            raise

    return run


def handle_convert(args: argparse.Namespace) -> int:
    from scoring.codi import TASKS, convert

    output = common.check_output_file(args.output)
    common.check_input_path(args.instructions, "instructions")
    tasks = args.codi_tasks or list(TASKS)
    for task in tasks:
        try:
            convert.canonical_task(task)
        except ValueError as exc:
            raise UsageError(f"--codi-tasks: {exc}") from None
    rows = []
    if not args.responses:
        rows = convert.convert_dir(args.instructions, None, None, tasks, limit=args.limit)
    for system, directory in common.parse_assignments(args.responses, "--responses").items():
        common.check_input_path(directory, f"responses of {system}")
        rows.extend(convert.convert_dir(args.instructions, directory, system, tasks, limit=args.limit))
    convert.write_parquet(rows, output)
    common.emit(args, {"ok": True, "command": "constraints convert", "output": str(output), "rows": len(rows)},
                f"constraints convert: {len(rows)} rows -> {output}")
    return 0


def handle_score(args: argparse.Namespace) -> int:
    from ctgscore.cli.score import check_columns, check_inflation, read_input, score_table
    from scoring.registry import check_params

    common.check_rate(args.max_error_rate)
    params = common.collect_params(args)
    check_params("codi", params)
    limits, max_inflation = common.limits_from(args)
    common.check_not_input(args.output, args.input)
    output = common.check_output_file(args.output)
    check_inflation(args.input, max_inflation)
    table = read_input(args.input)
    metric = common.build_metric("codi", params)
    metric.row_limits = limits
    table = table.select(check_columns(table, metric, args.input))
    result = score_table(metric, table, args.chunk_rows, progress=common.progress_bars(args))
    common.write_parquet_atomic(result, output)
    errors = result.num_rows - result.column("error").null_count
    problem = common.error_rate_message("metric codi", errors, result.num_rows, args.max_error_rate)
    common.emit(args, {"ok": problem is None, "command": "constraints score", "output": str(output),
                       "rows": result.num_rows, "errors": errors, "signature": metric.signature_string()},
                f"constraints score: {result.num_rows} rows, {errors} with an error -> {output}")
    if problem:
        common.print_error(problem)
        return 1
    return 0


def join_scores(rows: list[dict], scores: list[dict], scores_path: str, input_path: str = "the input") -> list[dict]:
    """Score rows in the order of `rows`, matched by id (the Ray job may reorder them). An id on
    two rows, or two score rows (a job's input may hold one id in several shards), cannot be
    matched by id: an `InputError` naming it, not one row's score given to both."""
    from scoring.display_names import quoted

    for what, found in ((f"input {input_path}", rows), (f"scores {scores_path}", scores)):
        seen: set = set()
        for item in found:
            if item["id"] in seen:
                raise InputError(f"{what}: id {quoted(item['id'])} is on more than one row, so rows cannot be matched to "
                                 "their scores by id; report each input shard with its own output folder")
            seen.add(item["id"])
    by_id = {score["id"]: score for score in scores}
    missing = [row["id"] for row in rows if row["id"] not in by_id]
    if missing:
        raise InputError(f"scores {scores_path}: {len(missing)} rows have no score, e.g. id {quoted(missing[0])}")
    return [by_id[row["id"]] for row in rows]


INPUT_COLUMNS = ("id", "system", "doc_id", "constraint", "text")  # what the report reads of a row
SCORE_COLUMNS = ("id", "codi_success", "codi_toxicity", "error", "signature")
KEYS = ("id", "system", "doc_id")  # in precedence order: a row counts under the first that leaves it out


def read_rows(path: str, what: str, columns=INPUT_COLUMNS, keys=KEYS):
    """The rows of the Parquet file or folder `path` (`what`: "input" or "scores") as dicts of the
    `columns` it has, each with an `id` that is a string or an integer, and their account
    (`meta_eval.row_account.RowAccount`): a row whose key (`keys`: id, system, doc_id; a
    Parquet `binary` key is read as the text it holds) is not valid UTF-8 is left out, counted
    under "<key> key not valid UTF-8" with its first row named, never decoded with replacement
    characters; the third value gives each returned row's place, (file, row in it). A file that is
    not Parquet, a missing or unusable `id` column, or another value that is not text is an
    `InputError` naming the file, the column and the row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from meta_eval.row_account import RowAccount
    from scoring.display_names import quoted
    from scoring.parquet_read import row_places
    from scoring.utf8_text import binary_as_text, table_rows, unreadable_counts, unreadable_mask, where_placed

    if str(path).startswith(("s3://", "s3a://")):
        from scoring.s3_filesystem import refuse_credentials

        refuse_credentials(path)  # pyarrow would sign its requests with a URL's credentials
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a file that is not Parquet
        raise InputError(f"{what} {path}: cannot read it as Parquet ({type(exc).__name__}: {exc})") from None
    if "id" not in table.column_names:
        raise InputError(f"{what} {path}: no 'id' column (rows are matched to their scores by id)")
    table = table.select([name for name in columns if name in table.column_names])
    for name in keys:
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, binary_as_text(table.column(name)))
    kind = table.schema.field("id").type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)):
        raise InputError(f"{what} {path}: column 'id' has type {kind}, expected strings")
    unreadable = [(name, bad) for name in keys if name in table.column_names
                  for bad in [unreadable_mask(table.column(name))] if bad is not None]
    place = row_places(path)  # a folder's row: its file and its row there
    counts = unreadable_counts(table.num_rows, unreadable, str(path), where=where_placed(place))
    rows = RowAccount(table.num_rows, counts.rows_used, counts.left_out, counts.first)
    if unreadable:
        table = table.filter(pa.array(counts.keep))
    found = table_rows(table, lambda row, name: InputError(f"{what} {path}: row {row}: column {quoted(name)} "
                                                           "is not valid UTF-8"))
    positions = [place(row) for row in np.flatnonzero(counts.keep)]
    return found, rows, positions


def handle_report(args: argparse.Namespace) -> int:
    from meta_eval import codi as aggregate  # CoDI corpus statistics beside the other statistics
    from meta_eval.row_account import RowAccount

    common.check_input_path(args.input)
    common.check_input_path(args.scores, "scores")
    output = common.prepare_output_dir(args.output, "report folder")

    rows, rows_account, positions = read_rows(args.input, "input")
    scores = join_scores(rows, read_rows(args.scores, "scores", SCORE_COLUMNS, ("id",))[0], args.scores, args.input)
    signatures = sorted({s.get("signature") for s in scores if s.get("signature")})
    try:
        report = aggregate.aggregate(rows, scores, metric_signature="; ".join(signatures) or None,
                                     toxicity_threshold=args.toxicity_threshold, with_self_bleu=not args.no_self_bleu,
                                     self_bleu_method=args.self_bleu, source=args.input,
                                     earlier=rows_account, positions=positions)
    except InputError as exc:
        raise InputError(f"{args.input}: {exc}") from None
    paths = aggregate.write_report(report, output)
    files = {name: str(path) for name, path in paths.items()}
    account = report["rows"]  # every row: used, or left out with its reason (docs/meta_eval.md, "Rows left out")
    lines = [f"constraints report: {account['rows_in']} rows -> {output}"] + [f"  {name}: {path}" for name, path in files.items()]
    lines += RowAccount.lines(account["rows_used"], account["rows_left_out"], first=account.get("rows_left_out_first"))
    common.emit(args, {"ok": True, "command": "constraints report", "output": str(output), **account, "files": files}, lines)
    return 0

"""`ctgscore constraints ...`: CoDI-Eval conversion, in-process scoring and the report.

  ctgscore constraints convert --instructions DIR [--responses SYSTEM=DIR ...] --out rows.parquet
  ctgscore constraints score --input rows.parquet --out scores.parquet [--params JSON|@file]
  ctgscore constraints report --input rows.parquet --scores scores.parquet --out REPORT_DIR

The same scoring runs in the Ray job as metric `codi` (`{name: codi, params: {...}}`).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("constraints", help="CoDI-Eval constraint scoring (convert, score, report)")
    sub = parser.add_subparsers(dest="constraints_command", required=True, metavar="STEP")

    convert = sub.add_parser("convert", help="instruction sets (+ responses) -> canonical Parquet")
    convert.add_argument("--instructions", required=True, help="folder with <task>_lite.jsonl files")
    convert.add_argument(
        "--responses", action="append", default=[], metavar="SYSTEM=DIR",
        help="responses of one system: DIR/<task>.jsonl or DIR/<task>/generation.jsonl (repeatable)",
    )  # fmt: skip
    convert.add_argument("--tasks", nargs="+", default=None, help="subset of tasks (default: all six)")
    convert.add_argument("--limit", type=int, default=None, help="first N instructions of each task only")
    convert.add_argument("--out", required=True, help="output Parquet file")
    convert.set_defaults(handler=_guarded(_convert))

    score = sub.add_parser("score", help="score a canonical Parquet in-process with metric 'codi'")
    score.add_argument("--input", required=True, help="canonical Parquet file or folder")
    score.add_argument("--out", required=True, help="output scores Parquet file")
    score.add_argument("--params", default="{}", help="metric params as JSON, or @file.json/@file.yaml")
    score.add_argument("--chunk-size", type=int, default=512, help="rows per score_rows call")
    score.set_defaults(handler=_guarded(_score))

    report = sub.add_parser("report", help="accuracies, CoDI score and Self-BLEU -> JSON + Markdown")
    report.add_argument("--input", required=True, help="canonical Parquet (constraint, text, system)")
    report.add_argument("--scores", required=True, help="scores Parquet (id, codi_success, codi_toxicity, error)")
    report.add_argument("--out", required=True, help="report folder: results.json, report.md, codi_accuracy.png")
    report.add_argument("--no-self-bleu", action="store_true", help="skip Self-BLEU")
    report.set_defaults(handler=_guarded(_report))


def _guarded(handler):
    """Bad input -> one clear line on stderr and exit status 2 (no traceback)."""

    def run(args: argparse.Namespace) -> int:
        from scoring.codi.convert import ConvertError

        try:
            return handler(args)
        except (ConvertError, ValueError, FileNotFoundError, KeyError) as exc:
            print(f"ctgscore constraints {args.constraints_command}: error: {exc}", file=sys.stderr)
            return 2

    return run


def load_params(value: str) -> dict[str, Any]:
    if value.startswith("@"):
        path = pathlib.Path(value[1:])
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            params = yaml.safe_load(text)
        else:
            params = json.loads(text)
    else:
        params = json.loads(value)
    if isinstance(params, dict) and "params" in params and params.get("name", "codi") == "codi":
        params = params["params"]  # accept a job-config metric entry as well
    if not isinstance(params, dict):
        raise ValueError("--params must be a JSON/YAML object")
    return params


def read_rows(path: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _convert(args: argparse.Namespace) -> int:
    from scoring.codi import TASKS, convert

    tasks = args.tasks or list(TASKS)
    rows: list[dict[str, Any]] = []
    if not args.responses:
        rows = convert.convert_dir(args.instructions, None, None, tasks, limit=args.limit)
    for item in args.responses:
        if "=" not in item:
            raise SystemExit(f"--responses expects SYSTEM=DIR, got {item!r}")
        system, directory = item.split("=", 1)
        rows.extend(convert.convert_dir(args.instructions, directory, system, tasks, limit=args.limit))
    convert.write_parquet(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


def score_table(rows: list[dict[str, Any]], params: dict[str, Any], chunk_size: int = 512) -> list[dict[str, Any]]:
    """Score canonical rows with `codi`; output rows follow schema.md (id, scores, error,
    warning, signature, carried columns)."""
    from tqdm import tqdm

    from scoring.registry import build_metric

    metric = build_metric("codi", params)
    signature = str(metric.signature())
    out: list[dict[str, Any]] = []
    for start in tqdm(range(0, len(rows), chunk_size), desc="codi", disable=len(rows) <= chunk_size):
        chunk = rows[start : start + chunk_size]
        for row, result in zip(chunk, metric.score_rows(chunk)):
            carried = {key: row.get(key) for key in ("id", "dataset", "system", "doc_id")}
            out.append({**carried, **result, "signature": signature})
    return out


def _score(args: argparse.Namespace) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = read_rows(args.input)
    out = score_table(rows, load_params(args.params), args.chunk_size)
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(out), args.out)
    errors = sum(1 for r in out if r["error"])
    print(f"scored {len(out)} rows ({errors} errors) -> {args.out}")
    return 0


def join_scores(rows: list[dict[str, Any]], scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Score rows in the order of `rows`, matched by id (the Ray job may reorder)."""
    by_id = {}
    for score in scores:
        by_id[score["id"]] = score
    missing = [row["id"] for row in rows if row["id"] not in by_id]
    if missing:
        raise ValueError(f"{len(missing)} rows have no score, e.g. id {missing[0]!r}")
    return [by_id[row["id"]] for row in rows]


def _report(args: argparse.Namespace) -> int:
    from scoring.codi import aggregate

    rows = read_rows(args.input)
    scores = join_scores(rows, read_rows(args.scores))
    signatures = {s.get("signature") for s in scores if s.get("signature")}
    report = aggregate.aggregate(rows, scores, metric_signature="; ".join(sorted(signatures)) or None,
                                 with_self_bleu=not args.no_self_bleu)  # fmt: skip
    paths = aggregate.write_report(report, args.out)
    sys.stdout.write(aggregate.markdown(report))
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0

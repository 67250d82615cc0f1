"""`ctgscore score` (score a local Parquet file in-process) and `ctgscore make-tiny-models`."""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    score = subparsers.add_parser(
        "score",
        help="score a local Parquet file in-process with one metric",
        description="Canonical columns in; carried columns, score columns, error, warning, signature and row_key out; rows out == rows in.",
    )
    score.add_argument("--metric", required=True, help="metric name: bartscore, ctrleval, perplexity, text_stats, codi")
    score.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                       help="metric parameter (value parsed as YAML, e.g. directions=[s_h,f]); repeatable")
    score.add_argument("--params", help="YAML/JSON file with the metric's parameters (the `params` of a job config)")
    score.add_argument("--input", required=True, help="input Parquet file")
    score.add_argument("--output", required=True, help="output Parquet file")
    score.add_argument("--chunk-rows", type=int, default=256, help="rows handed to the metric at a time")
    score.set_defaults(handler=run_score)

    tiny = subparsers.add_parser("make-tiny-models", help="build the tiny test models (PEGASUS, BART, GPT-2, IWF) into DIR")
    tiny.add_argument("directory")
    tiny.add_argument("--force", action="store_true", help="rebuild even if present")
    tiny.set_defaults(handler=run_make_tiny_models)


def parse_params(pairs: list[str], params_file: str | None) -> dict:
    import yaml

    params: dict = {}
    if params_file:
        with open(params_file) as handle:
            loaded = yaml.safe_load(handle) or {}
        if not isinstance(loaded, dict):
            raise SystemExit(f"{params_file}: expected a mapping of metric parameters")
        params.update(loaded)
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"--param {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        params[key.strip()] = yaml.safe_load(value)
    return params


def score_table(metric, table, chunk_rows: int = 256, progress: bool = True):
    """Score a pyarrow Table with a row metric; returns the output Table (same row count)."""
    import pyarrow as pa
    from tqdm import tqdm

    missing = [c for c in metric.required_columns if c not in table.column_names]
    if missing:
        raise ValueError(f"input has no column(s) {missing} required by metric '{metric.name}'")
    records = []
    with tqdm(total=table.num_rows, desc=f"{metric.name}", unit="row", disable=not progress, file=sys.stderr) as bar:
        for offset in range(0, table.num_rows, chunk_rows):
            rows = table.slice(offset, chunk_rows).to_pylist()
            records.extend(metric.output_records(rows))
            bar.update(len(rows))
    if len(records) != table.num_rows:
        raise RuntimeError(f"{len(records)} output rows for {table.num_rows} input rows")
    return pa.Table.from_pylist(records, schema=metric.output_schema(table.column_names))


def run_score(args) -> int:
    import pyarrow.parquet as pq

    from scoring.registry import build_metric

    metric = build_metric(args.metric, parse_params(args.param, args.params))
    try:
        table = pq.read_table(args.input)
    except Exception as exc:  # noqa: BLE001
        raise SystemExit(f"{args.input}: cannot read Parquet: {exc}") from exc
    try:
        output = score_table(metric, table, args.chunk_rows)
    except ValueError as exc:
        raise SystemExit(f"{args.input}: {exc}") from exc
    pq.write_table(output, args.output)
    errors = sum(1 for e in output.column("error").to_pylist() if e)
    print(json.dumps({"output": args.output, "rows": output.num_rows, "errors": errors, "signature": metric.signature_string()}))
    return 0


def run_make_tiny_models(args) -> int:
    from ctgscore.testing.tiny_models import build_tiny_models

    print(json.dumps(build_tiny_models(args.directory, force=args.force), indent=2))
    return 0

"""`ctgscore convert`: JSONL, CSV/TSV, Parquet or line-aligned text files -> canonical input Parquet,
with a column mapping, validation, and a report of what was dropped and why (docs/convert.md).

    ctgscore convert -i dump.jsonl -o dump.parquet --map text=hyp --map references=refs
    ctgscore convert -c candidates.txt -r refs.txt [-r refs2.txt] [-s sources.txt] -o x.parquet --system sys1
"""

from __future__ import annotations

import argparse
import json

from ctgscore.cli import common
from scoring import atomic_files
from scoring.errors import UsageError


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "convert", parents=[parent], help="JSONL / CSV / Parquet / line-aligned text -> canonical Parquet",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-i", "--input",
                        help="a JSONL (.jsonl/.ndjson/.json), CSV/TSV (with a header) or Parquet file (or folder)")
    parser.add_argument("--format", choices=["jsonl", "csv", "tsv", "parquet"], default=None,
                        help="input format (default: from the file name)")
    parser.add_argument("--map", action="append", default=[], metavar="CANONICAL=FIELD",
                        help="fill a canonical column from an input field, e.g. text=hyp, references=refs "
                             "(references may name several fields: references=ref1,ref2); repeatable")
    parser.add_argument("-c", "--candidates", help="line-aligned text: one candidate (text) per line")
    parser.add_argument("-r", "--references", action="append", default=[], metavar="FILE",
                        help="line-aligned text: one reference per line; repeat for several references")
    parser.add_argument("-s", "--sources", help="line-aligned text: one source per line")
    parser.add_argument("--dataset", help="value of `dataset` for rows that have none")
    parser.add_argument("--system", help="value of `system` for rows that have none")
    parser.add_argument("--id-prefix", default=None,
                        help="prefix of generated ids (rows without an id; default: SYSTEM: when --system is given)")
    parser.add_argument("--max-record-bytes", type=int, default=None, metavar="N",
                        help="longest line (CSV: record) read, in bytes (default 64,000,000); a longer one "
                             "fails the file naming where it starts")
    parser.add_argument("-o", "--output", required=True, help="output Parquet file (its folder must exist)")
    parser.add_argument("--report", default=None, metavar="FILE", help="also write the conversion report as JSON")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from ctgscore import convert

    aligned = args.candidates is not None
    if aligned == (args.input is not None):
        raise UsageError("ctgscore convert: give either -i FILE (JSONL/CSV) or -c CANDIDATES [-r REFS] [-s SOURCES]")
    if aligned and (args.map or args.format):
        raise UsageError("ctgscore convert: --map and --format apply to -i inputs, not to line-aligned files")
    if not aligned and (args.references or args.sources):
        raise UsageError("ctgscore convert: -r/-s go with -c (line-aligned files)")
    mapping = convert.parse_mapping(args.map)
    output = common.check_output_file(args.output)
    if args.report:
        common.check_output_file(args.report, "report")
    inputs = [args.input] if not aligned else [args.candidates, *(args.references or []), args.sources]
    for given in filter(None, inputs):  # -o or --report naming an input would overwrite it
        common.check_not_input(args.output, given)
        if args.report:
            common.check_not_input(args.report, given, "report")
    constants = {k: v for k, v in (("dataset", args.dataset), ("system", args.system)) if v is not None}
    prefix = args.id_prefix if args.id_prefix is not None else (f"{args.system}:" if args.system else "")
    cap = convert.MAX_RECORD_BYTES if args.max_record_bytes is None else args.max_record_bytes
    if cap < 1:
        raise UsageError(f"--max-record-bytes {cap}: expected a positive number of bytes")
    if aligned:
        report = convert.write_aligned(output, args.candidates, args.references, args.sources, constants, prefix,
                                       max_record_bytes=cap)
    else:
        report = convert.write_file(args.input, output, args.format, mapping, constants, prefix, max_record_bytes=cap)
    summary = {"ok": True, "command": "convert", **report.as_dict()}
    if args.report:
        atomic_files.write_text(args.report, json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    common.emit(args, summary, report.lines())
    return 0

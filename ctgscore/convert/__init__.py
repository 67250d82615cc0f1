"""Converters from common dump formats to the canonical input Parquet (docs/convert.md).

Inputs: JSON Lines (one object per line), CSV/TSV with a header, Parquet with its own column
names or types, and line-aligned text files as bert-score takes them (candidates, one or more reference files, optionally sources:
line i of every file belongs to the same example). A column mapping names which input field
fills which canonical column (`{"text": "hyp", "references": ["ref1", "ref2"]}`); fields mapped
to nothing keep their name when it is canonical and are otherwise left out (and listed).

Every row is validated against the canonical types (`scoring.schema`): a row that cannot become
a canonical row is dropped and counted under its reason; `ConversionReport` says how many rows
were read, written and dropped, and why.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from ctgscore.convert.readers import FORMATS, detect_format, read_aligned, read_csv, read_jsonl, read_parquet
from ctgscore.convert.report import ConversionReport
from ctgscore.convert.rows import CANONICAL_COLUMNS, canonical_rows, parse_mapping, rows_to_table
from scoring.errors import InputError, UsageError

__all__ = ["CANONICAL_COLUMNS", "FORMATS", "ConversionReport", "canonical_rows", "convert_aligned", "convert_file",
           "detect_format", "parse_mapping", "read_aligned", "read_csv", "read_jsonl", "read_parquet", "rows_to_table"]


def convert_file(path: str, fmt: str | None = None, mapping: Mapping[str, list[str]] | None = None,
                 constants: Mapping[str, str] | None = None, id_prefix: str = ""):
    """A JSONL/CSV/TSV/Parquet dump -> (canonical Arrow table, report)."""
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    report = ConversionReport(inputs=[str(path)], format=fmt)
    if fmt == "jsonl":
        records = read_jsonl(path, report)
    elif fmt == "parquet":
        records = read_parquet(path, report)
    else:
        records = read_csv(path, report, delimiter="\t" if fmt == "tsv" else ",")
    rows = canonical_rows(records, report, mapping, constants, id_prefix)
    return _finish(rows, report)


def convert_aligned(candidates: str, references: Sequence[str] = (), sources: str | None = None,
                    constants: Mapping[str, str] | None = None, id_prefix: str = ""):
    """Line-aligned candidates / references / sources -> (canonical Arrow table, report).
    Row i gets `doc_id` "i" (0-based line index) and, without an id, `id_prefix + i`."""
    report = ConversionReport(inputs=[str(candidates), *map(str, references), *([str(sources)] if sources else [])],
                              format="aligned text")
    records = read_aligned(candidates, references, sources, report)
    records = [(number, {**record, "id": f"{id_prefix}{number - 1}"}) for number, record in records]
    rows = canonical_rows(records, report, None, constants)
    return _finish(rows, report)


def _finish(rows, report: ConversionReport):
    if not rows:
        reasons = "; ".join(f"{n} {r}" for r, n in Counter(report.dropped).most_common(3)) or "the input is empty"
        hint = ""
        if report.ignored_fields:
            hint = (f"; the input's fields are {', '.join(report.ignored_fields)}: name the text and id fields "
                    "with --map, e.g. --map text=FIELD --map id=FIELD")
        raise InputError(f"{', '.join(report.inputs)}: no row could be converted ({reasons}){hint}")
    table = rows_to_table(rows)
    report.rows_written = table.num_rows
    report.columns = table.column_names
    return table, report

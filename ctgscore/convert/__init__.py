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

from typing import Mapping, Sequence

from ctgscore.convert import stream
from ctgscore.convert.readers import (
    FORMATS,
    MAX_RECORD_BYTES,
    count_aligned,
    detect_format,
    iter_aligned,
    iter_csv,
    iter_jsonl,
    iter_parquet,
    read_aligned,
    read_csv,
    read_jsonl,
    read_parquet,
    readable_twice,
)
from ctgscore.convert.report import ConversionReport
from ctgscore.convert.rows import CANONICAL_COLUMNS, canonical_rows, parse_mapping, rows_to_table
from scoring.errors import UsageError

__all__ = ["CANONICAL_COLUMNS", "FORMATS", "MAX_RECORD_BYTES", "ConversionReport", "canonical_rows", "convert_aligned", "convert_file",
           "detect_format", "parse_mapping", "read_aligned", "read_csv", "read_jsonl", "read_parquet", "rows_to_table",
           "write_aligned", "write_file"]


def _file_source(path: str, fmt: str | None, max_rows: int, max_bytes: int, max_record_bytes: int):
    """(report, source) of a JSONL/CSV/TSV/Parquet dump."""
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    report = ConversionReport(inputs=[str(path)], format=fmt)
    if fmt == "jsonl":
        return report, lambda r: iter_jsonl(path, r, max_record_bytes)
    if fmt == "parquet":
        return report, lambda r: iter_parquet(path, r, batch_rows=max_rows, max_bytes=max_bytes)
    return report, lambda r: iter_csv(path, r, delimiter="\t" if fmt == "tsv" else ",", max_record_bytes=max_record_bytes)


class _AlignedSource:
    """Line-aligned files as a `stream.Source`. Row i gets `doc_id` "i" (0-based line index)
    and, without an id, `id_prefix + i`. Its `scan` is the line count (`count_aligned`: every
    file read once, as `iter_aligned` would check it): every row has the same fields, so the
    scan need not read the rows too, and the passes after it need not count again."""

    def __init__(self, candidates: str, references: Sequence[str], sources: str | None, id_prefix: str,
                 max_record_bytes: int):
        self.files = (candidates, list(references), sources)
        self.id_prefix = id_prefix
        self.max_record_bytes = max_record_bytes
        self.counted = False

    def scan(self) -> tuple[set[str], bool]:
        """(the fields of every row, whether there is a row), as reading every row would find them."""
        lines = count_aligned(*self.files, self.max_record_bytes)
        self.counted = True
        _, references, sources = self.files
        fields = {"doc_id", "text", "id", *(["references"] if references else []), *(["source"] if sources else [])}
        return (fields if lines else set()), lines > 0

    def __call__(self, report: ConversionReport):
        rows = iter_aligned(*self.files, report, max_record_bytes=self.max_record_bytes, counted=self.counted)
        for number, record, size in rows:
            yield number, {**record, "id": f"{self.id_prefix}{number - 1}"}, size


def _aligned_source(candidates: str, references: Sequence[str], sources: str | None, id_prefix: str,
                    max_record_bytes: int):
    """(report, source) of line-aligned files."""
    report = ConversionReport(inputs=[str(candidates), *map(str, references), *([str(sources)] if sources else [])],
                              format="aligned text")
    return report, _AlignedSource(candidates, references, sources, id_prefix, max_record_bytes)


def convert_file(path: str, fmt: str | None = None, mapping: Mapping[str, list[str]] | None = None,
                 constants: Mapping[str, str] | None = None, id_prefix: str = "", *,
                 max_rows: int = stream.MAX_BATCH_ROWS, max_bytes: int = stream.MAX_BATCH_BYTES,
                 max_record_bytes: int = MAX_RECORD_BYTES):
    """A JSONL/CSV/TSV/Parquet dump -> (canonical Arrow table, report), in memory."""
    report, source = _file_source(path, fmt, max_rows, max_bytes, max_record_bytes)
    with readable_twice([path]):
        return stream.to_table(source, report, mapping, constants, id_prefix, max_rows, max_bytes), report


def write_file(path: str, output, fmt: str | None = None, mapping: Mapping[str, list[str]] | None = None,
               constants: Mapping[str, str] | None = None, id_prefix: str = "", *,
               max_rows: int = stream.MAX_BATCH_ROWS, max_bytes: int = stream.MAX_BATCH_BYTES,
               max_record_bytes: int = MAX_RECORD_BYTES) -> ConversionReport:
    """A JSONL/CSV/TSV/Parquet dump -> canonical Parquet at `output`, in batches
    (`ctgscore.convert.stream`); returns the report."""
    report, source = _file_source(path, fmt, max_rows, max_bytes, max_record_bytes)
    with readable_twice([path]):
        stream.to_parquet(source, output, report, mapping, constants, id_prefix, max_rows, max_bytes)
    return report


def convert_aligned(candidates: str, references: Sequence[str] = (), sources: str | None = None,
                    constants: Mapping[str, str] | None = None, id_prefix: str = "", *,
                    max_rows: int = stream.MAX_BATCH_ROWS, max_bytes: int = stream.MAX_BATCH_BYTES,
                    max_record_bytes: int = MAX_RECORD_BYTES):
    """Line-aligned candidates / references / sources -> (canonical Arrow table, report).
    Row i gets `doc_id` "i" (0-based line index) and, without an id, `id_prefix + i`."""
    report, source = _aligned_source(candidates, references, sources, id_prefix, max_record_bytes)
    with readable_twice([candidates, *references, sources]):
        return stream.to_table(source, report, None, constants, "", max_rows, max_bytes), report


def write_aligned(output, candidates: str, references: Sequence[str] = (), sources: str | None = None,
                  constants: Mapping[str, str] | None = None, id_prefix: str = "", *,
                  max_rows: int = stream.MAX_BATCH_ROWS, max_bytes: int = stream.MAX_BATCH_BYTES,
                  max_record_bytes: int = MAX_RECORD_BYTES) -> ConversionReport:
    """Line-aligned files -> canonical Parquet at `output`, in batches; returns the report."""
    report, source = _aligned_source(candidates, references, sources, id_prefix, max_record_bytes)
    with readable_twice([candidates, *references, sources]):
        stream.to_parquet(source, output, report, None, constants, "", max_rows, max_bytes)
    return report

"""A conversion in batches: the input is read twice, one batch of rows at a time, never whole
(docs/convert.md, "Memory").

1. A scan reads every record and keeps only the field names: what the `--map` check, the
   fields left out and the choice to generate ids need to know of the whole input (of
   line-aligned files, whose fields are fixed, the scan is a count of their lines).
2. The conversion reads the records again in batches of at most `max_rows` rows and, past
   `max_bytes` of input, ends a batch early (a row larger than that is a batch of its own),
   converts each batch and writes it as one Parquet row group with every column a row can
   have. The ids written so far are kept (compactly: `seen_ids.SeenIds`), so a duplicate is
   found across batches.
3. A column no written row has a value in is left out, as a whole-file conversion leaves it
   out: the row groups are copied into the output without it.

Peak memory follows the largest batch (or the largest row, at most the record cap of the text
readers), not the file.
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from collections import Counter
from typing import Any, Callable, Iterable, Iterator, Mapping

from ctgscore.convert.report import ConversionReport
from ctgscore.convert.rows import RowConverter, _column_order, arrow_schema, present_columns, rows_to_table
from scoring import atomic_files
from scoring.display_names import quoted_list
from scoring.errors import InputError

MAX_BATCH_ROWS = 10_000
MAX_BATCH_BYTES = 32 << 20  # of input text (or Arrow data, for Parquet) per batch

Item = tuple[int, dict[str, Any], int]  # (row number, record, bytes of input it came from)
# a fresh pass over the input each call; a source may also have `scan() -> (fields, any rows)`,
# which `plan` then calls instead of reading every record
Source = Callable[[ConversionReport], Iterator[Item]]


def batched(items: Iterable[Item], max_rows: int = MAX_BATCH_ROWS,
            max_bytes: int = MAX_BATCH_BYTES) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    """(row number, record) lists of at most `max_rows` records, each ended once it holds
    `max_bytes` of input (so below `max_bytes` plus its last row). The consumer may clear a
    list once it is done with it (`tables` does), so that no record outlives its batch."""
    batch: list[tuple[int, dict[str, Any]]] = []
    size = 0
    for number, record, nbytes in items:
        batch.append((number, record))
        size += nbytes
        del record  # the consumer clears the batch it is given: no record stays here
        if len(batch) >= max_rows or size >= max_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def plan(source: Source, report: ConversionReport, mapping: Mapping[str, list[str]] | None,
         constants: Mapping[str, str] | None, id_prefix: str) -> RowConverter:
    """The scan (step 1): a converter that knows every field of the input. Errors of the file
    itself (not UTF-8, a quote never closed) surface here, before any row is converted."""
    fields = getattr(source, "scan", None)
    if fields is not None:  # a source that knows its fields without reading its rows (line-aligned files)
        seen, any_records = fields()
        return RowConverter(seen, report, mapping, constants, id_prefix, any_records=any_records)
    scan = ConversionReport(inputs=report.inputs, format=report.format)
    seen = set()
    any_records = False
    for _, record, _ in source(scan):
        seen.update(record)
        any_records = True
    return RowConverter(seen, report, mapping, constants, id_prefix, any_records=any_records)


def tables(source: Source, converter: RowConverter, report: ConversionReport, max_rows: int = MAX_BATCH_ROWS,
           max_bytes: int = MAX_BATCH_BYTES) -> Iterator[tuple[Any, set[str]]]:
    """Step 2: (Arrow table of `converter.columns`, columns with a value) per non-empty batch."""
    for batch in batched(source(report), max_rows, max_bytes):
        rows = converter.convert(batch, report)
        batch.clear()  # the records (`batched` still holds the list until the next batch)
        if rows:
            report.rows_written += len(rows)
            table, present = rows_to_table(rows, converter.columns), present_columns(rows)
            del rows  # the Arrow table holds the batch now
            yield table, present
            del table


def finish(report: ConversionReport, present: set[str], candidates: list[str]) -> list[str]:
    """The columns to write, of the `candidates` the input could fill: those some row written has
    a value in (the others are named in `report.columns_without_values`, e.g. a rating field whose
    every value was unparsable); an input with no convertible row is an error naming why."""
    if not report.rows_written:
        reasons = "; ".join(f"{n} {r}" for r, n in Counter(report.dropped).most_common(3)) or "the input is empty"
        hint = ""
        if report.ignored_fields:
            hint = (f"; the input's fields are {quoted_list(report.ignored_fields, quote=False)}: name the text and id fields "
                    "with --map, e.g. --map text=FIELD --map id=FIELD")
        raise InputError(f"{', '.join(report.inputs)}: no row could be converted ({reasons}){hint}")
    report.columns = _column_order(present)
    report.columns_without_values = [column for column in candidates if column not in present]
    return report.columns


def to_table(source: Source, report: ConversionReport, mapping=None, constants=None, id_prefix: str = "",
             max_rows: int = MAX_BATCH_ROWS, max_bytes: int = MAX_BATCH_BYTES):
    """The whole conversion as one Arrow table in memory (for small inputs and tests)."""
    import pyarrow as pa

    converter = plan(source, report, mapping, constants, id_prefix)
    parts, present = [], set()
    for table, columns in tables(source, converter, report, max_rows, max_bytes):
        parts.append(table)
        present |= columns
    columns = finish(report, present, converter.columns)
    return pa.concat_tables(parts).select(columns).combine_chunks()


def to_parquet(source: Source, output: str | pathlib.Path, report: ConversionReport, mapping=None, constants=None,
               id_prefix: str = "", max_rows: int = MAX_BATCH_ROWS, max_bytes: int = MAX_BATCH_BYTES) -> None:
    """The conversion written to `output` one row group per batch, through
    `scoring.atomic_files` (a failure, or an input with no convertible row, leaves `output` as
    it was). The batches go to an unnamed temp file in the output's folder first; step 3 then
    copies it into the output, leaving out the columns no row has."""
    import pyarrow.parquet as pq

    output = pathlib.Path(output)
    converter = plan(source, report, mapping, constants, id_prefix)

    def write(handle) -> None:
        with tempfile.TemporaryFile(dir=output.parent) as staging:
            present: set[str] = set()
            writer = pq.ParquetWriter(staging, arrow_schema(converter.columns))
            try:
                for table, columns in tables(source, converter, report, max_rows, max_bytes):
                    writer.write_table(table)
                    present |= columns
                    del table
            finally:
                writer.close()
            columns = finish(report, present, converter.columns)
            staging.seek(0)
            if columns == converter.columns:
                shutil.copyfileobj(staging, handle, 1 << 20)
                return
            parquet = pq.ParquetFile(staging)
            with pq.ParquetWriter(handle, arrow_schema(columns)) as out:
                for group in range(parquet.num_row_groups):
                    out.write_table(parquet.read_row_group(group, columns=columns))

    atomic_files.write_with(output, write)
    report.output = str(output)

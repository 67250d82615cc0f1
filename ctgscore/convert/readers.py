"""Readers: JSON Lines, CSV/TSV, Parquet and line-aligned text files -> (row number, record)
pairs; records that cannot be read at all are dropped into the report (docs/convert.md)."""

from __future__ import annotations

import contextlib
import csv
import json
import pathlib
import re
import sys
from typing import Any, Iterator, Sequence

from ctgscore.convert.report import ConversionReport
from scoring import schema
from scoring.errors import InputError, UsageError
from scoring.local_files import refuse_device
from scoring.strict_json import DuplicateKey, unique_keys
from scoring.utf8_text import decode_utf8

FORMATS = ("jsonl", "csv", "tsv", "parquet")


def _read_text(path: pathlib.Path) -> str:
    refuse_device(path, error=InputError)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, expected a file") from None
    return decode_utf8(data, path, encoding="utf-8-sig")


def read_jsonl(path: str | pathlib.Path, report: ConversionReport) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a line that is not a JSON object, or whose
    object names a key twice (two `text` values, one of which would vanish), is dropped with its
    reason."""
    records = []
    for number, line in enumerate(_split_lines(_read_text(pathlib.Path(path)), _NEWLINE), start=1):
        line = line.removeprefix("\ufeff")  # files joined with `cat`: each may start with a BOM
        if not line.strip():
            continue
        report.rows_read += 1
        try:
            value = json.loads(line, object_pairs_hook=unique_keys)
        except DuplicateKey as exc:
            report.drop(f"line names the key {exc.args[0]!r} twice in one object", number)
            continue
        except json.JSONDecodeError:
            report.drop("line is not valid JSON", number)
            continue
        except ValueError:  # an integer of more than 4,300 digits
            report.drop("line holds a number too long to read", number)
            continue
        except RecursionError:
            report.drop("line nests arrays or objects too deep to read", number)
            continue
        if not isinstance(value, dict):
            report.drop("line is not a JSON object", number)
            continue
        records.append((number, value))
    return records


_NEWLINE = re.compile("\n")
_CSV_LINE = re.compile("\r\n|\r|\n")  # universal newlines, as a file opened with newline="" reads lines


def _split_lines(text: str, separator: re.Pattern) -> Iterator[str]:
    """The lines of `text` one at a time, without a list of them all (a copy of the text);
    `text.split("\n")` for `_NEWLINE`; with `_CSV_LINE`, each line keeps its line end."""
    start = 0
    for match in separator.finditer(text):
        yield text[start:match.end() if separator is _CSV_LINE else match.start()]
        start = match.end()
    if start < len(text) or separator is _NEWLINE:
        yield text[start:]


def read_csv(path: str | pathlib.Path, report: ConversionReport, delimiter: str = ",") -> list[tuple[int, dict[str, Any]]]:
    """(row number, {header: cell}) for every data row; empty cells are missing values.

    Parsed strictly: a row the csv module cannot read (`"a"b`, a quote in the middle of a
    field) is dropped with the module's reason rather than read as some other text, and a
    quote that is never closed, which would swallow every later line into one cell, fails the
    file with the line it opens on. A cell may be as long as the file (Python's default cap of
    131,072 characters is lifted while reading; the per-cell caps apply when scoring)."""
    text = _read_text(pathlib.Path(path))
    with _field_limit(len(text) + 1):
        return _csv_records(path, text, report, delimiter)


@contextlib.contextmanager
def _field_limit(size: int):
    previous = csv.field_size_limit()
    csv.field_size_limit(max(previous, min(size, sys.maxsize)))
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _csv_records(path, text: str, report: ConversionReport, delimiter: str) -> list[tuple[int, dict[str, Any]]]:
    # lines as `io.StringIO(text, newline="")` gives them, one at a time: a StringIO holds a
    # copy of the whole text at 4 bytes a character
    reader = csv.reader(_split_lines(text, _CSV_LINE), delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(f"{path}: empty file, expected a header row") from None
    except csv.Error as exc:
        raise InputError(f"{path}: the header row is not valid CSV ({exc})") from None
    if len(set(header)) != len(header):
        duplicate = next(h for h in header if header.count(h) > 1)
        raise InputError(f"{path}: header names column {duplicate!r} twice")
    records = []
    number = 1
    while True:
        number += 1
        first_line = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            if str(exc) == "unexpected end of data":  # strict csv: the end of the text inside a quoted field
                raise InputError(f"{path}: the quote opened in the row starting on line {first_line} is never closed "
                                 f"(lines {first_line}-{reader.line_num} would be one cell)") from None
            report.rows_read += 1
            report.drop(f"row is not valid CSV ({exc})", number)
            continue
        if not cells or all(not c.strip() for c in cells):
            continue
        report.rows_read += 1
        if len(cells) != len(header):
            report.drop(f"row has {len(cells)} cells, header has {len(header)}", number)
            continue
        records.append((number, {h: (c if c != "" else None) for h, c in zip(header, cells)}))
    return records


def read_parquet(path: str | pathlib.Path, report: ConversionReport) -> list[tuple[int, dict[str, Any]]]:
    """(row number, record) for every row of a Parquet file or folder (e.g. a dump with its
    own column names or types, to be mapped onto the canonical ones)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not pathlib.Path(path).exists():
        raise UsageError(f"{path}: no such file or folder")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError) as exc:
        raise InputError(f"{path}: cannot read it as Parquet ({exc})") from None
    rows, errors = schema.rows_from_table(table)
    records = []
    for number, (row, error) in enumerate(zip(rows, errors), start=1):
        report.rows_read += 1
        if error is not None:
            report.drop(error, number)
            continue
        for key, value in row.items():
            if isinstance(value, list) and value and all(isinstance(i, tuple) and len(i) == 2 for i in value):
                row[key] = dict(value)  # a map column
        records.append((number, row))
    return records


def _lines(path: str | pathlib.Path) -> list[str]:
    text = _read_text(pathlib.Path(path))
    if text.endswith("\n"):
        text = text[:-1]
    return [line.rstrip("\r") for line in text.split("\n")] if text else []


def read_aligned(candidates: str, references: Sequence[str] = (), sources: str | None = None,
                 report: ConversionReport | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Line-aligned text files: line i of `candidates` is the text, line i of each references
    file one of its references, line i of `sources` its source. All files need the same
    number of lines."""
    texts = _lines(candidates)
    refs = [_lines(path) for path in references]
    srcs = _lines(sources) if sources else None
    for path, lines in [*zip(references, refs), *([(sources, srcs)] if srcs is not None else [])]:
        if len(lines) != len(texts):
            raise InputError(f"{path}: {len(lines)} lines, but {candidates} has {len(texts)}; "
                             "line-aligned files need the same number of lines")
    records = []
    for index, text in enumerate(texts):
        row: dict[str, Any] = {"doc_id": str(index), "text": text}
        if refs:
            row["references"] = [lines[index] for lines in refs]
        if srcs is not None:
            row["source"] = srcs[index]
        records.append((index + 1, row))
    if report is not None:
        report.rows_read += len(records)
    return records


def detect_format(path: str) -> str:
    suffix = pathlib.Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return suffix[1:]
    if suffix == ".parquet" or pathlib.Path(path).is_dir():
        return "parquet"
    raise UsageError(f"{path}: cannot tell the format from the name; pass --format {'|'.join(FORMATS)}")

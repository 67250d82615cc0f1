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

import csv
import io
import json
import math
import pathlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from scoring import schema
from scoring.errors import InputError, UsageError

CANONICAL_COLUMNS = ("id", "dataset", "doc_id", "system", "source", "prefix", "attribute", "attributes",
                     "constraint", "text", "references")
FORMATS = ("jsonl", "csv", "tsv", "parquet")
MAX_EXAMPLES = 3


@dataclass
class ConversionReport:
    """What a conversion read, wrote and dropped (reason -> count, with a few row numbers)."""

    inputs: list[str]
    format: str
    rows_read: int = 0
    rows_written: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[int]] = field(default_factory=dict)  # reason -> first input rows (1-based)
    ignored_fields: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    output: str | None = None

    def drop(self, reason: str, row_number: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < MAX_EXAMPLES:
            examples.append(row_number)

    def lines(self) -> list[str]:
        out = [f"convert: {self.rows_read} rows read from {', '.join(self.inputs)} ({self.format}), "
               f"{self.rows_written} written" + (f" -> {self.output}" if self.output else "")]
        out.append(f"  columns: {', '.join(self.columns)}")
        for reason, count in sorted(self.dropped.items(), key=lambda item: -item[1]):
            rows = ", ".join(map(str, self.examples.get(reason, [])))
            out.append(f"  dropped {count}: {reason} (e.g. row {rows})")
        if self.ignored_fields:
            out.append(f"  fields left out (not canonical, not mapped): {', '.join(self.ignored_fields)}")
        return out


# ----- mapping ----------------------------------------------------------------------------
def parse_mapping(pairs: Iterable[str]) -> dict[str, list[str]]:
    """`--map canonical=field` pairs -> {canonical: [fields]}; `references` may take several
    fields (one reference each, `--map references=ref1 --map references=ref2` or `=ref1,ref2`)."""
    mapping: dict[str, list[str]] = {}
    for pair in pairs:
        target, sep, source = pair.partition("=")
        target, source = target.strip(), source.strip()
        if not sep or not target or not source:
            raise UsageError(f"--map {pair!r}: expected CANONICAL=FIELD, e.g. --map text=hyp")
        if target not in CANONICAL_COLUMNS and not schema.is_human(target):
            raise UsageError(f"--map {pair!r}: {target!r} is not a canonical column "
                             f"({', '.join(CANONICAL_COLUMNS)}, human_<aspect>)")
        fields = [f.strip() for f in source.split(",")] if target == "references" else [source]
        mapping.setdefault(target, []).extend(f for f in fields if f)
        if target != "references" and len(mapping[target]) > 1:
            raise UsageError(f"--map: {target!r} is mapped twice ({', '.join(mapping[target])})")
    return mapping


# ----- readers ----------------------------------------------------------------------------
def _read_text(path: pathlib.Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, expected a file") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def read_jsonl(path: str | pathlib.Path, report: ConversionReport) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a line that is not a JSON object is
    dropped with its reason."""
    records = []
    for number, line in enumerate(_read_text(pathlib.Path(path)).split("\n"), start=1):
        if not line.strip():
            continue
        report.rows_read += 1
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            report.drop("line is not valid JSON", number)
            continue
        if not isinstance(value, dict):
            report.drop("line is not a JSON object", number)
            continue
        records.append((number, value))
    return records


def read_csv(path: str | pathlib.Path, report: ConversionReport, delimiter: str = ",") -> list[tuple[int, dict[str, Any]]]:
    """(row number, {header: cell}) for every data row; empty cells are missing values."""
    text = _read_text(pathlib.Path(path))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(f"{path}: empty file, expected a header row") from None
    if len(set(header)) != len(header):
        duplicate = next(h for h in header if header.count(h) > 1)
        raise InputError(f"{path}: header names column {duplicate!r} twice")
    records = []
    for number, cells in enumerate(reader, start=2):
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
        raise InputError(f"{path}: no such file or folder")
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


# ----- validation -------------------------------------------------------------------------
class _Drop(Exception):
    """This row cannot become a canonical row; the message is the reason."""


def _as_string(value: Any, column: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise _Drop(f"{column}: expected a string, got a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() else str(value)
    if column == "constraint" and isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    raise _Drop(f"{column}: expected a string, got {type(value).__name__}")


def _maybe_json(value: Any, kinds: tuple[type, ...]) -> Any:
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return value
        if isinstance(parsed, kinds):
            return parsed
    return value


def _as_references(values: list[Any]) -> list[str] | None:
    refs: list[str] = []
    for value in values:
        value = _maybe_json(value, (list,))
        if value is None:
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if not isinstance(item, str):
                raise _Drop(f"references: expected strings, got {type(item).__name__}")
            refs.append(item)
    return refs


def _as_attributes(value: Any) -> list[tuple[str, str]] | None:
    value = _maybe_json(value, (dict,))
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Drop(f"attributes: expected an object of aspect -> value, got {type(value).__name__}")
    out = []
    for key, item in value.items():
        if not isinstance(item, str):
            raise _Drop(f"attributes: value of {key!r} is not a string")
        out.append((str(key), item))
    return out


def _as_float(value: Any, column: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Drop(f"{column}: expected a number, got a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise _Drop(f"{column}: {value[:20]!r} is not a number") from None
    raise _Drop(f"{column}: expected a number, got {type(value).__name__}")


def _canonical_row(record: Mapping[str, Any], mapping: Mapping[str, list[str]]) -> dict[str, Any]:
    """One input record as a canonical row (raises `_Drop` with the reason)."""
    sources_used = {f for fields in mapping.values() for f in fields}
    row: dict[str, Any] = {}
    for column in [*CANONICAL_COLUMNS, *sorted(k for k in set(record) | set(mapping) if schema.is_human(k))]:
        if column in mapping:
            values = [record.get(f) for f in mapping[column]]
        elif column in record and column not in sources_used:
            values = [record[column]]
        else:
            continue
        if column == "references":
            row[column] = _as_references(values)
        elif column == "attributes":
            row[column] = _as_attributes(values[0])
        elif schema.is_human(column):
            row[column] = _as_float(values[0], column)
        else:
            row[column] = _as_string(values[0], column)
    if row.get("text") is None:
        raise _Drop("no text")
    if row.get("id") is None or row["id"] == "":
        raise _Drop("no id")
    return row


def _arrow_type(column: str):
    import pyarrow as pa

    if column == "references":
        return pa.list_(pa.string())
    if column == "attributes":
        return pa.map_(pa.string(), pa.string())
    if schema.is_human(column):
        return pa.float64()
    return pa.string()


def canonical_rows(
    records: Sequence[tuple[int, Mapping[str, Any]]],
    report: ConversionReport,
    mapping: Mapping[str, list[str]] | None = None,
    constants: Mapping[str, str] | None = None,
    id_prefix: str = "",
) -> list[dict[str, Any]]:
    """Validated canonical rows from (row number, record) pairs. `constants` fill a column
    for every row (`dataset`, `system`) unless the row has its own value; rows without an id
    get `id_prefix + row number`. Duplicate ids keep the first row."""
    mapping = dict(mapping or {})
    constants = dict(constants or {})
    seen_fields: set[str] = set()
    for _, record in records:
        seen_fields.update(record)
    for target, fields in mapping.items():
        absent = [f for f in fields if f not in seen_fields]
        if absent and records:
            raise InputError(f"{', '.join(report.inputs)}: no field {absent[0]!r} (mapped to {target!r}); "
                             f"fields: {', '.join(sorted(seen_fields))}")
    used = {f for fields in mapping.values() for f in fields}
    report.ignored_fields = sorted(f for f in seen_fields
                                   if f not in used and f not in CANONICAL_COLUMNS and not schema.is_human(f))
    rows, ids = [], set()
    generate_ids = "id" not in mapping and "id" not in seen_fields
    for number, record in records:
        record = dict(record)
        if generate_ids:
            record["id"] = f"{id_prefix}{number}"
        for column, value in constants.items():
            if record.get(column) is None and column not in mapping:
                record[column] = value
        try:
            row = _canonical_row(record, mapping)
        except _Drop as exc:
            report.drop(str(exc), number)
            continue
        if row["id"] in ids:
            report.drop("duplicate id (the first row with it is kept)", number)
            continue
        ids.add(row["id"])
        rows.append(row)
    return rows


def rows_to_table(rows: Sequence[Mapping[str, Any]]):
    """Canonical rows as an Arrow table with canonical column types (columns in canonical
    order, then human_* sorted; a column absent from every row is left out)."""
    import pyarrow as pa

    present = {key for row in rows for key, value in row.items() if value is not None} | {"id", "text"}
    order = [c for c in CANONICAL_COLUMNS if c in present] + sorted(c for c in present if schema.is_human(c))
    arrays = [pa.array([row.get(c) for row in rows], type=_arrow_type(c)) for c in order]
    return pa.Table.from_arrays(arrays, names=order)


def detect_format(path: str) -> str:
    suffix = pathlib.Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return suffix[1:]
    if suffix == ".parquet" or pathlib.Path(path).is_dir():
        return "parquet"
    raise UsageError(f"{path}: cannot tell the format from the name; pass --format {'|'.join(FORMATS)}")


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
        raise InputError(f"{', '.join(report.inputs)}: no row could be converted ({reasons})")
    table = rows_to_table(rows)
    report.rows_written = table.num_rows
    report.columns = table.column_names
    return table, report

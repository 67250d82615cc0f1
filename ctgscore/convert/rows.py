"""Input records -> validated canonical rows and their Arrow table: the column mapping, the
canonical types (`scoring.schema`), and the reason a record is dropped (docs/convert.md)."""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping, Sequence

from ctgscore.convert.report import ConversionReport
from ctgscore.convert.seen_ids import SeenIds
from scoring import schema
from scoring.cell_types import lone_surrogate
from scoring.display_names import quoted, quoted_list
from scoring.errors import InputError, UsageError

CANONICAL_COLUMNS = ("id", "dataset", "doc_id", "system", "source", "prefix", "attribute", "attributes",
                     "constraint", "text", "references")


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


# ----- validation -------------------------------------------------------------------------
class _Drop(Exception):
    """This row cannot become a canonical row; the message is the reason."""


def _check_text(value: str, column: str) -> str:
    """`value`, or `_Drop` when it holds a lone surrogate (a JSON `"\\ud800"` escape reads as one,
    and no Parquet string can hold it)."""
    found = lone_surrogate(value)
    if found is not None:
        raise _Drop(f"{column}: not valid UTF-8 ({found})")
    return value


def _as_string(value: Any, column: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _check_text(value, column)
    if isinstance(value, bool):
        raise _Drop(f"{column}: expected a string, got a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() else str(value)
    if column == "constraint" and isinstance(value, (dict, list)):
        return _check_text(json.dumps(value, ensure_ascii=False, sort_keys=True), column)
    raise _Drop(f"{column}: expected a string, got {type(value).__name__}")


def _maybe_json(value: Any, kinds: tuple[type, ...]) -> Any:
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):  # not JSON, a number past 4,300 digits, nesting too deep: text
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
            refs.append(_check_text(item, "references"))
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
            raise _Drop(f"attributes: value of {quoted(key)} is not a string")
        out.append((_check_text(str(key), "attributes"), _check_text(item, "attributes")))
    return out


def _as_float(value: Any, column: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Drop(f"{column}: expected a number, got a boolean")
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            raise _Drop(f"{column}: {str(value)[:20]}... is too large for a rating") from None
    elif isinstance(value, str):
        try:
            if "_" in value:  # Python reads "1_000" as 1000; a rating with an underscore is a typo
                raise ValueError(value)
            number = float(value)
        except ValueError:
            raise _Drop(f"{column}: {value[:20]!r} is not a number") from None
    else:
        raise _Drop(f"{column}: expected a number, got {type(value).__name__}")
    if not math.isfinite(number):  # NaN or Infinity (JSON's NaN, "inf", 1e999) would enter every mean
        raise _Drop(f"{column}: {str(value)[:20]!r} is not a finite number")
    return number


def _is_rating(name: str) -> bool:
    """A `human_<aspect>` field that can be a column: its name holds no lone surrogate (a JSON
    `"human_\\ud800"` key; no Parquet file can name a column so, so it is left out and listed)."""
    return schema.is_human(name) and lone_surrogate(name) is None


def _canonical_row(record: Mapping[str, Any], mapping: Mapping[str, list[str]],
                   warnings: list[str] | None = None) -> dict[str, Any]:
    """One input record as a canonical row (raises `_Drop` with the reason). An unparsable human
    rating becomes null with a warning appended to `warnings`: the generation is kept."""
    sources_used = {f for fields in mapping.values() for f in fields}
    row: dict[str, Any] = {}
    for column in [*CANONICAL_COLUMNS, *sorted(k for k in set(record) | set(mapping) if _is_rating(k))]:
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
            try:
                row[column] = _as_float(values[0], column)
            except _Drop as exc:
                row[column] = None
                if warnings is not None:
                    warnings.append(f"{exc} (kept as null)")
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


#: the most `human_<aspect>` columns one conversion writes: each is a column of every row, so a
#: file whose rows each name another one (`human_<row id>`) would make a table of rows x rows cells
#: (10,000 rows of 45 bytes: 1 GB and 12 s); real dumps rate a handful of aspects
MAX_RATING_COLUMNS = 1_000


class RowConverter:
    """Records -> validated canonical rows, one batch at a time, with what must hold across the
    whole input decided first from `seen_fields` (every field of every readable record: a
    first pass over the input): the `--map` check, the fields left out, whether ids are
    generated. Duplicate ids are found across batches (the ids written so far are kept, compact:
    `SeenIds`)."""

    def __init__(self, seen_fields: set[str], report: ConversionReport, mapping: Mapping[str, list[str]] | None = None,
                 constants: Mapping[str, str] | None = None, id_prefix: str = "", any_records: bool = True):
        self.mapping = dict(mapping or {})
        self.constants = dict(constants or {})
        self.id_prefix = id_prefix
        for target, fields in self.mapping.items():
            absent = [f for f in fields if f not in seen_fields]
            if absent and any_records:
                # a field named by `--map` that the data does not have: a usage mistake (exit 2)
                raise UsageError(f"{', '.join(report.inputs)}: no field {absent[0]!r} (mapped to {target!r} by --map); "
                                 f"fields: {quoted_list(sorted(seen_fields), quote=False)}")
        used = {f for fields in self.mapping.values() for f in fields}
        # a field name holding a lone surrogate is listed escaped (`\\ud800`): it cannot be printed or written as is
        report.ignored_fields = sorted(f.encode("utf-8", "backslashreplace").decode("utf-8") for f in seen_fields
                                       if f not in used and f not in CANONICAL_COLUMNS and not _is_rating(f))
        self.generate_ids = "id" not in self.mapping and "id" not in seen_fields
        candidates = {*seen_fields, *self.mapping, *self.constants, "id", "text"}
        #: every column a row can have, in table order (`rows_to_table`)
        self.columns = _column_order(c for c in candidates if c in CANONICAL_COLUMNS or _is_rating(c))
        ratings = [c for c in self.columns if _is_rating(c)]
        if len(ratings) > MAX_RATING_COLUMNS:
            raise InputError(f"{', '.join(report.inputs)}: {len(ratings):,} distinct rating fields (human_<aspect>), "
                             f"more than the {MAX_RATING_COLUMNS:,} a conversion writes as columns: "
                             f"{quoted_list(ratings, 5)} (a key that varies from row to row, such as human_<row id>, "
                             "is data rather than an aspect: store the aspect as its value)")
        self.ids = SeenIds()  # of the rows written so far

    def convert(self, records: Iterable[tuple[int, Mapping[str, Any]]], report: ConversionReport) -> list[dict[str, Any]]:
        """The batch's canonical rows; drops and warnings go to `report` in row order. The
        batch's ids are looked up among earlier batches' at once (`SeenIds`), then each row in
        turn: the first row with an id is kept."""
        checked: list[tuple[int, dict[str, Any] | None, str | list[str]]] = []  # (number, row, warnings | drop reason)
        for number, record in records:
            record = dict(record)
            if self.generate_ids:
                record["id"] = f"{self.id_prefix}{number}"
            for column, value in self.constants.items():
                if record.get(column) is None and column not in self.mapping:
                    record[column] = value
            warnings: list[str] = []
            try:
                checked.append((number, _canonical_row(record, self.mapping, warnings), warnings))
            except _Drop as exc:
                checked.append((number, None, str(exc)))
            del record
        earlier = self.ids.seen([row["id"] for _, row, _ in checked if row is not None])
        rows, kept = [], set()
        for number, row, notes in checked:
            if row is None:
                report.drop(notes, number)
                continue
            for warning in notes:
                report.warn(warning, number)
            if row["id"] in kept or row["id"] in earlier:
                report.drop("duplicate id (the first row with it is kept)", number)
                continue
            kept.add(row["id"])
            rows.append(row)
        checked.clear()
        self.ids.add(row["id"] for row in rows)
        return rows


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
    seen_fields: set[str] = set()
    for _, record in records:
        seen_fields.update(record)
    converter = RowConverter(seen_fields, report, mapping, constants, id_prefix, any_records=bool(records))
    return converter.convert(records, report)


def _column_order(columns: Iterable[str]) -> list[str]:
    """Canonical columns in canonical order, then human_* sorted."""
    present = set(columns)
    return [c for c in CANONICAL_COLUMNS if c in present] + sorted(c for c in present if schema.is_human(c))


def present_columns(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """The columns some row has a value in, and `id` and `text` (always written)."""
    return {key for row in rows for key, value in row.items() if value is not None} | {"id", "text"}


def arrow_schema(columns: Sequence[str]):
    import pyarrow as pa

    return pa.schema([pa.field(c, _arrow_type(c)) for c in columns])


def rows_to_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None):
    """Canonical rows as an Arrow table with canonical column types (columns in canonical
    order, then human_* sorted; a column absent from every row is left out unless `columns`
    names the columns to write)."""
    import pyarrow as pa

    order = list(columns) if columns is not None else _column_order(present_columns(rows))
    arrays = [pa.array([row.get(c) for row in rows], type=_arrow_type(c)) for c in order]
    return pa.Table.from_arrays(arrays, names=order)

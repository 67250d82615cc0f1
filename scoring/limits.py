"""Bounds on what one row and one input file may hold (docs/schema.md, "Input limits").

A generation dump is whoever-uploaded-it's data: one cell of 50 MB, a row with a million
references or a JSON constraint nested a hundred thousand deep must cost one row error, not the
shard or the process. `RowLimits` holds the per-cell caps; `cell_problem` checks a row against
them in linear time and constant extra memory, before any parser or tokeniser sees the row
(`RowMetric.check_row`, run by `score_rows` and by the job's CPU stage alike).

`inflation_problem` checks a Parquet footer: a file whose declared uncompressed size is
`max_inflation` times its own size (and more than `INFLATION_FLOOR_BYTES`) is refused before
any row is decoded. Real corpora declare 1.2 to 2.6 times their size; snappy cannot compress
more than about 21 to 1; a zip bomb declares thousands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping

from scoring.errors import UsageError

MAX_CELL_BYTES = 1_000_000  # UTF-8 bytes of one cell (a list cell: all its strings together)
MAX_REFERENCES = 1_000  # items of one list cell (references per row)
MAX_JSON_DEPTH = 64  # nesting of a JSON cell (a CoDI constraint is 2 deep)
MAX_INFLATION = 100.0  # declared uncompressed bytes / file bytes
INFLATION_FLOOR_BYTES = 16 * 1024 * 1024  # a file declaring less than this is never refused

_BRACKETS = re.compile(r"[\[\]{}]")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


@dataclass(frozen=True)
class RowLimits:
    """Per-cell caps; each is one row error naming the row's field when exceeded."""

    max_cell_bytes: int = MAX_CELL_BYTES
    max_references: int = MAX_REFERENCES
    max_json_depth: int = MAX_JSON_DEPTH

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"limit {item.name} must be a positive integer, not {value!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "RowLimits":
        """From `{name: value}` (a job's `limits`, `score --limit`); unknown names refused."""
        known = {item.name for item in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"unknown limit {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**dict(values))


def utf8_size_exceeds(text: str, limit: int) -> bool:
    """len(text.encode()) > limit, without encoding a text that is clearly over or under."""
    if len(text) > limit:
        return True  # every character takes at least one byte
    if 4 * len(text) <= limit:
        return False
    return len(text.encode("utf-8", "surrogatepass")) > limit


def _list_size_exceeds(items, limit: int) -> bool:
    """Whether the strings of a list cell take more than `limit` UTF-8 bytes together."""
    strings = [item for item in items if isinstance(item, str)]
    chars = sum(len(item) for item in strings)
    if chars > limit or 4 * chars <= limit:
        return chars > limit
    return sum(len(item.encode("utf-8", "surrogatepass")) for item in strings) > limit


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether the JSON text nests arrays/objects deeper than `limit`, by one scan of its
    brackets outside strings (no parser, no recursion). Not a validity check."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _BRACKETS.finditer(_JSON_STRING.sub('""', text)):
        if match.group(0) in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def value_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether a decoded value (dicts and lists, as a map or struct column gives them) nests
    deeper than `limit`, walked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def cell_problem(row: Mapping[str, Any], columns: Iterable[str], limits: RowLimits,
                 json_columns: Iterable[str] = ()) -> str | None:
    """The first cap `row` breaks in `columns` (one line naming the field), or None. Strings:
    UTF-8 size; lists: item count, then their strings' size together; `json_columns`: nesting
    depth (as JSON text, or as a decoded value)."""
    json_columns = set(json_columns)
    for column in columns:
        value = row.get(column)
        if value is None:
            continue
        if isinstance(value, str):
            if utf8_size_exceeds(value, limits.max_cell_bytes):
                return f"field '{column}' holds more than {limits.max_cell_bytes} bytes (max_cell_bytes)"
            if column in json_columns and json_depth_exceeds(value, limits.max_json_depth):
                return f"field '{column}' nests deeper than {limits.max_json_depth} levels (max_json_depth)"
        elif isinstance(value, (list, tuple)):
            if len(value) > limits.max_references:
                return (f"field '{column}' holds {len(value)} items, more than {limits.max_references} "
                        f"(max_references)")
            if _list_size_exceeds(value, limits.max_cell_bytes):
                return f"field '{column}' holds more than {limits.max_cell_bytes} bytes (max_cell_bytes)"
            if column in json_columns and value_depth_exceeds(value, limits.max_json_depth):
                return f"field '{column}' nests deeper than {limits.max_json_depth} levels (max_json_depth)"
        elif isinstance(value, dict) and column in json_columns and value_depth_exceeds(value, limits.max_json_depth):
            return f"field '{column}' nests deeper than {limits.max_json_depth} levels (max_json_depth)"
    return None


def declared_size(metadata, columns: Iterable[str] | None = None) -> int:
    """Uncompressed bytes a Parquet footer declares (its column chunks' `total_uncompressed_size`),
    over `columns` (top-level names) when given, else all."""
    wanted = None if columns is None else set(columns)
    total = 0
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            if wanted is None or chunk.path_in_schema.split(".", 1)[0] in wanted:
                total += int(chunk.total_uncompressed_size)
    return total


def inflation_problem(metadata, file_size: int, max_inflation: float = MAX_INFLATION,
                      columns: Iterable[str] | None = None) -> str | None:
    """Why a Parquet file is refused for inflating (naming both sizes), or None."""
    declared = declared_size(metadata, columns)
    if file_size <= 0 or declared <= INFLATION_FLOOR_BYTES or declared <= max_inflation * file_size:
        return None
    return (f"declares {declared} uncompressed bytes in a file of {file_size} bytes "
            f"({declared / file_size:.0f} times, more than max_inflation={max_inflation:g})")

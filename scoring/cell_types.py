"""The Python type each canonical column must hold in a row given as values (docs/schema.md).

Rows read from Parquet are typed by Arrow (`scoring.schema.wrong_type` refuses a column of
another type, and a value Arrow cannot decode is its row's error). A row handed to the library
as a dict is not: an int `text`, bytes, a string where `references` should be a list, or a
string holding a lone surrogate (what `json.loads` makes of a `"\\ud800"` escape, and what no
UTF-8 file or Parquet string can hold) would reach a tokeniser, fail there with a message that
names no field, or be scored as something else (a string of references as its characters).
`cell_type_problem` names the field instead; `RowMetric` applies it before anything else
(`RowMetric.check_types`), so such a value costs one row error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Iterable, Sequence

from scoring.limits import RowLimits
from scoring.schema import LIST_COLUMNS, MAP_COLUMNS, STRING_COLUMNS, is_human

_SURROGATE = re.compile("[\ud800-\udfff]")


def first_lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text`, or None when it holds none."""
    if text.isascii():
        return None
    match = _SURROGATE.search(text)
    return None if match is None else match.start()


def lone_surrogate(text: str) -> str | None:
    """Where `text` holds a lone surrogate, which cannot be written as UTF-8 ("a lone surrogate
    \\ud800 at character 3"); None when it holds none."""
    index = first_lone_surrogate(text)
    if index is None:
        return None
    return f"a lone surrogate \\u{ord(text[index]):04x} at character {index}"


def surrogate_problem(column: str, text: str) -> str | None:
    """Why `text` cannot be written as UTF-8 (its lone surrogate named), or None."""
    found = lone_surrogate(text)
    return None if found is None else f"field '{column}' is not valid UTF-8 ({found})"


def _kind(value: Any) -> str:
    return type(value).__name__


def _list_items(value: Any) -> Sequence[Any] | None:
    """The items of a list cell (a list, a tuple or a NumPy array, as pandas rows give them), or
    None for any other value (a string, a dict, a number)."""
    if isinstance(value, (list, tuple)):
        return value
    if hasattr(value, "tolist") and getattr(value, "ndim", None) == 1:
        return value
    return None


def _string_item_problem(column: str, value: Any, where: str) -> str | None:
    if not isinstance(value, str):
        return f"field '{column}' {where} must be a string, got {_kind(value)}"
    return surrogate_problem(column, value)


def _map_problem(column: str, value: Any) -> str | None:
    if isinstance(value, Mapping):
        pairs: Iterable[Any] = value.items()
    elif isinstance(value, (list, tuple)):  # Arrow's map: a list of (key, value) pairs
        pairs = value
    else:
        return f"field '{column}' must be a map of strings (aspect -> value), got {_kind(value)}"
    seen: set[Any] = set()
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            return f"field '{column}' must be a map of strings (aspect -> value), got an item {_kind(pair)}"
        key, item = pair
        problem = _string_item_problem(column, key, "key")
        if problem is None:
            if key in seen:  # an Arrow map may repeat a key; a dict would keep its last value
                return f"field '{column}' names the key {key[:40]!r} twice"
            seen.add(key)
        if problem is None and item is not None:
            problem = _string_item_problem(column, item, f"value of {str(key)[:40]!r}")
        if problem is not None:
            return problem
    return None


def cell_type_problem(row: Mapping[str, Any], columns: Iterable[str], json_columns: Iterable[str] = (),
                      limits: RowLimits | None = None) -> str | None:
    """The first of `columns` whose value in `row` is not of its canonical type (one line naming
    the field), or None. Null values pass (whether a null is allowed is the metric's question);
    so do null items of a list (the metrics name them: "null reference"). A `json_columns`
    value may also be the decoded object (a dict). With `limits`, the items of a list longer
    than `max_references` and the characters of a string longer than `max_cell_bytes` are not
    looked at: that cell is refused by its cap (`scoring.limits.cell_problem`), in constant time."""
    json_columns = set(json_columns)
    max_items = limits.max_references if limits is not None else None
    max_chars = limits.max_cell_bytes if limits is not None else None
    for column in columns:
        value = row.get(column)
        if value is None:
            continue
        problem = None
        if column in STRING_COLUMNS:
            if isinstance(value, dict) and column in json_columns:
                continue
            if not isinstance(value, str):
                return f"field '{column}' must be a string, got {_kind(value)}"
            if max_chars is None or len(value) <= max_chars:
                problem = surrogate_problem(column, value)
        elif column in LIST_COLUMNS:
            items = _list_items(value)
            if items is None:
                return f"field '{column}' must be a list of strings, got {_kind(value)}"
            if max_items is not None and len(items) > max_items:
                continue
            for index, item in enumerate(items):
                problem = None if item is None else _string_item_problem(column, item, f"item {index}")
                if problem is not None:
                    break
        elif column in MAP_COLUMNS:
            problem = _map_problem(column, value)
        elif is_human(column) and (isinstance(value, bool) or not isinstance(value, (int, float))):
            problem = f"field '{column}' must be a number, got {_kind(value)}"
        if problem is not None:
            return problem
    return None


def writable_value(column: str, value: Any) -> Any:
    """A carried value as an output table can hold it: itself, or None when it is not of its
    column's type (its row is an error saying so, `cell_type_problem`)."""
    if value is None:
        return None
    return None if cell_type_problem({column: value}, (column,)) is not None else value

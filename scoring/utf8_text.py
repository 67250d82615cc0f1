"""A user's file read as UTF-8 text, or one error naming the file, the line and the byte; an
Arrow column or table read as Python values, or one error naming the first value that is not
UTF-8 (Parquet can carry such bytes), never decoded with replacement characters; and, for the
commands that leave out a row whose key is not UTF-8 instead (`meta_eval.row_account`, the
splits of a corpus), which rows those are (`unreadable_mask`), their reason and where the first
one is (`unreadable_counts`, by the rule of `scoring.first_reason`)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from scoring.errors import InputError


def decode_utf8(data: bytes, name: object, error: type[Exception] = InputError, encoding: str = "utf-8") -> str:
    """`data` decoded (`encoding`: "utf-8", or "utf-8-sig" to drop a leading BOM); bytes that are
    not UTF-8 raise `error("<name>: not UTF-8 text (line L, byte B)")`, L 1-based, B the offset
    of the first bad byte in the file."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{name}: not UTF-8 text (line {line}, byte {exc.start})") from None


def first_undecodable(values) -> int | None:
    """The position of the first value of `values` (an Arrow array or chunked array, or a
    pandas Series) that cannot become a Python string (invalid UTF-8 in a Parquet string
    column), or None. Only worth calling once reading the column as a whole has failed."""
    pandas = hasattr(values, "iloc")
    for row in range(len(values)):
        try:
            values.iloc[row] if pandas else values[row].as_py()
        except ValueError:  # UnicodeDecodeError among them
            return row
    return None


def column_values(values, error: Callable[[int], Exception]) -> list:
    """`values.to_pylist()` of an Arrow column; where a value is not UTF-8, `error(row)` of the
    first such row is raised instead."""
    try:
        return values.to_pylist()
    except UnicodeDecodeError:
        row = first_undecodable(values)
        if row is None:
            raise
        raise error(row) from None


def table_rows(table, error: Callable[[int, str], Exception]) -> list[dict]:
    """`table.to_pylist()` of an Arrow table; where a value is not UTF-8, `error(row, column)` of
    the first column holding one (and its first such row) is raised instead."""
    try:
        return table.to_pylist()
    except UnicodeDecodeError:
        for column in table.column_names:
            row = first_undecodable(table.column(column))
            if row is not None:
                raise error(row, column) from None
        raise


def binary_as_text(column):
    """An Arrow column of Parquet `binary` (bytes stored without the UTF-8 annotation, as some
    writers store text) viewed as strings, without copying or checking a byte, so its values
    that are valid UTF-8 read as the text they hold and the others are found as any string
    that is not UTF-8 is; any other column unchanged."""
    import pyarrow as pa

    text = {pa.binary(): pa.string(), pa.large_binary(): pa.large_string()}.get(column.type)
    if text is None:
        return column
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([chunk.view(text) for chunk in column.chunks], text)
    return column.view(text)


def unreadable_reason(column: str) -> str:
    """The reason a row whose `column` is not valid UTF-8 is left out ("system key not valid UTF-8")."""
    return f"{column} key not valid UTF-8"


def unreadable_mask(values) -> np.ndarray | None:
    """Which rows of a string column (an Arrow array, chunked array, or what `pa.array` takes:
    a pandas Series of Arrow strings) hold a value that is not valid UTF-8, or None when none
    does (or the column holds no strings). A map column of strings (`attributes`): the rows
    where a name or a value is not. Each distinct value's bytes are tried once; nothing is
    decoded with replacement characters."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_map(array.type):  # a row is bad when one of its entries is
        offsets = array.offsets.to_numpy(zero_copy_only=False)  # into the whole (unsliced) keys and items
        per_row = np.zeros(len(array), bool)
        for part in (array.keys, array.items):
            bad = unreadable_mask(part)
            if bad is not None:
                running = np.concatenate([[0], np.cumsum(bad)])
                per_row |= running[offsets[1:]] > running[offsets[:-1]]
        return per_row if per_row.any() else None
    values = array.dictionary if pa.types.is_dictionary(array.type) else array
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return None
    try:
        values.validate(full=True)  # one pass in Arrow (2M keys: 14 ms, the per-value check 1.9 s)
        return None
    except pa.ArrowInvalid:
        pass
    if not pa.types.is_dictionary(array.type):
        array = pc.dictionary_encode(array)
    per_value, per_row = undecodable_dictionary(array)
    return per_row if per_value.any() else None


def undecodable_dictionary(array) -> tuple[np.ndarray, np.ndarray]:
    """For a dictionary-encoded Arrow string array: which of its dictionary's values are not
    valid UTF-8, and which rows hold one (a null row does not). Each value's bytes are tried
    once, never decoded with replacement characters."""
    import pyarrow as pa

    dictionary = array.dictionary
    binary = pa.large_binary() if pa.types.is_large_string(dictionary.type) else pa.binary()
    per_value = np.array([raw is not None and not is_utf8(raw) for raw in dictionary.view(binary).to_pylist()], bool)
    per_row = np.append(per_value, False)[array.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False)]
    return per_value, per_row


def is_utf8(raw: bytes) -> bool:
    """Whether `raw` decodes as UTF-8 (as Arrow's strings become Python's)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def unreadable_where(source: str, column: str, row: int | None, ids=None) -> str:
    """Where a key that is not valid UTF-8 is: the file, the column and the row (its `id` where
    `ids` give one: a frame joined from several files)."""
    from scoring.display_names import quoted

    where = f"row {row}" if row is not None else "some row"
    if row is not None and ids is not None:
        try:
            where = f"id {quoted(ids[row])}"
        except (UnicodeDecodeError, ValueError):
            pass
    return f"{source}: column {quoted(column)}, {where}"


def unreadable_counts(rows: int, unreadable: Sequence[tuple[str, np.ndarray]], source: str, ids=None,
                      where: Callable[[str, np.ndarray], str] | None = None):
    """The rows kept, the rows left out per reason (`unreadable_reason`) and where the first row
    of each is (`scoring.first_reason.ReasonCounts`) for the (column, rows whose key is not UTF-8)
    pairs of `rows` rows, in precedence order: a row counts under the first column that leaves it
    out, so each column's first row is the first one no earlier column took. It is named by
    `unreadable_where` (`source`, the column, the row or its id in `ids`), or by `where(column,
    rows it takes)` when given, e.g. by its file (`where_placed`)."""
    from scoring.first_reason import count_by_first_reason

    column_of = {unreadable_reason(column): column for column, _ in unreadable}

    def named(reason: str, taken: np.ndarray) -> str:
        column = column_of[reason]
        return where(column, taken) if where is not None else unreadable_where(source, column, int(taken[0]), ids)

    return count_by_first_reason(rows, [(unreadable_reason(column), bad) for column, bad in unreadable], named)


def where_placed(place: Callable[[int], tuple[str, int]]) -> Callable[[str, np.ndarray], str]:
    """An `unreadable_counts` `where` that names a row where `place(row)` says it is stored:
    (file, row in it), e.g. `scoring.parquet_read.row_places` of a folder read whole."""
    def where(column: str, rows: np.ndarray) -> str:
        file, row = place(int(rows[0]))
        return unreadable_where(file, column, row)
    return where


def text_or_bytes_series(series):
    """A pandas Series of keys as read, or, where some value is not valid UTF-8, every value as
    `text_or_bytes` gives it (an object Series, same index and name): pandas cannot index, key
    by shard or even filter a frame holding Arrow strings that are not text. A Series that holds
    no strings (an integer id) is returned as read."""
    import pandas as pd

    try:
        if unreadable_mask(series.array) is None:
            return series
    except (TypeError, ValueError):  # not strings (an integer id): nothing to decode
        return series
    return pd.Series(text_or_bytes(series.array), index=series.index, dtype=object, name=series.name)


def text_or_bytes(values) -> list:
    """The values of a string column (what `unreadable_mask` takes) as Python objects: each
    value that is valid UTF-8 as its text, each other one as the bytes stored (never decoded
    with replacement characters, so it equals no text and no other bytes), a null as None."""
    import pyarrow as pa

    array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    bad = unreadable_mask(array)
    if bad is None:
        return array.to_pylist()
    binary = pa.large_binary() if pa.types.is_large_string(array.type) else pa.binary()
    raw = array.view(binary).to_pylist()
    return [value if wrong or value is None else value.decode("utf-8") for value, wrong in zip(raw, bad)]

"""A user's file read as UTF-8 text, or one error naming the file, the line and the byte; an
Arrow column or table read as Python values, or one error naming the first value that is not
UTF-8 (Parquet can carry such bytes), never decoded with replacement characters."""

from __future__ import annotations

from typing import Callable

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

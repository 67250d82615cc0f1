"""A user's file read as UTF-8 text, or one error naming the file, the line and the byte; the
first value of an Arrow string column that is not UTF-8 (Parquet can carry such bytes)."""

from __future__ import annotations

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
    """The index of the first value of an Arrow string array (or chunked array) that Python
    cannot decode (invalid UTF-8), or None when every value decodes."""
    for row in range(len(values)):
        try:
            values[row].as_py()
        except UnicodeDecodeError:
            return row
    return None

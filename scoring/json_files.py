"""A JSON file from someone else (an idf table, a splits JSON, a `--previous` board, a template
set) read whole, or one reason that says where it fails (docs/security.md, "Files beside the
dumps are data too"): bytes that are not UTF-8 name their line and byte, a syntax error its
line and column, a value nested past the reader is "nested too deep", and a number of more
than 4,300 digits says so. Callers put the file's name and what they expected in front."""

from __future__ import annotations

import json
import os
from typing import Any


class UnreadableJson(ValueError):
    """A JSON file that cannot be read; `str()` is the reason, with its line where there is one."""


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value of the file at `path`; `UnreadableJson` when it is not UTF-8 or not JSON
    (`OSError` as `open` raises it)."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UnreadableJson(f"not UTF-8 text (line {line}, byte {exc.start})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise UnreadableJson("nested too deep") from None
    except ValueError as exc:  # a syntax error (its line and column), a number past the digit limit
        raise UnreadableJson(" ".join(str(exc).split()) or type(exc).__name__) from None

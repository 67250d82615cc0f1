"""JSON objects that name each key once: `json.loads(text, object_pairs_hook=unique_keys)`.

`json.loads` keeps the last value of a key given twice without a word, so a line holding two
`text` values (or two `index` values) would lose one; files read from others refuse that."""

from __future__ import annotations

from typing import Any


class DuplicateKey(ValueError):
    """A JSON object names one key twice; `args[0]` is the key."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` that raises `DuplicateKey` naming the first key given twice."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        raise DuplicateKey(next(key for key, _ in pairs if key in seen or seen.add(key)))
    return out

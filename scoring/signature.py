"""Reproducibility signatures: every output names exactly what produced it (the sacreBLEU way)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


def stable_hash(value: Any, length: int = 12) -> str:
    """Short sha256 of a JSON-serialisable value (key order independent). A string holding a
    lone surrogate (a row given as Python values) hashes too ("surrogatepass": every other string
    encodes exactly as UTF-8, so no hash changes)."""
    payload = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def library_versions(*names: str) -> dict[str, str]:
    """Installed versions of the named distributions ("missing" when absent)."""
    from importlib import metadata

    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


@dataclass(frozen=True)
class Signature:
    """What produced a number: metric, version and every parameter that can change it.

    `str(sig)` is a one-line `key:value|key:value` string, stable across runs; `sig.digest`
    is a short hash of it, used as part of the incremental-rescoring row key.
    """

    metric: str
    version: str
    params: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "version": self.version, **self.params}

    def __str__(self) -> str:
        parts = [f"metric:{self.metric}", f"v:{self.version}"]
        for key in sorted(self.params):
            value = self.params[key]
            if isinstance(value, (dict, list, tuple)):
                value = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
            parts.append(f"{key}:{value}")
        return "|".join(parts)

    @property
    def digest(self) -> str:
        return hashlib.sha256(str(self).encode("utf-8")).hexdigest()[:16]

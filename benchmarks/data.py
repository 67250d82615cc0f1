"""Where benchmarks find real data: the full project data beside the checkout when present,
else the slice committed under `tests/data/` (same layout, fewer rows)."""

from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
FULL_DATA = REPO.parent / "shared" / "data"
DATA_SLICE = REPO / "tests" / "data"


def real_data_root() -> pathlib.Path:
    return FULL_DATA if FULL_DATA.is_dir() else DATA_SLICE

"""Where benchmarks find real data: the full project data beside the checkout when present,
else the slice committed under `tests/data/` (same layout, fewer rows)."""

from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
FULL_DATA = REPO.parent / "shared" / "data"
DATA_SLICE = REPO / "tests" / "data"


def real_data_root() -> pathlib.Path:
    return FULL_DATA if FULL_DATA.is_dir() else DATA_SLICE


def publish(lines: list[str], results: pathlib.Path, write: bool = True) -> int:
    """Print a benchmark's Markdown table and, unless `write` is off (`--no-write`), keep it in
    `results` (benchmarks/results/); 0, the benchmark's exit status."""
    text = "\n".join(lines) + "\n"
    print(text)
    if write:
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(text, encoding="utf-8")
    return 0

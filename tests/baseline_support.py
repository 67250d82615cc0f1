"""Rows for the baseline metrics' tests: real SummEval rows with ragged references."""

from __future__ import annotations

import pathlib

import pyarrow.parquet as pq


def ragged_rows(sample_corpus: pathlib.Path, n: int, width: int) -> list[dict]:
    """The first `n` SummEval rows of the sample corpus, row i keeping 1 + i % width of its references."""
    rows = pq.read_table(sample_corpus / "summeval-00000.parquet").slice(0, n).to_pylist()
    for index, row in enumerate(rows):
        row["references"] = row["references"][: 1 + index % width]
    return rows

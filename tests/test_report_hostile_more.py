"""More hostile data through the report and statistics commands (`meta`, `compare`, `splits`,
`compmctg`): each attack either comes out as text in the report or fails with one line naming
the file, the column and the row (docs/security.md, "Data: text, never markup, paths or code"),
never as an internal error."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli_in_process

N = 12


def _not_utf8(values: list[str], row: int) -> pa.Array:
    """A Parquet string column whose value at `row` is not valid UTF-8 (a leading 0xff byte)."""
    raw = [v.encode() for v in values]
    raw[row] = b"\xff" + raw[row]
    return pa.array(raw, pa.binary()).view(pa.string())


def _scores(tmp_path, bad: str | None = None, row: int = 3):
    rng = np.random.default_rng(0)
    columns = {"id": [f"r{i}" for i in range(N)], "dataset": ["d"] * N, "system": ["A", "B"] * (N // 2),
               "doc_id": [f"doc{i // 2}" for i in range(N)], "m": rng.normal(size=N),
               "human_x": rng.integers(1, 5, size=N).astype(float)}
    table = pa.table({k: (_not_utf8(v, row) if k == bad else v) for k, v in columns.items()})
    path = tmp_path / f"scores_{bad}.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("column", ["system", "dataset", "doc_id"])
def test_compare_names_a_key_that_is_not_utf8(tmp_path, column):
    path = _scores(tmp_path, column)
    for extra in ([], ["-o", str(tmp_path / "board.html")]):
        proc = run_cli_in_process(["compare", "-s", path, "--resamples", "10", "--trials", "10", *extra])
        assert_user_error(proc, 1, str(path), f"column '{column}', row 3", "not valid UTF-8")
    assert not (tmp_path / "board.html").exists()


@pytest.mark.parametrize("column", ["system", "dataset", "doc_id"])
def test_meta_names_a_key_that_is_not_utf8(tmp_path, column):
    path = _scores(tmp_path, column)
    proc = run_cli_in_process(["meta", "-s", path, "-o", str(tmp_path / "rep"), "--resamples", "0",
                               "--metrics", "m", "--human-columns", "human_x"])
    assert_user_error(proc, 1, str(path), f"column '{column}', id 'r3'", "not valid UTF-8")


def test_splits_names_a_corpus_value_that_is_not_utf8(tmp_path):
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"tense": _not_utf8(["x", "y", "x", "y"], 2), "topic": ["a", "a", "b", "b"]}), corpus)
    proc = run_cli_in_process(["splits", "--corpus", corpus, "--protocol", "holdout", "-o", str(tmp_path / "s.json")])
    assert_user_error(proc, 1, str(corpus), "row 2", "'tense'", "not valid UTF-8")

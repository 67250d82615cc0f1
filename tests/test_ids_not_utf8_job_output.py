"""A scoring job's output (a file with a `signature` column, several runs, ids repeated across
shards) where an `id` is not valid UTF-8 reads: `load_scores` gives that id as its bytes and
`meta` uses its row, without a warning on the console (`scoring.job_output`). Before, pandas
could not even filter a frame indexed by such an id: `load_scores`, `meta` and `compmctg`
failed with "internal error: ArrowException: Unknown error: Wrapping ... failed"."""

from __future__ import annotations

import json
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BAD = b"\xff\xfe"
ROWS = [("r0", "A", "d0"), ("r1", "B", "d0"), ("r2", "A", "d1"), ("r3", "B", "d1")]


def spoil_id(part, row_id: str) -> None:
    """Rewrite the Parquet file `part` with `row_id` stored as bytes that are not UTF-8."""
    table = pq.read_table(part)
    ids = [BAD if value == row_id else value.encode() for value in table.column("id").to_pylist()]
    pq.write_table(table.set_column(table.column_names.index("id"), "id", pa.array(ids, pa.binary()).view(pa.string())),
                   part)


def job_output(tmp_path, layout: str):
    """Scores as the job writes them, r3 stored not UTF-8: `file`: one Parquet file of run `ppl`;
    `runs`: two runs (`ppl`, `words`), one folder each; `shards`: those runs over the shards of
    tests/test_job_output_shards.py (r1 in both, r3 in `sub/b`)."""
    from tests.test_job_output_shards import _job_output, _part

    if layout == "file":
        _part(tmp_path / "out", "ppl", "a", ROWS, "perplexity", name="scores.parquet")
        spoil_id(tmp_path / "out" / "scores.parquet", "r3")
        return tmp_path / "out" / "scores.parquet"
    if layout == "shards":
        out = _job_output(tmp_path)
        parts = [next((out / label / "sub" / "b").glob("*.parquet")) for label in ("ppl", "words")]
    else:
        out = tmp_path / "out"
        for label, column in (("ppl", "perplexity"), ("words", "words")):
            _part(out / label, label, "a", ROWS, column)
        parts = [next((out / label).glob("*.parquet")) for label in ("ppl", "words")]
    for part in parts:
        spoil_id(part, "r3")
    return out


ROWS_READ = {"file": 4, "runs": 4, "shards": 5}


@pytest.mark.parametrize("layout", list(ROWS_READ))
def test_load_scores_gives_an_id_not_utf8_as_its_bytes(tmp_path, layout):
    import ctgscore

    out = job_output(tmp_path, layout)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "values in the array are unorderable" on the console
        frame = ctgscore.load_scores(str(out))
    ids = frame["id"].tolist()
    assert ids[-1] == BAD and sorted(ids[:-1]) == ids[:-1] and "r3" not in ids
    assert len(frame) == ROWS_READ[layout] and frame.loc[len(frame) - 1, "perplexity"] > 0


@pytest.mark.parametrize("layout", list(ROWS_READ))
def test_meta_uses_the_row_of_an_id_not_utf8(tmp_path, cli, layout):
    out = job_output(tmp_path, layout)
    metrics = ["perplexity"] + (["words"] if layout != "file" else [])
    got = cli(["meta", "-s", out, "-o", tmp_path / "r", "--metrics", *metrics, "--human-columns", "human_q", "--json"])
    assert got.returncode == 0, got.stderr
    assert "Warning" not in got.stderr and "internal error" not in got.stderr
    summary = json.loads(got.stdout)
    assert summary["rows_in"] == summary["rows_used"] == ROWS_READ[layout]

"""Keys that are not valid UTF-8 come back as the bytes stored, by one rule
(`scoring.utf8_text.text_or_bytes_series`): the ids of every run `scoring.job_output.read_run`
reads, and the carried key columns of the table `load_scores` returns. The ids are converted
once, where they are read, so `load_scores` has nothing left to convert in them."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

import ctgscore
from scoring.job_output import read_runs
from scoring.utf8_text import text_or_bytes_series

BAD = b"\xff\xfe"


def arrow_strings(raw: list) -> pd.Series:
    """A pandas Series of Arrow strings holding `raw` (bytes, some not UTF-8) as stored."""
    return pa.table({"k": pa.array(raw, pa.binary()).view(pa.string())}).to_pandas()["k"].rename("key")


def test_a_series_of_text_or_of_no_strings_is_returned_as_read():
    text = arrow_strings([b"a", None, b"b"])
    numbers = pd.Series([3, 1, 2], name="id")
    assert text_or_bytes_series(text) is text
    assert text_or_bytes_series(numbers) is numbers


def test_a_value_not_utf8_becomes_its_bytes_and_every_other_its_text():
    stored = arrow_strings([b"a", BAD, None, "\u00e9".encode()]).set_axis([10, 11, 12, 13])
    got = text_or_bytes_series(stored)
    assert got.dtype == object and got.name == "key" and list(got.index) == [10, 11, 12, 13]
    assert got.tolist() == ["a", BAD, None, "\u00e9"]
    assert [type(v) for v in got] == [str, bytes, type(None), str]


def spoiled_job_output(tmp_path):
    """Runs `ppl` and `words` over shards `a` and `sub/b` (tests/test_job_output_shards.py: r1 in
    both shards), r3's id in `sub/b` stored not UTF-8 and r0's system in `a` too; doc_id stored
    as integers."""
    from tests.test_job_output_shards import _job_output

    out = _job_output(tmp_path)
    for label in ("ppl", "words", "only_a"):
        for part in (out / label).rglob("*.parquet"):
            table = pq.read_table(part)
            raw = {name: [None if v is None else v.encode() for v in table.column(name).to_pylist()]
                   for name in ("id", "system")}
            bad_id = [BAD if v == b"r3" else v for v in raw["id"]]
            bad_system = [BAD if i == b"r0" else s for i, s in zip(raw["id"], raw["system"])]
            doc_ids = [int(v[1:]) for v in table.column("doc_id").to_pylist()]
            for name, values in (("id", pa.array(bad_id, pa.binary()).view(pa.string())),
                                 ("system", pa.array(bad_system, pa.binary()).view(pa.string())),
                                 ("doc_id", pa.array(doc_ids, pa.int64()))):
                table = table.set_column(table.column_names.index(name), name, values)
            pq.write_table(table, part)
    return out


def test_read_runs_gives_ids_as_text_or_bytes_so_load_scores_needs_no_second_pass(tmp_path):
    """Every run's index (by id and shard here) holds text, and Python bytes for an id not
    UTF-8, never an Arrow string that is not text: converting its ids again changes nothing, so
    the id branch `load_scores` once had could never apply."""
    runs = read_runs(str(spoiled_job_output(tmp_path)))
    assert [run.frame.index.nlevels for run in runs] == [2, 2, 2]
    for run in runs:
        ids = pd.Series(run.frame.index.get_level_values(0).array)
        assert text_or_bytes_series(ids) is ids
    assert [BAD in set(run.frame.index.get_level_values(0)) for run in runs] == [True, True, False]  # only_a: shard a


def test_load_scores_gives_a_bad_id_and_a_bad_system_as_bytes_by_shard_and_keeps_integer_keys(tmp_path):
    frame = ctgscore.load_scores(str(spoiled_job_output(tmp_path)))
    rows = list(zip(frame["id"], frame["shard"], frame["system"], frame["doc_id"]))
    assert rows == [("r0", "a", BAD, 0), ("r1", "a", "B", 0), ("r1", "sub/b", "A", 1), ("r2", "a", "A", 1),
                    (BAD, "sub/b", "B", 1)]
    assert [type(v) for v in frame["system"]] == [bytes, str, str, str, str]
    assert pd.api.types.is_integer_dtype(frame["doc_id"])
    assert frame["perplexity"].notna().sum() == 4 and frame["words"].notna().all()  # r1 of sub/b failed in ppl

"""Row-level isolation for bytes, and never deleting what cannot be replaced, through the
job: an invalid UTF-8 value is its row's error, never a batch or job failure; a shard that
is unreadable this run (at its footer, or only once the workers read its rows) keeps the
output it had, and the run says so."""

from __future__ import annotations

import pathlib
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from ray_jobs.config import parse_config
from ray_jobs.score_corpus import JobError, run_job
from scoring.errors import CtgscoreError
from tests.job_support import make_corpus, make_rows, shard_output, shard_rows, write_rows


def job(input_dir, output_dir, **extra):
    return parse_config({
        "input": str(input_dir), "output": str(output_dir), "metrics": [{"name": "text_stats"}],
        "batch_size": 8, "part_rows": 10, "pool": {"min_size": 1, "max_size": 2, "num_cpus": 0.5},
        "progress": False, **extra,
    })


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_invalid_utf8_is_that_rows_error_not_a_job_failure(ray_local, tmp_path):
    rows = make_rows(0, 25)
    texts = pa.array([row["text"].encode() for row in rows[:7]] + [b"caf\xe9 \xff"] + [row["text"].encode() for row in rows[8:]])
    table = pa.Table.from_pylist(rows)
    table = table.set_column(table.schema.get_field_index("text"), "text", texts.view(pa.string()))
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "bytes.parquet")
    write_rows(tmp_path / "in" / "good.parquet", make_rows(1, 12))

    manifest = run_job(job(tmp_path / "in", tmp_path / "out"))

    report = manifest["metrics"]["text_stats"]
    assert report["rows_in"] == report["rows_out"] == 37 and report["rows_error"] == 1
    assert manifest["bad_shards"] == []
    out = shard_rows(tmp_path / "out" / "text_stats", "bytes.parquet")
    assert [row["id"] for row in out] == [row["id"] for row in rows]
    assert out[7]["error"] == "text is not valid UTF-8" and out[7]["text_stats_words"] is None
    assert all(row["error"] is None and row["text_stats_words"] for i, row in enumerate(out) if i != 7)  # neighbours scored
    assert report["error_samples"][0]["row"] == 7


def _corrupt_column(path: pathlib.Path, column: str) -> None:
    """Overwrite one column's pages: the footer and the other columns stay readable."""
    meta = pq.ParquetFile(path).metadata.row_group(0)
    chunk = meta.column(pq.ParquetFile(path).schema_arrow.get_field_index(column))
    data = bytearray(path.read_bytes())
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data[start : start + chunk.total_compressed_size] = b"\xab" * chunk.total_compressed_size
    path.write_bytes(bytes(data))


def _files(folder: pathlib.Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.parquet")}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_unreadable_shard_keeps_its_output(ray_local, tmp_path):
    paths = make_corpus(tmp_path / "in", shards=3, rows=20)
    for path in paths:  # uncompressed, so one column's pages can be overwritten
        pq.write_table(pq.read_table(path), path, compression="none")
    first = run_job(job(tmp_path / "in", tmp_path / "out"))
    assert first["metrics"]["text_stats"]["rows_out"] == 60
    folder = tmp_path / "out" / "text_stats"
    before = {p.stem: _files(shard_output(folder, p.name)) for p in paths}

    # shard 1's text pages are damaged: its footer and ids read fine, its rows fail in the workers
    _corrupt_column(paths[1], "text")
    with pytest.raises(JobError) as excinfo:
        run_job(job(tmp_path / "in", tmp_path / "out"))
    assert isinstance(excinfo.value, CtgscoreError) and excinfo.value.exit_code == 1
    message = str(excinfo.value)
    assert "1 bad input shard(s)" in message and str(paths[1]) in message and "while scoring" in message
    assert "\n" not in message
    assert {p.stem: _files(shard_output(folder, p.name)) for p in paths} == before  # nothing lost

    skipped = run_job(job(tmp_path / "in", tmp_path / "out", skip_bad_shards=True))
    assert [b["file"] for b in skipped["bad_shards"]] == [str(paths[1])]
    report = skipped["metrics"]["text_stats"]
    assert report["kept_for_bad_shards"] == [str(shard_output(folder, paths[1].name))]
    assert report["rows_out"] == 40 and report["rows_scored"] == 0  # the other shards reused
    assert {p.stem: _files(shard_output(folder, p.name)) for p in paths} == before

    # shard 2 truncated (unreadable footer): also kept, also reported
    paths[2].write_bytes(paths[2].read_bytes()[:-50])
    again = run_job(job(tmp_path / "in", tmp_path / "out", skip_bad_shards=True))
    assert sorted(b["file"] for b in again["bad_shards"]) == [str(paths[1]), str(paths[2])]
    assert sorted(again["metrics"]["text_stats"]["kept_for_bad_shards"]) == [
        str(shard_output(folder, p.name)) for p in paths[1:]
    ]
    assert {p.stem: _files(shard_output(folder, p.name)) for p in paths} == before


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_duplicate_ids_across_shards_are_scored_and_noted(ray_local, tmp_path):
    a, b = make_rows(0, 15), make_rows(1, 10)
    b[3]["id"], b[7]["id"] = a[2]["id"], a[9]["id"]  # two ids also in the other shard
    write_rows(tmp_path / "in" / "a.parquet", a)
    write_rows(tmp_path / "in" / "b.parquet", b)

    manifest = run_job(job(tmp_path / "in", tmp_path / "out"))

    note = manifest["duplicate_ids_across_shards"]
    assert note["count"] == 2
    assert sorted(example["id"] for example in note["examples"]) == sorted([a[2]["id"], a[9]["id"]])
    assert all(example["files"] == [str(tmp_path / "in" / "a.parquet"), str(tmp_path / "in" / "b.parquet")]
               for example in note["examples"])
    assert manifest["metrics"]["text_stats"]["rows_out"] == 25  # both rows of each duplicate scored
    assert shard_rows(tmp_path / "out" / "text_stats", "b.parquet")[3]["id"] == a[2]["id"]
    # an unchanged re-run carries the note over without reading any ids again
    again = run_job(job(tmp_path / "in", tmp_path / "out"))
    assert again["duplicate_ids_across_shards"] == note and again["metrics"]["text_stats"]["rows_scored"] == 0

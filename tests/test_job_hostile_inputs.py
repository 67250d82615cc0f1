"""Hostile inputs of the Ray job (`ctgscore run`): strangers' shards and a previous run's
outputs. Each input row comes out scored or with an error reason, a bad file is one bad shard
naming itself and why, and nothing is lost without a word (docs/job.md, docs/security.md)."""

from __future__ import annotations

import io
import json
import os
import pathlib

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ray_jobs.config import S3Config, parse_config
from ray_jobs.storage import listing
from ray_jobs.storage.shard_checks import BadShard, check_shard
from tests.job_support import make_rows, write_rows


def _zigzag(value: int) -> bytes:
    """An i64 as the Parquet footer's Thrift compact protocol writes it (zigzag varint)."""
    value, out = value * 2, b""
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            return out + bytes([low])
        out += bytes([low | 0x80])


def lying_footer(path: pathlib.Path, rows: int, claimed: int) -> None:
    """A valid Parquet file of `rows` rows in one row group whose footer's file-level row count
    says `claimed` (the first i64 field 3 of FileMetaData; the row group's own count is true)."""
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(make_rows(0, rows)), buffer)
    data = buffer.getvalue()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    old, new = b"\x16" + _zigzag(rows), b"\x16" + _zigzag(claimed)
    assert len(old) == len(new)
    path.write_bytes(data[:start] + data[start:-8].replace(old, new, 1) + data[-8:])
    assert pq.ParquetFile(path).metadata.num_rows == claimed


def _info(path: pathlib.Path) -> listing.ShardInfo:
    return listing.ShardInfo(uri=str(path), rel=path.name, size=path.stat().st_size, etag="e")


# ---- footers and schemas -------------------------------------------------------------------

@pytest.mark.parametrize("claimed", [320, 280])
def test_a_footer_whose_row_count_lies_is_a_bad_shard(tmp_path, claimed):
    """More rows declared than the row groups hold made the job write a part for rows that do
    not exist and then fail whole ("missing or overwritten"); fewer dropped the last rows
    without a word. Now the shard is bad, naming both counts."""
    path = tmp_path / "lie.parquet"
    lying_footer(path, 300, claimed)
    with pytest.raises(BadShard) as raised:
        check_shard(_info(path), fsspec.filesystem("file"), ("text",), read_ids=False)
    assert raised.value.reason == f"footer declares {claimed} rows but its row groups hold 300"


def test_a_column_given_twice_is_named(tmp_path):
    """Two columns of one name: the shard is bad, saying so (it said the column did not exist)."""
    path = tmp_path / "twice.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array(["x"]), pa.array(["y"])], names=["id", "text", "text"]),
                   path)
    with pytest.raises(BadShard) as raised:
        check_shard(_info(path), fsspec.filesystem("file"), ("text",), read_ids=False)
    assert raised.value.reason == "column 'text' appears more than once (column names must be unique)"


def _unit(path: pathlib.Path, start: int, stop: int, rows: int, columns=("id", "text")) -> str:
    return json.dumps({"uri": str(path), "rel": path.name, "start": start, "stop": stop, "rows": rows,
                       "columns": list(columns)})


def _read_errors(units: list[str]) -> list[str | None]:
    from ray_jobs.job.read import READ_ERROR, read_unit
    from ray_jobs.job.units import UNIT

    out = read_unit(pa.table({UNIT: pa.array(units, pa.string())}), "/", S3Config())
    return out.column(READ_ERROR).to_pylist()


def test_a_worker_reads_only_the_rows_the_plan_saw(tmp_path):
    """The read step checks the footer against the plan (rows taken from a previous manifest,
    which the plan trusts where the listing agrees): a false count fails the unit, so the shard
    is bad with that reason, instead of rows scored against a false plan."""
    path = tmp_path / "s.parquet"
    write_rows(path, make_rows(0, 10))
    errors = _read_errors([_unit(path, 0, 4, 10), _unit(path, 4, 6, 6), _unit(path, 8, 12, 12)])
    assert errors[0] is None
    assert errors[1] == ("its footer declares 10 rows, the plan 6 (the previous manifest's record of the file is false)"
                         " (while scoring)")
    assert errors[2].startswith("its footer declares 10 rows, the plan 12")


def test_a_worker_refuses_a_lying_footer_and_a_retyped_column(tmp_path):
    lie = tmp_path / "lie.parquet"
    lying_footer(lie, 30, 40)
    typed = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": pa.array([b"x", b"y"], pa.binary())}), typed)
    errors = _read_errors([_unit(lie, 30, 40, 40), _unit(typed, 0, 2, 2)])
    assert errors == ["footer declares 40 rows but its row groups hold 30 (while scoring)",
                      "column 'text' has type binary, expected string (while scoring)"]


# ---- the input listing ---------------------------------------------------------------------

def _shards(root: pathlib.Path):
    return listing.list_shards(str(root), fsspec.filesystem("file"))


@pytest.mark.timeout(60)
def test_a_fifo_a_broken_link_and_a_linked_folder_are_bad_shards(tmp_path):
    """A FIFO named like a shard made the listing wait forever (its md5 read never ends); a
    symbolic link in a loop or to nowhere failed the whole listing without naming itself. Each
    is now one bad shard naming itself; a link to a regular file is read as that file."""
    root = tmp_path / "in"
    write_rows(root / "good.parquet", make_rows(0, 3))
    os.mkfifo(root / "fifo.parquet")
    os.symlink(root / "loop.parquet", root / "loop.parquet")
    os.symlink(root / "nowhere", root / "dangling.parquet")
    (root / "folder").mkdir()
    os.symlink(root / "folder", root / "linked.parquet")
    os.symlink(root / "good.parquet", root / "alias.parquet")
    found = _shards(root)
    assert [s.rel for s in found] == ["alias.parquet", "good.parquet"]
    assert found[0].etag == found[1].etag and found[0].size == found[1].size
    why = {rel: reason for _, rel, reason in found.unusable}
    assert why == {
        "dangling.parquet": "cannot be read: No such file or directory (a symbolic link that leads nowhere or in a loop)",
        "fifo.parquet": "not a regular file (a FIFO, socket or device): not read",
        "linked.parquet": "a symbolic link to a folder, which the listing does not follow: not read",
        "loop.parquet": "cannot be read: Too many levels of symbolic links (a symbolic link that leads nowhere or in a loop)",
    }


@pytest.mark.timeout(60)
def test_the_plan_counts_a_fifo_as_a_bad_shard(tmp_path):
    from ray_jobs.job.plan import read_shards

    root = tmp_path / "in"
    write_rows(root / "good.parquet", make_rows(0, 3))
    os.mkfifo(root / "fifo.parquet")
    config = parse_config({"input": str(root), "output": str(tmp_path / "out"), "metrics": [{"name": "text_stats"}]})
    shards, bad, _ = read_shards(config, fsspec.filesystem("file"), ("text",))
    assert [s.rel for s in shards] == ["good.parquet"] and shards[0].num_rows == 3
    assert bad == [{"file": str(root / "fifo.parquet"), "rel": "fifo.parquet",
                    "error": "not a regular file (a FIFO, socket or device): not read"}]


# ---- the previous run's manifest ----------------------------------------------------------

def _one_part_run(tmp_path, retry: int):
    """A shard of 4 rows and its one part, as a run commits them, with `retry` rows marked for
    the next run (out of memory on a single row); returns (config, metric, shard, manifest)."""
    from types import SimpleNamespace

    from ray_jobs.job import layout
    from ray_jobs.job.commit import CommitResult, Cover
    from ray_jobs.job.plan import MetricPlan, Shard, ShardPlan
    from ray_jobs.job.verify import verify_metric

    path = tmp_path / "in" / "a.parquet"
    write_rows(path, make_rows(0, 4))
    info = listing.list_shards(str(tmp_path / "in"), fsspec.filesystem("file"))[0]
    shard = Shard(info, 4, {"id": "string", "text": "string"}, layout.input_version(info.etag, info.size))
    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "metrics": [{"name": "text_stats"}],
                           "part_rows": 4})
    metric = SimpleNamespace(label="text_stats", digest="d1")
    part = layout.PartName(0, 4, shard.version)
    uri = layout.part_uri(config.output, "text_stats", "a.parquet", part)
    pathlib.Path(uri).parent.mkdir(parents=True)
    pathlib.Path(uri).write_bytes(b"part bytes")
    listed = {f.uri: f for f in listing.list_outputs(fsspec.filesystem("file"), config.output)}
    plan = MetricPlan(metric=metric, shards={"a.parquet": ShardPlan(shard=shard, units=[(0, 4)])})
    committed = CommitResult(covers=[Cover("a.parquet", info.uri, 4, [(part, uri)], new={uri})])
    report = {"part": uri, "rows": 4, "size": len(b"part bytes"), "errors": retry, "skipped": 0, "retry": retry}
    verified = verify_metric(plan, committed, [report], listed)
    return config, metric, shard, {"metrics": {"text_stats": {"parts": verified.parts}}}


@pytest.mark.parametrize("retry", [0, 1])
def test_a_part_with_rows_to_retry_is_scored_again_next_run(tmp_path, retry):
    """A part holding rows marked for retry is incomplete (`incremental.part_is_complete`), but
    the manifest's record of it left the count out, so the next run, planning from the record,
    kept it as complete: "1 to retry next run" and then never retried."""
    from ray_jobs.job.manifest import unusable_manifest
    from ray_jobs.job.plan import plan_metric

    config, metric, shard, manifest = _one_part_run(tmp_path, retry)
    assert unusable_manifest(manifest) is None
    planned = plan_metric(fsspec.filesystem("file"), config, metric, [shard], previous=manifest)
    assert planned.footers_read == 0  # planned from the record alone
    assert planned.shards["a.parquet"].units == ([(0, 4)] if retry else [])

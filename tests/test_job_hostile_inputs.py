"""Hostile inputs of the Ray job (`ctgscore run`): strangers' shards and a previous run's
outputs. Each input row comes out scored or with an error reason, a bad file is one bad shard
naming itself and why, and nothing is lost without a word (docs/job.md, docs/security.md)."""

from __future__ import annotations

import hashlib
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
from tests.job_support import make_rows, part_bytes, write_rows


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


def test_parquet_files_in_hidden_folders_are_named_not_read(tmp_path):
    """`in/_under/x.parquet` was scored into `OUT/text_stats/_under/x/`, which
    `pd.read_parquet(OUT/text_stats)` skips (as it skips `_` and `.` folders of the input): its
    rows were missing there without a word. It is no shard now, and said to be not read."""
    import pandas as pd

    root = tmp_path / "in"
    write_rows(root / "good.parquet", make_rows(0, 3))
    write_rows(root / "_under" / "x.parquet", make_rows(1, 3))
    write_rows(root / "sub" / ".dot" / "y.parquet", make_rows(2, 3))
    write_rows(root / "sub" / "z_" / "_.z.parquet" / "w.parquet", make_rows(3, 3))
    assert len(pd.read_parquet(root)) == 3  # what a dataset reader sees of the input: good.parquet
    found = _shards(root)
    assert [s.rel for s in found] == ["good.parquet"]
    assert sorted(found.not_read) == sorted(str(root / rel) for rel in ("_under/x.parquet", "sub/.dot/y.parquet",
                                                                        "sub/z_/_.z.parquet/w.parquet"))
    assert "in folders whose names do not either" in listing.not_read_note(found.not_read)


def test_a_local_name_that_is_not_utf8_is_a_bad_shard_naming_itself(tmp_path):
    """Linux names are bytes: `x\\xff.parquet` was checked and failed as 'unreadable Parquet
    (UnicodeEncodeError ...)'; its name is what is wrong, and the listing says so."""
    root = tmp_path / "in"
    write_rows(root / "good.parquet", make_rows(0, 3))
    write_rows(root / "tmp.parquet", make_rows(1, 3))
    os.rename(root / "tmp.parquet", os.fsdecode(os.fsencode(root) + b"/x\xff\x1b.parquet"))
    found = _shards(root)
    assert [s.rel for s in found] == ["good.parquet"]
    assert found.unusable == [(str(root) + "/x\udcff\x1b.parquet", "x\udcff\x1b.parquet",
                               "its name is not valid UTF-8 (shown with \\udcXX escapes for the bytes): not read; rename it")]


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
    data = part_bytes("a.parquet", info.etag, info.size, "d1", 0, 4, errors=retry, retry=retry)
    pathlib.Path(uri).write_bytes(data)
    listed = {f.uri: f for f in listing.list_outputs(fsspec.filesystem("file"), config.output)}
    plan = MetricPlan(metric=metric, shards={"a.parquet": ShardPlan(shard=shard, units=[(0, 4)])})
    committed = CommitResult(covers=[Cover("a.parquet", info.uri, 4, [(part, uri)], new={uri})])
    report = {"part": uri, "rows": 4, "size": len(data), "errors": retry, "skipped": 0, "retry": retry,
              "md5": hashlib.md5(data).hexdigest()}
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
    assert planned.footers_read == 1 and planned.not_reused == []  # the part agrees with its record
    assert planned.shards["a.parquet"].units == ([(0, 4)] if retry else [])


def _recorded(tmp_path, rows_on_disk: int, recorded_rows: int, parts: dict[str, list[tuple[int, int]]]):
    """An input shard of `rows_on_disk` rows that a previous manifest records with
    `recorded_rows` (its true etag and size), and part files of its version named by `parts`
    (label -> row ranges). Returns (config, previous, shards, tree)."""
    from ray_jobs.job import layout
    from ray_jobs.job.plan import read_shards

    write_rows(tmp_path / "in" / "a.parquet", make_rows(0, rows_on_disk))
    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"),
                           "metrics": [{"name": "text_stats"}, {"name": "bleu"}]})
    fs = fsspec.filesystem("file")
    info = listing.list_shards(config.input, fs)[0]
    columns = {name: str(pq.read_schema(info.uri).field(name).type) for name in pq.read_schema(info.uri).names}
    previous = {"metrics": {"text_stats": {}},
                "input": {"files": [{"file": info.uri, "etag": info.etag, "size": info.size, "rows": recorded_rows,
                                     "columns": columns}]}}
    for label, ranges in parts.items():
        for start, stop in ranges:
            uri = layout.part_uri(config.output, label, "a.parquet",
                                  layout.PartName(start, stop, layout.input_version(info.etag, info.size)))
            pathlib.Path(uri).parent.mkdir(parents=True, exist_ok=True)
            pathlib.Path(uri).write_bytes(b"x")
    shards, bad, _ = read_shards(config, fs, ("text", "references"), previous)
    assert not bad and shards[0].num_rows == recorded_rows  # the plan takes the record as it is
    return config, previous, shards, listing.list_tree(fs, config.output)


@pytest.mark.parametrize(("on_disk", "recorded", "parts", "why"), [
    (10, 6, {}, "it records 6 rows, the file's footer 10"),  # nothing scored yet: 4 rows never scored
    (10, 14, {}, "it records 14 rows, the file's footer 10"),  # 4 rows that do not exist
    (10, 6, {"text_stats": [(0, 4), (4, 8), (8, 10)]}, "it records 6 rows, the file's footer 10"),  # parts past the end
    (10, 8, {"text_stats": [(0, 4), (4, 8), (8, 10)]}, "it records 8 rows, the file's footer 10"),  # a tiling, and more
])
def test_a_manifest_recording_false_row_counts_is_set_aside(tmp_path, on_disk, recorded, parts, why):
    """A manifest edited into false numbers of the right types: the plan used its row count
    without reading the footer, so a metric without parts scored rows 0-6 of 10 and the run
    reported "16 in -> 16 out", losing 4 rows without a word. The record is now used only where
    the output corroborates it; here the footer is read, and the manifest set aside, saying why."""
    from ray_jobs.job import vouch

    config, previous, shards, tree = _recorded(tmp_path, on_disk, recorded, parts)
    false, vouched = vouch.false_record(config, previous, shards, tree, fsspec.filesystem("file"), ("text",))
    assert false == f"its record of input file {shards[0].info.uri} is false: {why}" and not vouched


def test_a_manifest_recording_false_column_types_is_set_aside(tmp_path):
    from ray_jobs.job import vouch

    config, previous, shards, tree = _recorded(tmp_path, 5, 5, {})
    shards[0].columns["references"] = "string"
    false, _ = vouch.false_record(config, previous, shards, tree, fsspec.filesystem("file"), ("text",))
    assert false.endswith("is false: its column types differ from the file's footer")


@pytest.mark.parametrize("parts", [{"text_stats": [(0, 4), (4, 8), (8, 10)]},
                                   {"bleu": [(0, 10)], "text_stats": [(0, 4)]}])
def test_a_record_the_output_corroborates_costs_no_footer_read(tmp_path, monkeypatch, parts):
    """An unchanged night: parts of the shard's version tile its recorded rows in some metric
    folder, so the record is used without reading the footer (and ids are not checked again)."""
    from ray_jobs.job import vouch

    config, previous, shards, tree = _recorded(tmp_path, 10, 10, parts)
    monkeypatch.setattr(vouch.shard_checks, "check_shard", lambda *a, **k: pytest.fail("footer read"))
    assert vouch.false_record(config, previous, shards, tree, fsspec.filesystem("file"), ("text",)) == (None, True)


def test_a_true_record_without_parts_is_read_and_kept(tmp_path):
    """A metric added (no parts yet) or parts deleted: the footer is read and agrees; the
    manifest stays in use, but the shard's ids are checked (the record alone vouches for nothing)."""
    from ray_jobs.job import vouch

    config, previous, shards, tree = _recorded(tmp_path, 10, 10, {"text_stats": [(0, 4)]})
    assert vouch.false_record(config, previous, shards, tree, fsspec.filesystem("file"), ("text",)) == (None, False)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_forged_manifest_loses_no_row_and_lets_no_bad_shard_in(ray_local, tmp_path):
    """The real run: a previous manifest edited to record 6 rows for a 10-row shard and to list
    a shard of duplicate ids (bad in that run) as good, with its true etag, size, rows and
    columns. Before, the next run scored 6 of the 10 rows of a metric without parts ("16 in ->
    16 out", no word) and carried the duplicate note over, so the bad shard was scored."""
    from ray_jobs.score_corpus import run_job

    write_rows(tmp_path / "in" / "a.parquet", make_rows(0, 10))
    write_rows(tmp_path / "in" / "b.parquet", make_rows(1, 10))
    dup = make_rows(2, 4)
    dup[3]["id"] = dup[0]["id"]
    write_rows(tmp_path / "in" / "c.parquet", dup)

    def config(metrics):
        return parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "progress": False,
                             "metrics": [{"name": name} for name in metrics], "part_rows": 4, "skip_bad_shards": True,
                             "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}})

    first = run_job(config(["text_stats"]))
    assert [pathlib.Path(item["file"]).name for item in first["bad_shards"]] == ["c.parquet"]
    forged = json.loads((tmp_path / "out" / "manifest.json").read_text())
    for entry in forged["input"]["files"]:
        if entry["file"].endswith("a.parquet"):
            entry["rows"] = 6
    info = listing.list_shards(str(tmp_path / "in" / "c.parquet"), fsspec.filesystem("file"))[0]
    forged["input"]["files"].append({"file": info.uri, "etag": info.etag, "size": info.size, "rows": 4,
                                     "columns": forged["input"]["files"][0]["columns"]})
    forged["bad_shards"] = []
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(forged))

    second = run_job(config(["bleu"]))
    report = second["metrics"]["bleu"]
    assert report["rows_in"] == report["rows_out"] == 20
    scored = pq.read_table(tmp_path / "out" / "bleu" / "a").column("id").to_pylist()
    assert sorted(scored) == sorted(row["id"] for row in make_rows(0, 10))
    assert [pathlib.Path(item["file"]).name for item in second["bad_shards"]] == ["c.parquet"]
    assert "duplicate id" in second["bad_shards"][0]["error"]
    assert second["previous_manifest_ignored"] == (
        f"its record of input file {tmp_path / 'in' / 'a.parquet'} is false: it records 6 rows, the file's footer 10")


def test_row_groups_that_declare_more_rows_than_they_hold_fail_the_id_check(tmp_path):
    """A footer whose row group count (and the file's, alike) says 320 where the pages hold 300:
    the footer check cannot tell, but the id check reads 300 ids, and the shard is bad before
    any row is scored; a worker reading past row 300 would fail the shard anyway."""
    from ray_jobs.job.check import _check_one

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(make_rows(0, 300)), buffer)
    data = buffer.getvalue()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    footer = bytearray(data[start:-8])
    old, new = b"\x16" + _zigzag(300), b"\x16" + _zigzag(320)
    for at in (footer.find(old), footer.rfind(old)):  # the file's count, then its row group's
        footer[at : at + len(old)] = new
    path = tmp_path / "groups.parquet"
    path.write_bytes(data[:start] + bytes(footer) + data[-8:])
    assert pq.ParquetFile(path).metadata.row_group(0).num_rows == 320
    check_shard(_info(path), fsspec.filesystem("file"), ("text",), read_ids=False)  # the footer adds up
    reason, _table = _check_one(str(path), str(tmp_path), S3Config(), 1, 320)
    assert reason == "its 'id' column holds 300 values but its footer declares 320 rows"
    assert _check_one(str(path), str(tmp_path), S3Config(), 1, 300)[0] is None
    assert _read_errors([_unit(path, 300, 320, 320)]) == [
        "rows 300 to 320 read as 0 rows (its row groups hold fewer rows than their footer entries declare) (while scoring)"]


def test_a_column_name_that_is_not_utf8_is_named_as_such(tmp_path):
    buffer = io.BytesIO()
    pq.write_table(pa.table({"id": ["a"], "text": ["x"], "human_zz": [1.0]}), buffer, store_schema=False)
    path = tmp_path / "name.parquet"
    path.write_bytes(buffer.getvalue().replace(b"human_zz", b"human_\xff\xfe"))
    with pytest.raises(BadShard) as raised:
        check_shard(_info(path), fsspec.filesystem("file"), ("text",), read_ids=False)
    assert raised.value.reason == "its footer holds a name (a column's?) that is not valid UTF-8"


def test_tiling_is_linear_in_the_parts(tmp_path):
    """A folder of many parts (and overlapping ones) is judged by a walk over them, not pairs."""
    from ray_jobs.job.vouch import _tiles

    ranges = {(i, i + 1) for i in range(50_000)} | {(0, 7), (3, 50_001)}
    assert _tiles(ranges, 50_000) and _tiles(ranges, 50_001) and not _tiles(ranges, 50_002)
    assert _tiles({(0, 0)}, 0) and not _tiles({(0, 4)}, 0) and not _tiles(set(), 3)


def test_a_shard_without_id_names_a_few_of_its_columns(tmp_path):
    """The message listed every column: thousands of columns, or one name of 100,000 characters, made
    one bad shard's reason (kept whole in the manifest) hundreds of kilobytes."""
    names = ["x" * 100_000, *[f"c{i}" for i in range(1_000)], "text"]
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array([1], pa.int8())] * len(names), names=names), path)
    with pytest.raises(BadShard) as raised:
        check_shard(_info(path), fsspec.filesystem("file"), ("text",), read_ids=False)
    reason = raised.value.reason
    assert reason.startswith("missing required column 'id' (has: " + "x" * 80 + "..., c0, c1,")
    assert reason.endswith(", c18 and 982 more)") and len(reason) < 400


def test_a_worker_refuses_columns_other_than_planned(tmp_path):
    """A record claiming the file lacks `references` (so no metric reads it and its rows would
    be skipped as having none) or types a column otherwise: the unit's digest of the planned
    column types differs from the file's, so the shard is bad, not scored from a false schema."""
    from ray_jobs.job.units import columns_digest

    path = tmp_path / "s.parquet"
    write_rows(path, make_rows(0, 4))
    schema = pq.read_schema(path)
    true = {name: str(schema.field(name).type) for name in schema.names}
    claimed = {name: kind for name, kind in true.items() if name != "references"}

    def unit(columns):
        return json.dumps({"uri": str(path), "rel": path.name, "start": 0, "stop": 4, "rows": 4,
                           "schema": columns_digest(columns), "columns": ["id", "text"]})

    assert _read_errors([unit(true), unit(claimed)]) == [
        None, "its columns or their types differ from the plan's (the previous manifest's record of the file is false)"
              " (while scoring)"]


def test_a_recorded_shard_failing_a_check_the_last_run_did_not_make_keeps_the_manifest(tmp_path):
    """A metric added that reads a column the last run's metrics did not (`references`, typed
    int here): the footer check fails, but the record is not false, so the manifest stays; the
    workers refuse the shard when they read it (`read._check_plan`), naming the column."""
    from ray_jobs.job import vouch

    config, previous, shards, tree = _recorded(tmp_path, 4, 4, {})
    path = pathlib.Path(shards[0].info.uri)
    table = pq.read_table(path)
    table = table.set_column(table.schema.get_field_index("references"), "references", pa.array([1, 2, 3, 4]))
    pq.write_table(table, path)
    info = listing.list_shards(config.input, fsspec.filesystem("file"))[0]
    previous["input"]["files"][0].update(etag=info.etag, size=info.size,
                                         columns={n: str(table.schema.field(n).type) for n in table.schema.names})
    from ray_jobs.job.plan import read_shards

    shards, _, _ = read_shards(config, fsspec.filesystem("file"), ("text",), previous)
    got = vouch.false_record(config, previous, shards, tree, fsspec.filesystem("file"), ("text", "references"))
    assert got == (None, False)
    unit = json.dumps({"uri": info.uri, "rel": info.rel, "start": 0, "stop": 4, "rows": 4,
                       "columns": ["id", "text", "references"]})
    assert _read_errors([unit]) == ["column 'references' has type int64, expected list<string> (while scoring)"]

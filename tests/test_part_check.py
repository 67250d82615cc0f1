"""A previous run's parts and manifest are hostile (`ray_jobs/job/part_check.py`, docs/job.md,
"Planning from the manifest"): a part that disagrees with itself or with the manifest's record
of it (md5 of its bytes, rows, errors, rows skipped) is not reused; its rows are scored again
and the report names the file and the field. The plan is tested on real part files without
Ray; one test runs the real job on the session's Ray."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
from types import SimpleNamespace

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ray_jobs import incremental
from ray_jobs.config import parse_config
from ray_jobs.storage import listing, writes
from tests.job_support import CANONICAL_SCHEMA, make_corpus, make_rows, part_bytes, write_rows

DIGEST = "d1"


def _write_input(path: pathlib.Path, rows: list[dict]) -> None:
    """An input shard whose size does not change when a text is reversed (no compression,
    dictionary or statistics)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=CANONICAL_SCHEMA), path, compression="none", use_dictionary=False,
                   write_statistics=False)


def _committed(tmp_path: pathlib.Path):
    """A shard of 8 rows and its two parts of 4 (the first holding 1 error), committed as a run
    commits them; returns (config, metric, shard, manifest, [part paths])."""
    from ray_jobs.job import layout
    from ray_jobs.job.commit import CommitResult, Cover
    from ray_jobs.job.plan import MetricPlan, Shard, ShardPlan
    from ray_jobs.job.verify import verify_metric

    _write_input(tmp_path / "in" / "a.parquet", make_rows(0, 8))
    info = listing.list_shards(str(tmp_path / "in"), fsspec.filesystem("file"))[0]
    shard = Shard(info, 8, {"id": "string", "text": "string"}, layout.input_version(info.etag, info.size))
    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"),
                           "metrics": [{"name": "text_stats"}], "part_rows": 4})
    metric = SimpleNamespace(label="text_stats", digest=DIGEST)
    parts, reports = [], []
    for start, errors in ((0, 1), (4, 0)):
        part = layout.PartName(start, start + 4, shard.version)
        uri = layout.part_uri(config.output, "text_stats", "a.parquet", part)
        data = part_bytes("a.parquet", info.etag, info.size, DIGEST, start, start + 4, errors=errors)
        pathlib.Path(uri).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(uri).write_bytes(data)
        parts.append((part, uri))
        reports.append({"part": uri, "rows": 4, "size": len(data), "errors": errors, "skipped": 0, "retry": 0,
                        "md5": hashlib.md5(data).hexdigest()})
    listed = {f.uri: f for f in listing.list_outputs(fsspec.filesystem("file"), config.output)}
    plan = MetricPlan(metric=metric, shards={"a.parquet": ShardPlan(shard=shard, units=[(0, 4), (4, 8)])})
    committed = CommitResult(covers=[Cover("a.parquet", info.uri, 8, parts, new={uri for _, uri in parts})])
    verified = verify_metric(plan, committed, reports, listed)
    manifest = {"metrics": {"text_stats": {"parts": verified.parts}}}
    return config, metric, shard, manifest, [pathlib.Path(uri) for _, uri in parts]


def _plan(config, metric, shard, manifest):
    from ray_jobs.job.plan import plan_metric

    return plan_metric(fsspec.filesystem("file"), config, metric, [shard], previous=manifest)


def _entry(manifest, path: pathlib.Path) -> dict:
    return manifest["metrics"]["text_stats"]["parts"]["a.parquet"]["parts"][path.name]


def _replace(path: pathlib.Path, data: bytes, manifest, *, md5_too: bool = False) -> None:
    """Replace a part's bytes behind the job's back: its modification time kept and the
    manifest's size (and, with `md5_too`, its md5) edited to match, so the listing agrees."""
    stat = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    entry = _entry(manifest, path)
    entry["size"] = len(data)
    if md5_too:
        entry["md5"] = hashlib.md5(data).hexdigest()


def _forged(rows: int, footer_rows: int, footer_errors: int, etag: str, size: int) -> bytes:
    """A part of `rows` rows without errors whose footer metadata names rows 0 to `footer_rows`
    and counts `footer_errors` errors."""
    table = pa.table({"id": [f"r{i}" for i in range(rows)], "error": pa.array([None] * rows, pa.string())})
    meta = incremental.part_metadata("a.parquet", etag, size, "", DIGEST, 0, footer_rows, footer_errors, 0)
    return writes.table_bytes(table, meta)


def test_parts_that_agree_with_their_record_are_kept_and_their_md5_recorded(tmp_path):
    config, metric, shard, manifest, paths = _committed(tmp_path)
    assert all(len(_entry(manifest, path)["md5"]) == 32 for path in paths)  # the worker's md5, recorded
    planned = _plan(config, metric, shard, manifest)
    shard_plan = planned.shards["a.parquet"]
    assert shard_plan.units == [] and [uri for _, uri, _ in shard_plan.kept] == [str(p) for p in paths]
    assert [errors for _, _, errors in shard_plan.kept] == [1, 0]
    assert planned.not_reused == [] and planned.footers_read == 2
    assert shard_plan.kept_md5 == {str(p): _entry(manifest, p)["md5"] for p in paths}


def _edit_manifest(field, value):
    def tamper(manifest, paths, shard):
        _entry(manifest, paths[0])[field] = value
    return tamper


def _replaced_bytes(manifest, paths, shard):
    _replace(paths[0], part_bytes("a.parquet", shard.info.etag, shard.info.size, DIGEST, 0, 4, errors=2), manifest)


def _truncated(manifest, paths, shard):
    _replace(paths[0], paths[0].read_bytes()[:-40], manifest)


def _fewer_rows(manifest, paths, shard):  # md5 edited too: the part itself still tells
    _replace(paths[0], _forged(2, 4, 0, shard.info.etag, shard.info.size), manifest, md5_too=True)


def _footer_errors(manifest, paths, shard):  # the footer and the manifest both say 3 errors; the column holds none
    _replace(paths[0], _forged(4, 4, 3, shard.info.etag, shard.info.size), manifest, md5_too=True)
    _entry(manifest, paths[0])["errors"] = 3


@pytest.mark.parametrize("tamper, field, why", [
    (_edit_manifest("errors", 0), "errors", "the manifest records 0 errors, the part 1"),
    (_edit_manifest("rows", 3), "rows", "the manifest records 3 rows, the part 4"),
    (_edit_manifest("skipped", 2), "skipped", "the manifest records 2 rows skipped, the part 0"),
    (_replaced_bytes, "md5", "the manifest records md5 "),
    (_truncated, "footer", "not a readable Parquet file (truncated or replaced)"),
    (_fewer_rows, "rows", "the manifest records 4 rows, the part 2"),
    (_footer_errors, "errors", "its footer counts 3 errors, its 'error' column holds 0"),
], ids=["manifest-errors", "manifest-rows", "manifest-skipped", "bytes-replaced", "truncated", "fewer-rows",
        "footer-errors"])
def test_a_part_that_disagrees_is_scored_again_and_named(tmp_path, tamper, field, why):
    config, metric, shard, manifest, paths = _committed(tmp_path)
    tamper(manifest, paths, shard)
    planned = _plan(config, metric, shard, manifest)
    shard_plan = planned.shards["a.parquet"]
    # not kept, not lent as the row cache: its rows are scored again; the other part is kept
    assert shard_plan.units == [(0, 4)]
    assert [uri for _, uri, _ in shard_plan.kept] == [str(paths[1])]
    assert str(paths[0]) not in shard_plan.previous and str(paths[0]) in shard_plan.superseded
    [found] = planned.not_reused
    assert (found["file"], found["field"]) == (str(paths[0]), field) and found["why"].startswith(why)


def test_a_record_from_before_md5_was_kept_still_vouches_by_size_and_counts(tmp_path):
    config, metric, shard, manifest, paths = _committed(tmp_path)
    for path in paths:
        del _entry(manifest, path)["md5"]
    assert _plan(config, metric, shard, manifest).not_reused == []
    _edit_manifest("errors", 0)(manifest, paths, shard)
    _entry(manifest, paths[1])["size"] += 1
    planned = _plan(config, metric, shard, manifest)
    assert planned.shards["a.parquet"].units == [(0, 4), (4, 8)]
    assert [(item["field"], item["why"]) for item in planned.not_reused] == [
        ("errors", "the manifest records 0 errors, the part 1"),
        ("size", f"the manifest records {paths[1].stat().st_size + 1} bytes, the file has {paths[1].stat().st_size}"),
    ]


def test_without_a_manifest_a_part_is_judged_by_itself(tmp_path):
    """A resumed run has no manifest: a part whose footer lies about its errors is still refused."""
    config, metric, shard, manifest, paths = _committed(tmp_path)
    _footer_errors(manifest, paths, shard)
    planned = _plan(config, metric, shard, None)
    assert planned.shards["a.parquet"].units == [(0, 4)]
    assert [(item["file"], item["field"]) for item in planned.not_reused] == [(str(paths[0]), "errors")]


def test_a_manifest_with_an_md5_that_is_no_string_is_set_aside():
    from ray_jobs.job.manifest import unusable_manifest

    record = {"digest": "d", "input_etag": "e", "input_size": 1, "parts": {"p": {"rows": 1, "md5": 5}}}
    assert unusable_manifest({"metrics": {"m": {"parts": {"a.parquet": record}}}}) == (
        "'metrics.m.parts.a.parquet.parts.p': 'md5' must be a string")


def test_the_summary_line_names_each_part_not_reused_and_its_field():
    from ray_jobs.job.manifest import summary_line

    report = {"rows_in": 8, "rows_out": 8, "rows_scored": 4, "rows_cached": 4, "rows_error": 1,
              "parts_not_reused": [{"file": "OUT/m/a/part-0-4-v.parquet", "field": "errors",
                                    "why": "the manifest records 0 errors, the part 1"}]}
    line = summary_line({"metrics": {"m": report}, "bad_shards": [], "input": {"files": [{}]}, "wall_s": 1.0})
    assert ("1 part(s) of earlier runs not reused, their rows scored again: OUT/m/a/part-0-4-v.parquet "
            "(errors: the manifest records 0 errors, the part 1)") in line
    assert "\n" not in line


def _outputs(folder: pathlib.Path) -> dict[str, list[dict]]:
    return {str(p.relative_to(folder)): pq.read_table(p).to_pylist() for p in sorted(folder.rglob("*.parquet"))}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_job_rescores_tampered_parts_with_true_totals(ray_local, tmp_path):
    """The real job, twice: a manifest that lies about a part's errors, a part truncated and a
    part cut to fewer rows (the manifest's size edited to match each, the modification time
    kept) are not reused; the totals are the true ones, no row is lost, the output is as before."""
    make_corpus(tmp_path / "in", shards=2, rows=20)
    rows = pq.read_table(tmp_path / "in" / "part-00000.parquet").to_pylist()
    rows[2]["text"] = ""  # one error row, in the first part
    write_rows(tmp_path / "in" / "part-00000.parquet", rows)
    from ray_jobs.score_corpus import run_job

    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "part_rows": 10,
                           "metrics": [{"name": "text_stats"}], "progress": False, "batch_size": 16,
                           "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}})
    first = run_job(config)
    assert first["metrics"]["text_stats"]["rows_error"] == 1
    out = tmp_path / "out" / "text_stats"
    reference = _outputs(out)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    records = manifest["metrics"]["text_stats"]["parts"]
    lied, truncated, cut = sorted(out.rglob("part-*.parquet"))[:3]
    records["part-00000.parquet"]["parts"][lied.name]["errors"] = 0  # hides the error row
    for path, data in ((truncated, truncated.read_bytes()[:-100]),
                       (cut, writes.table_bytes(pq.read_table(cut).slice(0, 4), None))):
        stat = path.stat()
        path.write_bytes(data)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        records[path.parent.name + ".parquet"]["parts"][path.name]["size"] = len(data)
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(manifest))

    again = run_job(config)
    report = again["metrics"]["text_stats"]
    assert (report["rows_out"], report["rows_error"], report["rows_scored"], report["parts_kept"]) == (40, 1, 30, 1)
    assert len(pd.read_parquet(out)) == 40
    assert _outputs(out) == reference
    assert sorted((item["file"], item["field"]) for item in report["parts_not_reused"]) == [
        (str(lied), "errors"), (str(truncated), "footer"), (str(cut), "md5")]
    from ray_jobs.job.manifest import summary_line

    line = summary_line(again)
    assert "3 part(s) of earlier runs not reused" in line and f"{lied} (errors: the manifest records 0 errors" in line
    third = run_job(config)["metrics"]["text_stats"]  # the rewritten parts agree with the new manifest
    assert (third["rows_scored"], third["footers_read"], third["rows_error"]) == (0, 4, 1)
    assert "parts_not_reused" not in third


def test_a_renamed_shard_does_not_copy_a_part_its_record_lies_about(tmp_path):
    """Reuse by content: the parts of a vanished folder of the same bytes are checked before
    they are copied under the new name; the one whose record lies is scored instead."""
    from ray_jobs.job import layout
    from ray_jobs.job.plan import Shard

    config, metric, shard, manifest, paths = _committed(tmp_path)
    _edit_manifest("errors", 0)(manifest, paths, shard)
    (tmp_path / "in" / "a.parquet").rename(tmp_path / "in" / "b.parquet")
    info = listing.list_shards(str(tmp_path / "in"), fsspec.filesystem("file"))[0]
    renamed = Shard(info, 8, shard.columns, layout.input_version(info.etag, info.size))
    assert renamed.version == shard.version  # the same bytes
    planned = _plan(config, metric, renamed, manifest)
    shard_plan = planned.shards["b.parquet"]
    assert shard_plan.units == [(0, 4)]
    assert [pathlib.Path(uri).parent.name for _, uri, _ in shard_plan.kept] == ["b"]  # the good part, copied
    assert [(item["file"], item["field"]) for item in planned.not_reused] == [(str(paths[0]), "errors")]


class _FakeS3:
    """An fsspec-like store of one object: whole reads and tail reads, counted."""

    def __init__(self, data: bytes) -> None:
        self.data, self.reads = data, []

    def cat_file(self, path, start=None, end=None):
        self.reads.append(start)
        return self.data if start is None else self.data[start:]

    def open(self, path, mode="rb"):
        self.reads.append("stream")
        return io.BytesIO(self.data)


@pytest.mark.parametrize("hashed", [False, True])
def test_a_part_is_read_by_its_tail_or_hashed_whole_as_asked(hashed):
    """Whether the bytes are hashed is the caller's choice (`part_check`): an S3 ETag is the md5
    of the bytes only for some objects (not multipart uploads, SSE-KMS or SSE-C), so the read
    never takes it for one."""
    from ray_jobs.storage.reads import read_footer_and_md5

    data = part_bytes("a.parquet", "e", 1, DIGEST, 0, 4, errors=1)
    fs = _FakeS3(data)
    meta, md5, missing = read_footer_and_md5(fs, "s3://b/out/text_stats/a/part.parquet", len(data), hashed=hashed)
    assert meta.num_rows == 4 and not missing
    assert md5 == (hashlib.md5(data).hexdigest() if hashed else None)
    assert fs.reads == (["stream", 0] if hashed else [0])  # the whole object hashed in chunks then its tail, or its tail only


def test_unreachable_storage_fails_the_plan_and_a_vanished_part_is_just_missing(tmp_path):
    """A part that cannot be read now is no false part: storage down is the job's error (as for
    any footer, `reads.read_footer_metadata`), a part gone since the listing is simply scored."""
    from ray_jobs.storage.reads import read_footer_and_md5
    from scoring.errors import StorageError

    class DeadFs:
        def cat_file(self, *args, **kwargs):
            raise TimeoutError("Connect timeout on endpoint URL")

        open = cat_file

    for uri, hashed in (("s3://b/x.parquet", False), ("s3://b/x.parquet", True), (str(tmp_path / "x.parquet"), True)):
        with pytest.raises(StorageError, match="cannot read footer of .*x.parquet: storage unreachable"):
            read_footer_and_md5(DeadFs(), uri, 10, hashed=hashed)
    for hashed in (False, True):
        assert read_footer_and_md5(fsspec.filesystem("file"), str(tmp_path / "gone.parquet"), 10, hashed=hashed) == (
            None, None, True)


def test_a_file_in_a_parts_place_is_hashed_in_chunks_whatever_its_size(tmp_path, monkeypatch):
    """On local disk a part is hashed whole: a stranger's file of any size put in its place is
    read in `HASH_CHUNK` pieces, never into memory at once, and is no part."""
    from ray_jobs.storage import reads

    monkeypatch.setattr(reads, "HASH_CHUNK", 1 << 10)
    big = tmp_path / "part.parquet"
    block = bytes(range(256)) * 64  # 16 KiB
    with big.open("wb") as handle:
        for _ in range(64):  # 1 MiB
            handle.write(block)
    sizes = []

    from fsspec.implementations.local import LocalFileSystem

    class Counting(LocalFileSystem):
        def open(self, path, mode="rb", **kwargs):
            handle = super().open(path, mode, **kwargs)
            original = handle.read

            def read(n=-1):
                data = original(n)
                sizes.append(len(data))
                return data

            handle.read = read
            return handle

    meta, md5, missing = reads.read_footer_and_md5(Counting(), str(big), big.stat().st_size, hashed=True)
    assert meta is None and not missing and md5 == hashlib.md5(big.read_bytes()).hexdigest()
    # hashed in 1 KiB reads; the footer check reads only the tail (64 KiB) of the 1 MiB file
    assert sizes.count(1 << 10) == 1024 and max(sizes) <= reads.FOOTER_TAIL < big.stat().st_size


def test_a_vanished_folder_lends_only_the_parts_that_agree_with_their_record(tmp_path):
    """Reuse by content under another ETag: a new shard of the same size and rows borrows a
    vanished folder's parts as its row cache; a part replaced behind the job's back (its
    modification time kept, the manifest's size edited) is not lent, and is named."""
    from ray_jobs.job import layout
    from ray_jobs.job.plan import Shard

    config, metric, shard, manifest, paths = _committed(tmp_path)
    _replaced_bytes(manifest, paths, shard)
    rows = pq.read_table(tmp_path / "in" / "a.parquet").to_pylist()
    rows[5]["text"] = rows[5]["text"][::-1]  # other bytes, the same size
    (tmp_path / "in" / "a.parquet").unlink()
    _write_input(tmp_path / "in" / "b.parquet", rows)
    info = listing.list_shards(str(tmp_path / "in"), fsspec.filesystem("file"))[0]
    assert info.size == shard.info.size and info.etag != shard.info.etag
    renamed = Shard(info, 8, shard.columns, layout.input_version(info.etag, info.size))
    planned = _plan(config, metric, renamed, manifest)
    shard_plan = planned.shards["b.parquet"]
    assert shard_plan.units == [(0, 4), (4, 8)] and shard_plan.previous == [str(paths[1])]
    assert [(item["file"], item["field"]) for item in planned.not_reused] == [(str(paths[0]), "md5")]


def test_a_footer_declaring_gigabytes_is_not_read():
    """A file in a part's place whose last 8 bytes declare a 4 GiB footer (the file being that
    large too) is no part, and nothing past its 64 KiB tail is read into memory."""
    import struct

    from ray_jobs.storage import reads

    tail = b"x" * 100 + struct.pack("<I", 4_000_000_000) + reads.MAGIC
    size = 5_000_000_000

    class HugeFile:
        def __init__(self):
            self.reads = []

        def cat_file(self, path, start=None, end=None):
            self.reads.append(start)
            return tail

    fs = HugeFile()
    read = reads.read_footer_and_md5(fs, "s3://b/out/text_stats/a/part.parquet", size, hashed=False)
    assert read.footer is None and not read.missing
    assert fs.reads == [size - reads.FOOTER_TAIL]  # the tail only, no second read of the footer
    assert reads.read_footer_metadata(fs, "s3://b/out/_id_index.parquet", size) is None

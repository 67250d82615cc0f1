"""The storage layer under faults (no Ray): full and read-only disks, missing buckets, a dead
endpoint, failures in the middle of a write, leftovers of crashed runs, transient versus
permanent read failures, and no credential inside any filesystem object that travels to
workers."""

from __future__ import annotations

import errno
import os
import pathlib
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ray_jobs.config import S3Config
from ray_jobs.storage import clients, listing, reads, shard_checks, worker_errors, writes
from scoring.errors import InputError, StorageError
from tests.job_support import FAKE_AWS, free_port, make_rows, write_rows

# two attempts per request: a dead endpoint fails in seconds, not ~40 s
FAULT_AWS = {**FAKE_AWS, "CTGSCORE_S3_MAX_ATTEMPTS": "2"}


def local_fs():
    return clients.fsspec_filesystem("/", S3Config())


def debris(folder: pathlib.Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if ".tmp-" in p.name]


def test_full_disk_write_names_the_path_and_leaves_no_temp_file(mounted):
    disk = mounted("size=64k")
    committed = disk / "out" / "a.parquet"
    writes.put_atomic(local_fs(), str(committed), b"old and complete")
    with pytest.raises(StorageError) as failure:
        writes.put_atomic(local_fs(), str(disk / "out" / "b.parquet"), b"x" * (256 << 10))
    message = str(failure.value)
    assert message == f"cannot write {disk}/out/b.parquet: no space left on device"
    assert debris(disk) == []
    assert committed.read_bytes() == b"old and complete"
    # replacing a committed file fails the same way and keeps the old bytes
    with pytest.raises(StorageError, match="no space left on device"):
        writes.put_atomic(local_fs(), str(committed), b"y" * (256 << 10))
    assert committed.read_bytes() == b"old and complete" and debris(disk) == []


def test_read_only_output_fails_the_probe_with_its_path(mounted):
    folder = mounted("ro,size=64k")
    with pytest.raises(StorageError) as failure:
        writes.probe_writable(local_fs(), str(folder / "scores"))
    assert str(failure.value) == f"cannot create output folder {folder}/scores: read-only file system"
    with pytest.raises(StorageError) as failure:
        writes.probe_writable(local_fs(), str(folder))
    assert str(failure.value) == f"output {folder} is not writable: read-only file system"


def test_full_disk_fails_the_probe(mounted):
    disk = mounted("size=4k")
    (disk / "filler").write_bytes(b"\0" * 4096)
    with pytest.raises(StorageError, match=f"output {disk}/out is not writable: no space left on device"):
        writes.probe_writable(local_fs(), str(disk / "out"))
    assert debris(disk) == []


def test_probe_leaves_nothing_behind(tmp_path):
    writes.probe_writable(local_fs(), str(tmp_path / "new" / "out"))
    assert (tmp_path / "new" / "out").is_dir() and list((tmp_path / "new" / "out").iterdir()) == []


def test_failure_at_any_step_of_a_write_removes_the_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "out" / "shard.parquet"
    target.parent.mkdir()
    target.write_bytes(b"committed")
    for step in ("fsync", "replace"):
        def fail(*args, **kwargs):
            raise OSError(errno.EIO, "Input/output error")

        with monkeypatch.context() as patch:
            patch.setattr(os, step, fail)
            for _ in range(3):  # as a caller retrying would: still no debris
                with pytest.raises(StorageError, match=f"cannot write {target}: Input/output error"):
                    writes.put_atomic(local_fs(), str(target), b"new bytes")
        assert debris(tmp_path) == [] and target.read_bytes() == b"committed"
    with monkeypatch.context() as patch:  # not an OSError: propagates, still cleaned up
        patch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            writes.put_atomic(local_fs(), str(target), b"new bytes")
    assert debris(tmp_path) == []


def test_clean_leftovers_removes_only_temp_files(tmp_path):
    out = tmp_path / "out"
    keep = [out / "m" / "part-00000.parquet", out / "manifest.json", out / "m" / ".hidden-but-not-temp"]
    junk = [out / "m" / ".part-00001.parquet.tmp-1a2b3c4d", out / ".manifest.json.tmp-deadbeef", out / ".ctgscore-probe.tmp-0f0f0f0f"]
    for path in keep + junk:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    removed = writes.clean_leftovers(local_fs(), str(out))
    assert sorted(removed) == sorted(str(p) for p in junk)
    assert all(p.exists() for p in keep) and not any(p.exists() for p in junk)
    assert writes.clean_leftovers(local_fs(), str(tmp_path / "absent")) == []
    # a young temp file (a writer still running) is spared when asked
    (out / ".young.parquet.tmp-00000000").write_bytes(b"x")
    assert writes.clean_leftovers(local_fs(), str(out), older_than_s=3600) == []


def test_truncated_shard_is_bad_not_transient_and_a_flaky_read_is_transient(tmp_path):
    path = tmp_path / "in" / "part-0.parquet"
    write_rows(path, make_rows(0, 20))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    fs = local_fs()
    info = listing.list_shards(str(tmp_path / "in"), fs)[0]
    with pytest.raises(shard_checks.BadShard) as bad:
        shard_checks.check_shard(info, fs, ("text",))
    assert bad.value.transient is False and str(path) in str(bad.value) and "\n" not in str(bad.value)

    class ResettingFs:
        def open(self, *args, **kwargs):
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    with pytest.raises(shard_checks.BadShard) as flaky:
        shard_checks.check_shard(info, ResettingFs(), ("text",))
    assert flaky.value.transient is True and "cannot read" in flaky.value.reason


def test_missing_local_input_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=f"input {tmp_path}/nope does not exist"):
        listing.list_shards(str(tmp_path / "nope"), local_fs())


def test_unreadable_old_output_is_not_reused_but_unreachable_storage_is_an_error(tmp_path):
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    assert reads.read_footer_metadata(local_fs(), str(broken)) is None
    assert reads.read_footer_metadata(local_fs(), str(tmp_path / "absent.parquet")) is None

    class DeadFs:
        def open(self, *args, **kwargs):
            raise TimeoutError("Connect timeout on endpoint URL")

        cat_file = open

    with pytest.raises(StorageError, match="cannot read footer of s3://b/x.parquet: storage unreachable") as failure:
        reads.read_footer_metadata(DeadFs(), "s3://b/x.parquet")
    assert failure.value.transient is True


@pytest.fixture
def s3(moto, monkeypatch):
    for key, value in FAULT_AWS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    fs = clients.fsspec_filesystem("s3://x", S3Config(endpoint_url=moto))
    fs.mkdir("faults-out")
    return fs


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_s3_missing_bucket_is_named(s3):
    for call in (
        lambda: writes.probe_writable(s3, "s3://no-such-bucket/scores"),
        lambda: listing.list_shards("s3://no-such-bucket/dump", s3),
        lambda: writes.put_atomic(s3, "s3://no-such-bucket/scores/a.parquet", b"x"),
        lambda: listing.list_outputs(s3, "s3://no-such-bucket/scores"),
    ):
        with pytest.raises(StorageError, match="bucket 'no-such-bucket' does not exist"):
            call()
    writes.probe_writable(s3, "s3://faults-out/scores")
    s3.invalidate_cache()
    assert s3.find("faults-out") == []
    with pytest.raises(InputError, match="input s3://faults-out/dump does not exist"):
        listing.list_shards("s3://faults-out/dump", s3)


@pytest.mark.timeout(60)
def test_s3_dead_endpoint_is_one_line_after_bounded_retries(monkeypatch):
    for key, value in FAULT_AWS.items():
        monkeypatch.setenv(key, value)
    endpoint = f"http://127.0.0.1:{free_port()}"
    fs = clients.fsspec_filesystem("s3://x", S3Config(endpoint_url=endpoint))
    with pytest.raises(StorageError) as failure:
        writes.probe_writable(fs, "s3://faults-out/scores")
    message = str(failure.value)
    assert message.startswith(f"cannot use output s3://faults-out/scores: storage unreachable at {endpoint}")
    assert "\n" not in message and failure.value.transient is True


def test_no_credential_travels_inside_a_filesystem(monkeypatch):
    secret = "FAKE-SECRET-do-not-log-7Q2x"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEKEYID0000000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    settings = S3Config(endpoint_url="http://127.0.0.1:9")
    for fs in (clients.arrow_filesystem("s3://b/k", settings), clients.fsspec_filesystem("s3://b/k", settings)):
        blob = pickle.dumps(fs)
        assert secret.encode() not in blob and b"AKIAFAKEKEYID0000000" not in blob
    arrow = clients.arrow_filesystem("s3://b/k", settings)
    assert isinstance(arrow, pa.fs.S3FileSystem)


def test_table_bytes_round_trip(tmp_path):
    table = pa.table({"id": ["a"], "text": ["x"]})
    target = tmp_path / "t.parquet"
    writes.put_atomic(local_fs(), str(target), writes.table_bytes(table, {"k": "v"}))
    assert pq.read_table(target).to_pylist() == [{"id": "a", "text": "x"}]
    assert reads.read_footer_metadata(local_fs(), str(target)) == (1, {"k": "v"})


def test_error_from_worker_recovers_what_a_worker_raised():
    class RayLikeError(Exception):
        """What the driver gets: the worker's traceback as text, the original not pickled."""

    text = (
        "ray::MapWorker(MapBatches(Scorer)).submit() (pid=1, ip=127.0.0.1)\n"
        '  File "ray_jobs/io.py", line 1, in put_atomic\n'
        "scoring.errors.StorageError: cannot write /o/m/p.parquet: no space left on device\n"
        "\nThe above exception was the direct cause of the following exception:\n"
        "ray.exceptions.UserCodeException: UDF failed to process a data block.\n"
    )
    recovered = worker_errors.error_from_worker(RayLikeError(text))
    assert type(recovered) is StorageError and str(recovered) == "cannot write /o/m/p.parquet: no space left on device"
    assert worker_errors.error_from_worker(RayLikeError("ValueError: not ours\n")) is None
    try:
        try:
            raise InputError("/in/a.parquet: row 3: bad")
        except InputError as inner:
            raise RuntimeError("wrapper") from inner
    except RuntimeError as outer:
        assert str(worker_errors.error_from_worker(outer)) == "/in/a.parquet: row 3: bad"

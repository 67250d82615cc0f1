"""Operator mistakes and broken storage through the two public entry points
(`python -m ray_jobs.score_corpus --config` and `ctgscore run`): each ends in one `error:` line
naming the path, bucket or file, with exit code 1 (2 for a bad config), no traceback, no temp
debris, and nothing committed lost."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.job_support import (
    FAKE_AWS,
    child_env,
    free_port,
    make_corpus,
    make_rows,
    stop_group,
    write_rows,
)

pytestmark = pytest.mark.slow  # every test here runs the job's entry points as subprocesses

ENTRY_POINTS = {
    "score_corpus": [sys.executable, "-m", "ray_jobs.score_corpus", "--config"],
    "ctgscore": [sys.executable, "-m", "ctgscore", "run"],
}
# two attempts per request: a dead endpoint fails in seconds, not ~40 s
FAULT_AWS = {**FAKE_AWS, "CTGSCORE_S3_MAX_ATTEMPTS": "2"}


def run(entry: str, config: pathlib.Path, timeout: float = 300, **extra_env: str) -> subprocess.CompletedProcess:
    """The entry point as a process of its own; `extra_env` (RAY_ADDRESS: join that Ray) on top."""
    env = child_env(**FAULT_AWS, **extra_env)
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"  # whatever ignores the config: a dead loopback port
    return subprocess.run([*ENTRY_POINTS[entry], str(config)], env=env, capture_output=True, text=True, timeout=timeout)


def assert_clean_failure(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    """Exit `code`, no traceback, exactly one `error:` line (the last), holding `fragments`."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def write_config(path: pathlib.Path, **values) -> pathlib.Path:
    config = {
        "metrics": [{"name": "text_stats"}],
        "batch_size": 8,
        "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
        "progress": False,
        **values,
    }
    path.write_text(json.dumps(config))
    return path


def debris(folder: pathlib.Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if ".tmp-" in p.name]


def committed(folder: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.parquet"))
            if not p.name.startswith((".", "_"))}  # score parts: not the id index


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.timeout(120)
def test_read_only_output(entry, tmp_path, mounted):
    make_corpus(tmp_path / "in", shards=2, rows=5)
    folder = mounted("ro,size=64k")
    config = write_config(tmp_path / "job.json", input=str(tmp_path / "in"), output=str(folder / "scores"))
    assert_clean_failure(run(entry, config), 1, f"{folder}/scores", "read-only file system")


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.timeout(120)
def test_non_utf8_config(entry, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_bytes(b"input: /tmp/in\noutput: /tmp/out\nmetrics: [{name: text_stats}]\n# caf\xe9\xff\n")
    assert_clean_failure(run(entry, config), 2, str(config))


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.timeout(120)
def test_missing_input(entry, tmp_path):
    config = write_config(tmp_path / "job.json", input=str(tmp_path / "nowhere"), output=str(tmp_path / "out"))
    assert_clean_failure(run(entry, config), 1, f"{tmp_path}/nowhere")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_truncated_shard_is_refused_cleanly_every_time(tmp_path):
    """Refusing a bad shard used to abort with 134 in about one run in ten (an Arrow thread
    releasing a Python-backed buffer during interpreter exit): run it repeatedly."""
    paths = make_corpus(tmp_path / "in", shards=4, rows=50)
    data = paths[2].read_bytes()
    paths[2].write_bytes(data[: len(data) // 2])
    config = write_config(tmp_path / "job.json", input=str(tmp_path / "in"), output=str(tmp_path / "out"))
    codes = []
    for attempt in range(12):
        result = run("score_corpus" if attempt % 2 else "ctgscore", config)
        codes.append(result.returncode)
        if result.returncode != 1:
            break
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert "Traceback" not in result.stderr and "terminate called" not in result.stderr, result.stderr
        assert any(str(paths[2]) in line for line in lines), result.stderr
    assert codes == [1] * 12


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_full_disk_keeps_committed_outputs_and_leaves_no_debris(tmp_path, mounted, ray_address):
    """The three runs join the session's Ray."""
    disk = mounted("size=512k")
    out = disk / "scores"
    make_corpus(tmp_path / "in", shards=3, rows=10)
    config = write_config(tmp_path / "job.json", input=str(tmp_path / "in"), output=str(out))
    first = run("score_corpus", config, RAY_ADDRESS=ray_address)
    assert first.returncode == 0, first.stderr[-3000:]
    before = committed(out)
    assert before

    # a new large shard to score, and a disk with room for the probe but not for its output
    rows = make_rows(9, 3000)
    for row in rows:
        row["text"] = row["text"] + " " + os.urandom(48).hex()  # incompressible
    write_rows(tmp_path / "in" / "part-00009.parquet", rows)
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    (disk / "filler").write_bytes(b"\0" * max(0, free - 16 * 1024))
    second = run("score_corpus", config, RAY_ADDRESS=ray_address)
    message = assert_clean_failure(second, 1)
    assert committed(out) == before  # nothing committed was lost
    assert debris(disk) == []

    # room again: the re-run completes and scores only what was missing
    (disk / "filler").unlink()
    third = run("score_corpus", config, RAY_ADDRESS=ray_address)
    assert third.returncode == 0, third.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["metrics"]["text_stats"]["rows_out"] == 3030
    assert manifest["metrics"]["text_stats"]["rows_cached"] == 30
    assert debris(disk) == []

    assert "no space left on device" in message and f"cannot write {out}/" in message, message


@pytest.fixture
def s3_corpus(moto, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": moto}, skip_instance_cache=True)
    if not fs.exists("faults-in"):
        fs.mkdir("faults-in")
        for path in make_corpus(tmp_path / "in", shards=2, rows=5):
            fs.put_file(str(path), f"faults-in/dump/{path.name}")
    return fs


@pytest.mark.slow
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.timeout(120)
def test_missing_output_bucket_is_named(entry, moto, s3_corpus, tmp_path):
    config = write_config(
        tmp_path / "job.json", input="s3://faults-in/dump", output="s3://no-such-output-bucket/scores", s3={"endpoint_url": moto}
    )
    assert_clean_failure(run(entry, config), 1, "bucket 'no-such-output-bucket' does not exist")


@pytest.mark.slow
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.timeout(120)
def test_missing_input_bucket_is_named(entry, moto, tmp_path):
    config = write_config(
        tmp_path / "job.json", input="s3://no-such-input-bucket/dump", output=str(tmp_path / "out"), s3={"endpoint_url": moto}
    )
    assert_clean_failure(run(entry, config), 1, "bucket 'no-such-input-bucket' does not exist")


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.timeout(180)
def test_dead_s3_endpoint(entry, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    config = write_config(tmp_path / "job.json", input="s3://faults-in/dump", output=str(tmp_path / "out"), s3={"endpoint_url": dead})
    assert_clean_failure(run(entry, config), 1, "s3://faults-in/dump", dead)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_leftovers_of_a_crashed_run_are_removed_on_the_next_start(tmp_path, ray_address):
    """Both runs join the session's Ray."""
    make_corpus(tmp_path / "in", shards=2, rows=6)
    out = tmp_path / "out"
    config = write_config(tmp_path / "job.json", input=str(tmp_path / "in"), output=str(out))
    first = run("score_corpus", config, RAY_ADDRESS=ray_address)
    assert first.returncode == 0, first.stderr[-3000:]
    before = committed(out)
    # what a run killed while writing leaves: temp files next to parts, a write probe, a manifest
    shard_folder = next(p.parent for p in out.rglob("*.parquet"))
    planted = [
        shard_folder / ".part-0000000000-0000000006-0123456789ab.parquet.tmp-1a2b3c4d",
        out / ".manifest.json.tmp-deadbeef",
        out / ".ctgscore-probe.tmp-0f0f0f0f",
    ]
    for path in planted:
        path.write_bytes(b"half written")
    second = run("ctgscore", config, RAY_ADDRESS=ray_address)
    assert second.returncode == 0, second.stderr[-3000:]
    assert not [p for p in planted if p.exists()] and debris(out) == []
    assert committed(out) == before


@pytest.fixture(scope="module")
def moto_iam():
    """A moto server that enforces IAM after its first 3 requests (which create an admin user):
    yields (endpoint, admin keys, a read-only user's keys)."""
    import boto3

    from tests.job_support import VENV_BIN, wait_port

    port = free_port()
    process = subprocess.Popen(
        [str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_port(port)
        endpoint = f"http://127.0.0.1:{port}"
        common = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        bootstrap = boto3.client("iam", aws_access_key_id="testing", aws_secret_access_key="testing", **common)
        bootstrap.create_user(UserName="admin")
        admin = bootstrap.create_access_key(UserName="admin")["AccessKey"]
        everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        bootstrap.put_user_policy(UserName="admin", PolicyName="all", PolicyDocument=json.dumps(everything))
        admin_keys = {"aws_access_key_id": admin["AccessKeyId"], "aws_secret_access_key": admin["SecretAccessKey"]}
        iam = boto3.client("iam", **admin_keys, **common)
        iam.create_user(UserName="reader")
        reader = iam.create_access_key(UserName="reader")["AccessKey"]
        read_only = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": "*"}],
        }
        iam.put_user_policy(UserName="reader", PolicyName="read-only", PolicyDocument=json.dumps(read_only))
        yield endpoint, admin_keys, {"AWS_ACCESS_KEY_ID": reader["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": reader["SecretAccessKey"]}
    finally:
        stop_group(process)


@pytest.mark.slow
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.timeout(180)
def test_output_denied_by_s3_permissions(entry, moto_iam, tmp_path):
    import boto3

    endpoint, admin_keys, reader_env = moto_iam
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **admin_keys)
    if "perm-in" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="perm-in")
        s3.create_bucket(Bucket="perm-out")
        s3.put_object(Bucket="perm-out", Key="scores/keep.txt", Body=b"committed earlier")
        for path in make_corpus(tmp_path / "in", shards=2, rows=5):
            s3.upload_file(str(path), "perm-in", f"dump/{path.name}")
    config = write_config(
        tmp_path / "job.json", input="s3://perm-in/dump", output="s3://perm-out/scores", s3={"endpoint_url": endpoint}
    )
    env = child_env(**{**FAULT_AWS, **reader_env})
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run([*ENTRY_POINTS[entry], str(config)], env=env, capture_output=True, text=True, timeout=150)
    assert_clean_failure(result, 1, "output s3://perm-out/scores is not writable: permission denied")
    listed = s3.list_objects_v2(Bucket="perm-out", Prefix="scores/")
    assert [item["Key"] for item in listed.get("Contents", [])] == ["scores/keep.txt"]  # nothing lost, no debris

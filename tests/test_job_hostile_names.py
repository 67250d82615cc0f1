"""Input names a stranger chose, on a shared bucket: one job (S3 input, local output) over keys
with control characters, bidi marks, URL-like characters, NFC/NFD and case twins, `//`, `./`,
`../`, a folder marker holding bytes, a zero-byte shard, a 1,000-byte key, a key that is a
prefix of another and one whose output folder is named like another shard's part, run twice. Every row comes out scored or its shard is a bad shard named with
its reason; no name fails the whole job; no two inputs share an output folder; the second run
reuses every row (`docs/job.md`, "Input names")."""

from __future__ import annotations

import json
import pathlib
import unicodedata

import pyarrow.parquet as pq
import pytest
import yaml

from ray_jobs import entrypoint
from tests.job_support import make_rows, moto_session, write_rows

ROWS = 3
GOOD = ["cr\rname.parquet", "esc\x1b[2Jname.parquet", "bidi\u202ename.parquet", "tab\tname.parquet",
        "pct%41.parquet", "hash#x.parquet", "q?x.parquet", "plus+x.parquet", "sp ace.parquet", "enc%2Fx.parquet",
        "a.parquet", "a.parquet/b.parquet", "sub/caf\u00e9x.parquet"]
TWINS = ["b.parquet", "B.parquet", unicodedata.normalize("NFC", "é.parquet"),
         unicodedata.normalize("NFD", "é.parquet")]
UNSAFE = ["!\x1b[2J\u202e\r/../evil.parquet", "/lead.parquet", "x//y.parquet", "./dot.parquet", "../up.parquet", "marker.parquet/"]
LONG = "L" * 990 + ".parquet"


def _upload(endpoint: str, bucket: str) -> str:
    """Every key above under `dump/`, and one more, returned: a key whose output folder is named
    like the first part file of `a.parquet` (its version from the listed etag and size)."""
    import hashlib

    import boto3

    from ray_jobs.job import layout

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1")
    for index, key in enumerate([*GOOD, *TWINS, *UNSAFE, LONG, "lead.parquet", "zero.parquet"]):
        data = b""
        if key != "zero.parquet":
            path = pathlib.Path(f"/tmp/ctg-names-{index}.parquet")
            write_rows(path, make_rows(index, ROWS))
            data = path.read_bytes()
            path.unlink()
        s3.put_object(Bucket=bucket, Key=f"dump/{key}", Body=data)
        if key == "a.parquet":
            version = layout.input_version(hashlib.md5(data).hexdigest(), len(data))
    aimed = f"a/part-0000000000-0000000002-{version}.parquet.parquet"
    s3.put_object(Bucket=bucket, Key=f"dump/{aimed}", Body=data)
    # an object outside the input that `dump/../up.parquet` would read through Arrow's S3 reader
    s3.put_object(Bucket=bucket, Key="up.parquet", Body=b"not the shard")
    return aimed


def _run(config: pathlib.Path, capsys, *extra: str) -> tuple[int, str, str]:
    code = entrypoint.main(["--config", str(config), "--no-progress", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_hostile_input_names_on_s3_lose_no_row_and_fail_no_job(ray_local, moto, s3_bucket, tmp_path, capsys, monkeypatch):
    moto_session(moto, monkeypatch)
    aimed = _upload(moto, s3_bucket)
    out = tmp_path / "out"
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({
        "input": f"s3://{s3_bucket}/dump", "output": str(out), "metrics": [{"name": "text_stats"}],
        "batch_size": 16, "part_rows": 2, "skip_bad_shards": True, "s3": {"endpoint_url": moto},
        "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}}))

    code, stdout, stderr = _run(config, capsys)
    assert code == 0, stderr
    manifest = json.loads((out / "manifest.json").read_text())
    prefix = f"s3://{s3_bucket}/dump/"
    bad = {item["file"][len(prefix):]: item["error"] for item in manifest["bad_shards"]}
    good = [*GOOD, "lead.parquet"]  # `dump//lead.parquet` is bad, so the `dump/lead.parquet` beside it is its own
    assert sorted(f["file"][len(prefix):] for f in manifest["input"]["files"]) == sorted(good), json.dumps(bad, indent=0)
    assert manifest["metrics"]["text_stats"]["rows_out"] == manifest["input"]["rows"] == ROWS * len(good)
    for key in TWINS:  # twins on a case-insensitive, normalising disk: both named, the other named in the reason
        assert "case-insensitive disk" in bad[key], key
    assert f"{prefix}B.parquet" in bad["b.parquet"] and f"{prefix}b.parquet" in bad["B.parquet"]
    for key in UNSAFE:
        assert "not read; rename it" in bad[key], key
    assert "over a disk's 255" in bad[LONG] and "0 bytes" in bad["zero.parquet"]
    assert "named like one of the job's part files" in bad[aimed]  # it failed every run: 'File exists'
    assert set(bad) == {*TWINS, *UNSAFE, LONG, "zero.parquet", aimed}
    assert f"text_stats: {ROWS * len(good)} in -> {ROWS * len(good)} out, {ROWS * len(good)} scored" in stdout
    assert "\x1b" not in stdout + stderr and "\r" not in stdout + stderr
    # each good shard's rows under its own folder, in order; `a.parquet` (a prefix of another key) too
    for index, key in enumerate(GOOD):
        folder = out / "text_stats" / key[: -len(".parquet")]
        rows = [row for part in sorted(folder.glob("part-*.parquet")) for row in pq.read_table(part).to_pylist()]
        assert [row["id"] for row in rows] == [row["id"] for row in make_rows(index, ROWS)], key

    code, stdout, _ = _run(config, capsys)  # the next night: every row reused, the same shards bad
    assert code == 0 and f"{ROWS * len(good)} reused" in stdout and ", 0 scored" in stdout
    again = json.loads((out / "manifest.json").read_text())
    assert {item["file"] for item in again["bad_shards"]} == {item["file"] for item in manifest["bad_shards"]}

    code, _, stderr = _run(config, capsys, "--set", "skip_bad_shards=false")  # refused, each name escaped on one line
    assert code == 1 and stderr.count("\n") == 1 and "bad input shard(s)" in stderr
    assert "\x1b" not in stderr and "\u202e" not in stderr and "\r" not in stderr


@pytest.mark.timeout(60)
def test_a_key_that_is_also_a_prefix_is_listed_and_checked_as_the_object_it_is(moto, s3_bucket, monkeypatch):
    """s3fs's listing cache holds `dump/a.parquet` twice, as an object and as the folder of
    `dump/a.parquet/b.parquet`, and its lookup answers with the folder (0 bytes): the check
    opens the shard with its listed size. `dump//a.parquet` keeps a rel of its own."""
    from ray_jobs.config import S3Config
    from ray_jobs.storage import clients, listing, shard_checks

    moto_session(moto, monkeypatch)
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto, aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1")
    path = pathlib.Path(f"/tmp/ctg-prefix-{s3_bucket}.parquet")
    write_rows(path, make_rows(0, ROWS))
    for key in ("dump/a.parquet", "dump/a.parquet/b.parquet", "dump//a.parquet"):
        s3.put_object(Bucket=s3_bucket, Key=key, Body=path.read_bytes())
    path.unlink()
    fs = clients.fsspec_filesystem(f"s3://{s3_bucket}/dump", S3Config(endpoint_url=moto))
    shards = listing.list_shards(f"s3://{s3_bucket}/dump", fs)
    assert [info.rel for info in shards] == ["a.parquet", "a.parquet/b.parquet"]
    assert [(rel, "not read" in why) for _, rel, why in shards.unusable] == [("/a.parquet", True)]
    for info in shards:
        assert shard_checks.check_shard(info, fs, ("text",)).num_rows == ROWS, info.rel

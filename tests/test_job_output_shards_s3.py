"""A job's output on S3 whose input held an id in several shards reads back as the same
rows as the same output on a local disk: shards named with spaces, `%` and nested folders,
with and without a manifest, the prefix given with or without a trailing slash."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import ctgscore
from tests.job_support import moto_session
from tests.test_job_output_shards import ROWS, _part

# shards named as a dump may name them: a space, a percent escape that must stay literal, a folder
SHARDS = {"a b": ROWS["a"], "sub/x%20y": ROWS["sub/b"]}


def _write(out, prefix: str) -> None:
    """Runs `ppl` and `words` over both shards, an error in one row; the manifest names the
    shard folders under `prefix` (where the job wrote them)."""
    for label, column in (("ppl", "perplexity"), ("words", "words")):
        for shard, rows in SHARDS.items():
            errors = {"r1": "too long"} if (label, shard) == ("ppl", "sub/x%20y") else None
            _part(out / label / shard, label, shard, rows, column, errors)
    metrics = {label: {"outputs": [{"folder": f"{prefix}/{label}/{shard}"} for shard in SHARDS]}
               for label in ("ppl", "words")}
    (out / "manifest.json").write_text(json.dumps({"config": {"output": prefix}, "metrics": metrics}))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_s3_output_with_an_id_in_two_shards_reads_back_as_on_disk(moto, s3_bucket, tmp_path, monkeypatch):
    import s3fs

    options = moto_session(moto, monkeypatch)
    fs = s3fs.S3FileSystem(**options)
    local = tmp_path / "out"
    _write(local, f"s3://{s3_bucket}/out")
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"{s3_bucket}/out/{path.relative_to(local).as_posix()}")
    assert fs.exists(f"{s3_bucket}/out/ppl/sub/x%20y/part-0000000000-0000000009-abc.parquet")  # kept literal

    on_disk = ctgscore.load_scores(str(local))  # the manifest's prefix is not this folder: found by label
    assert sorted(zip(on_disk["id"], on_disk["shard"])) == sorted(
        (row[0], shard) for shard, rows in SHARDS.items() for row in rows)
    assert on_disk["error"].tolist().count("ppl: too long") == 1
    for uri in (f"s3://{s3_bucket}/out", f"s3://{s3_bucket}/out/"):
        pd.testing.assert_frame_equal(ctgscore.load_scores(uri, storage_options=options), on_disk)
    fs.rm(f"{s3_bucket}/out/manifest.json")  # a run in progress: every folder read, the same rows
    pd.testing.assert_frame_equal(ctgscore.load_scores(f"s3://{s3_bucket}/out", storage_options=options), on_disk)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_s3_shards_named_apart_by_an_empty_folder_name_stay_apart(moto, s3_bucket, tmp_path, monkeypatch):
    """S3 keeps `a//b` and `a/b` as two keys (two input shards, two output folders of an S3
    job): their rows are two shards' rows, not one shard's with each shared id twice."""
    import s3fs

    options = moto_session(moto, monkeypatch)
    fs = s3fs.S3FileSystem(**options)
    local = tmp_path / "out"
    for shard in ("a", "b"):
        _part(local / "ppl" / shard, "ppl", shard, ROWS["a"], "perplexity")
    for shard, key in (("a", "a/b"), ("b", "a//b")):
        name = "part-0000000000-0000000009-abc.parquet"
        fs.put_file(str(local / "ppl" / shard / name), f"{s3_bucket}/out/ppl/{key}/{name}")
    assert len(fs.find(f"{s3_bucket}/out/ppl")) == 2
    frame = ctgscore.load_scores(f"s3://{s3_bucket}/out", storage_options=options)
    assert sorted(zip(frame["id"], frame["shard"])) == sorted((row[0], shard) for row in ROWS["a"]
                                                              for shard in ("a/b", "a//b"))

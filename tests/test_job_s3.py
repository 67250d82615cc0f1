"""The scoring job with input and output on s3:// against moto's S3 server on 127.0.0.1,
started by this module (acceptance 2)."""

from __future__ import annotations

import io
import json
import os
import pathlib
import sys

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from ray_jobs.config import parse_config
from ray_jobs.score_corpus import run_job
from scoring.registry import build_metric
from tests.job_support import make_corpus, start_moto, stop_group

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def moto_endpoint():
    saved = {key: os.environ.get(key) for key in AWS_ENV}
    os.environ.update(AWS_ENV)  # the driver's s3fs and pyarrow filesystems read these
    process, endpoint = start_moto()
    yield endpoint
    stop_group(process)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def s3fs_client(endpoint):
    import s3fs

    return s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)


@pytest.mark.timeout(180)
def test_s3_in_s3_out(ray_local, moto_endpoint, tmp_path):
    fs = s3fs_client(moto_endpoint)
    fs.mkdir("ctg-input")
    fs.mkdir("ctg-output")
    local = make_corpus(tmp_path / "in", shards=8, rows=20)
    for path in local:
        fs.put_file(str(path), f"ctg-input/dump/2026-11-22/{path.name}")
    config = parse_config(
        {
            "input": "s3://ctg-input/dump/2026-11-22",
            "output": "s3://ctg-output/scores",
            "metrics": [{"name": "text_stats"}],
            "batch_size": 16,
            "pool": {"min_size": 1, "max_size": 2, "num_cpus": 0.5},
            "s3": {"endpoint_url": moto_endpoint},
            "progress": False,
        }
    )
    manifest = run_job(config)

    fs.invalidate_cache()
    written = sorted(fs.find("ctg-output/scores"))
    assert written == ["ctg-output/scores/manifest.json"] + [f"ctg-output/scores/text_stats/{p.name}" for p in local]
    metric = build_metric("text_stats")
    for path in local:
        inputs = pq.read_table(path).to_pylist()
        expected = metric.score_rows(inputs)
        got = pq.read_table(io.BytesIO(fs.cat_file(f"ctg-output/scores/text_stats/{path.name}"))).to_pylist()
        assert [r["id"] for r in got] == [r["id"] for r in inputs]
        for want, have in zip(expected, got):
            for column in (*metric.output_columns, "error"):
                assert have[column] == want[column]
    on_s3 = json.loads(fs.cat_file("ctg-output/scores/manifest.json"))
    assert on_s3["metrics"]["text_stats"]["rows_out"] == on_s3["input"]["rows"] == 160
    etags = {item["name"].rsplit("/", 1)[-1]: item["ETag"].strip('"') for item in fs.ls("ctg-input/dump/2026-11-22", detail=True)}
    assert {f["file"].rsplit("/", 1)[-1]: f["etag"] for f in on_s3["input"]["files"]} == etags
    assert manifest["metrics"]["text_stats"]["rows_scored"] == 160

    # nightly re-run: one object replaced, the rest reused by etag
    rows = pq.read_table(local[3]).to_pylist()
    rows[0]["text"] = "a changed row"
    changed = tmp_path / "changed.parquet"
    pq.write_table(pq.read_table(local[3]).from_pylist(rows, schema=pq.read_table(local[3]).schema), changed)
    fs.put_file(str(changed), f"ctg-input/dump/2026-11-22/{local[3].name}")
    again = run_job(config)
    report = again["metrics"]["text_stats"]
    assert (report["rows_scored"], report["rows_cached"], report["shards_reused"]) == (1, 159, 7)
    got = pq.read_table(io.BytesIO(fs.cat_file(f"ctg-output/scores/text_stats/{local[3].name}"))).to_pylist()
    assert got[0]["text_stats_words"] == 3.0 and got[0]["id"] == rows[0]["id"]

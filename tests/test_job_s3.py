"""The scoring job with input and output on s3:// against moto's S3 server on 127.0.0.1,
shared by the test run. The job runs as `python -m ray_jobs.score_corpus` with its own
embedded Ray, whose workers inherit the driver's AWS environment (no credential travels
through Ray)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import sys

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import subprocess

import yaml

from scoring.registry import build_metric
from tests.job_support import REPO_ROOT, child_env, equal_size_bytes, make_corpus, turned_table

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def moto_endpoint(moto):
    """The shared S3 server, with the fake credentials in this process's environment."""
    saved = {key: os.environ.get(key) for key in AWS_ENV}
    os.environ.update(AWS_ENV)  # the driver's s3fs and pyarrow filesystems read these
    yield moto
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def s3fs_client(endpoint):
    import s3fs

    return s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)


def run_cli_job(config_path, ray_address) -> dict:
    """The job as a process of its own, joining the session's Ray (whose workers have the fake
    credentials)."""
    result = subprocess.run(
        [sys.executable, "-m", "ray_jobs.score_corpus", "--config", str(config_path), "--no-progress"],
        cwd=REPO_ROOT, env=child_env(**AWS_ENV, RAY_ADDRESS=ray_address), capture_output=True, text=True, timeout=150,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return {"stdout": result.stdout, "stderr": result.stderr}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_s3_in_s3_out(moto_endpoint, ray_address, tmp_path):
    fs = s3fs_client(moto_endpoint)
    fs.mkdir("ctg-input")
    fs.mkdir("ctg-output")
    local = make_corpus(tmp_path / "in", shards=8, rows=20)
    for path in local:
        fs.put_file(str(path), f"ctg-input/dump/2026-11-22/{path.name}")
    config_path = tmp_path / "job.yaml"
    config_path.write_text(yaml.safe_dump({
        "input": "s3://ctg-input/dump/2026-11-22",
        "output": "s3://ctg-output/scores",
        "metrics": [{"name": "text_stats"}],
        "batch_size": 16,
        "part_rows": 15,
        "pool": {"min_size": 1, "max_size": 2, "num_cpus": 0.5},
        "s3": {"endpoint_url": moto_endpoint},
    }))
    first = run_cli_job(config_path, ray_address)
    assert "text_stats: 160 in -> 160 out, 160 scored" in first["stdout"]

    fs.invalidate_cache()
    written = sorted(fs.find("ctg-output/scores"))
    assert written[0] == "ctg-output/scores/_id_index.parquet"  # the id index and the manifest beside the
    written = written[1:]                                       # metric folder, not inside
    assert written[0] == "ctg-output/scores/manifest.json"
    parts = written[1:]
    assert sorted({p.rsplit("/", 2)[1] for p in parts}) == [p.stem for p in local]
    assert all(p.startswith("ctg-output/scores/text_stats/") for p in parts) and len(parts) == 16  # 15 + 5 rows
    metric = build_metric("text_stats")
    for path in local:
        inputs = pq.read_table(path).to_pylist()
        expected = metric.score_rows(inputs)
        got = []
        for part in sorted(p for p in parts if p.rsplit("/", 2)[1] == path.stem):
            got += pq.read_table(io.BytesIO(fs.cat_file(part))).to_pylist()
        assert [r["id"] for r in got] == [r["id"] for r in inputs]
        for want, have in zip(expected, got):
            for column in (*metric.output_columns, "error"):
                assert have[column] == want[column]
    on_s3 = json.loads(fs.cat_file("ctg-output/scores/manifest.json"))
    assert on_s3["metrics"]["text_stats"]["rows_out"] == on_s3["input"]["rows"] == 160
    etags = {item["name"].rsplit("/", 1)[-1]: item["ETag"].strip('"') for item in fs.ls("ctg-input/dump/2026-11-22", detail=True)}
    assert {f["file"].rsplit("/", 1)[-1]: f["etag"] for f in on_s3["input"]["files"]} == etags

    # nightly re-run: one object replaced, the rest reused by etag, one row re-scored
    rows = pq.read_table(local[3]).to_pylist()
    rows[0]["text"] = "a changed row"
    changed = tmp_path / "changed.parquet"
    pq.write_table(pq.read_table(local[3]).from_pylist(rows, schema=pq.read_table(local[3]).schema), changed)
    fs.put_file(str(changed), f"ctg-input/dump/2026-11-22/{local[3].name}")
    again = run_cli_job(config_path, ray_address)
    assert "text_stats: 160 in -> 160 out, 1 scored, 159 reused" in again["stdout"]
    fs.invalidate_cache()
    shard_parts = sorted(fs.find(f"ctg-output/scores/text_stats/{local[3].stem}"))
    assert len(shard_parts) == 2  # the old version's parts replaced by the new ones
    got = pq.read_table(io.BytesIO(fs.cat_file(shard_parts[0]))).to_pylist()
    assert got[0]["text_stats_words"] == 3.0 and got[0]["id"] == rows[0]["id"]

    # an unchanged night: planned from the manifest, one listing per prefix and one ranged GET
    # of each part's tail (its footer, checked against itself and the manifest; the listing's
    # ETag is the md5 of its bytes); no shard read
    third = run_cli_job(config_path, ray_address)
    assert "160 reused" in third["stdout"] and "storage: " in third["stdout"]
    manifest = json.loads(fs.cat_file("ctg-output/scores/manifest.json"))
    requests = manifest["requests"]
    assert requests["footers_read"] == 16 and requests["worker_part_puts"] == 0
    assert "parts_not_reused" not in manifest["metrics"]["text_stats"]
    assert requests["driver"]["GET"] == 1 + 16  # the previous manifest, then one tail per part
    assert requests["driver"]["LIST"] == 3 and requests["driver"]["total"] <= 12 + 16  # input, output top, text_stats


def _reuse_config(moto_endpoint, s3_bucket):
    """The reuse-by-content tests' job: text_stats and BLEU over `in/` to `out/`, parts of 8 rows."""
    from ray_jobs.config import parse_config

    return parse_config({
        "input": f"s3://{s3_bucket}/in", "output": f"s3://{s3_bucket}/out", "progress": False, "part_rows": 8,
        "metrics": [{"name": "text_stats"}, {"name": "bleu"}], "s3": {"endpoint_url": moto_endpoint},
        "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
    })


def _multipart_put(endpoint, bucket, key, data):
    """`data` uploaded in parts (one part here: moto takes a small last part), as `aws s3 cp`
    uploads any file over 8 MiB: its ETag is `<md5 of the parts' md5s>-1`, not the bytes' md5."""
    import botocore.session

    client = botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing")
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    part = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=data)
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_renamed_s3_shards_reuse_their_scores_by_content(moto_endpoint, s3_bucket, ray_local, sample_corpus):
    """Reuse by content over S3 (docs/job.md), one run before and one after renaming two shards
    of an s3:// input (CopyObject + DeleteObject):
    - `a`, uploaded in one PUT, keeps its ETag: the old folder's complete parts are copied under
      the new folder, byte for byte;
    - `b`, uploaded in parts, gets the plain md5 as its ETag after the copy (S3 and moto alike):
      the old folder's parts serve as its row cache, and new parts are written under the new
      ETag's version.
    Either way 0 rows are scored, every row is reused, and the scores are the first run's."""
    from ray_jobs.job import layout
    from ray_jobs.score_corpus import run_job

    fs = s3fs_client(moto_endpoint)
    table = pq.read_table(sample_corpus / "summeval-00000.parquet")
    data = {}
    for name, rows in (("a", table.slice(0, 20)), ("b", table.slice(20, 12))):
        sink = io.BytesIO()
        pq.write_table(rows, sink)
        data[name] = sink.getvalue()
    assert len(data["a"]) != len(data["b"])
    fs.pipe(f"{s3_bucket}/in/old-a.parquet", data["a"])
    _multipart_put(moto_endpoint, s3_bucket, "in/old-b.parquet", data["b"])
    config = _reuse_config(moto_endpoint, s3_bucket)
    labels = ("text_stats", "bleu")

    def parts(label, stem):
        fs.invalidate_cache()
        return {p.rsplit("/", 1)[-1]: fs.cat_file(p) for p in fs.find(f"{s3_bucket}/out/{label}/{stem}")}

    def rows_of(found):
        return [row for name in sorted(found) for row in pq.read_table(io.BytesIO(found[name])).to_pylist()]

    def etag(name):
        fs.invalidate_cache()
        return fs.info(f"{s3_bucket}/in/{name}")["ETag"].strip('"')

    first = run_job(config)
    assert first["metrics"]["bleu"]["rows_scored"] == 32
    before = {(label, shard): parts(label, f"old-{shard}") for label in labels for shard in "ab"}
    assert [len(before[("bleu", shard)]) for shard in "ab"] == [3, 2]  # 8 + 8 + 4 rows, 8 + 4 rows
    etags = {shard: etag(f"old-{shard}.parquet") for shard in "ab"}
    assert etags["b"].endswith("-1")
    for shard in "ab":
        fs.mv(f"{s3_bucket}/in/old-{shard}.parquet", f"{s3_bucket}/in/new-{shard}.parquet")
    assert etag("new-a.parquet") == etags["a"]
    assert etag("new-b.parquet") == hashlib.md5(data["b"]).hexdigest() != etags["b"]

    again = run_job(config)
    for label in labels:
        report = again["metrics"][label]
        assert (report["rows_scored"], report["rows_cached"], report["rows_out"]) == (0, 32, 32), label
        assert report["reused_by_content"] == {f"new-{shard}.parquet": [f"s3://{s3_bucket}/out/{label}/old-{shard}"]
                                               for shard in "ab"}
        assert sorted(report["orphaned_outputs"]) == [f"s3://{s3_bucket}/out/{label}/old-{shard}" for shard in "ab"]
        assert parts(label, "new-a") == before[(label, "a")]  # the same part names, byte for byte
        rewritten = parts(label, "new-b")
        version = layout.input_version(etag("new-b.parquet"), len(data["b"]))
        assert sorted(rewritten) == [f"part-0000000000-0000000008-{version}.parquet", f"part-0000000008-0000000012-{version}.parquet"]
        assert rows_of(rewritten) == rows_of(before[(label, "b")])  # the first run's scores, none computed again
        for shard in "ab":
            assert parts(label, f"old-{shard}") == before[(label, shard)]  # old folders stay until prune
    scores = [row["bleu"] for row in rows_of(before[("bleu", "a")]) + rows_of(before[("bleu", "b")])]
    assert len(scores) == 32 and len({s for s in scores if s is not None}) > 1  # real, varied scores



@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_renamed_s3_shards_of_one_size_each_reuse_their_own_rows(moto_endpoint, s3_bucket, ray_local, sample_corpus):
    """Two different shards of the same byte size and rows, uploaded in parts, both renamed:
    each gets a new ETag, and the folders of both old shards serve as each one's row cache
    (`reuse_cache.SameSizeFolders`), so 0 rows are scored and every score is the first run's.
    Then two shards of that size with other content replace them: those folders are lent again,
    no row of theirs matches, and every row is scored (none lost, none wrongly reused)."""
    from ray_jobs.score_corpus import run_job

    fs = s3fs_client(moto_endpoint)
    base = pq.read_table(sample_corpus / "summeval-00000.parquet").slice(0, 12)

    def rotate(s):
        return s[1:] + s[:1]

    mirrored = turned_table(base, lambda s: s[::-1])
    data = {"a": equal_size_bytes(base), "b": equal_size_bytes(mirrored),
            "c": equal_size_bytes(turned_table(base, rotate)), "d": equal_size_bytes(turned_table(mirrored, rotate))}
    assert len({len(d) for d in data.values()}) == 1 and len(set(data.values())) == 4
    for shard in "ab":
        _multipart_put(moto_endpoint, s3_bucket, f"in/old-{shard}.parquet", data[shard])
    config = _reuse_config(moto_endpoint, s3_bucket)
    labels = ("text_stats", "bleu")

    def rows_of(label, stem):
        fs.invalidate_cache()
        found = sorted(fs.find(f"{s3_bucket}/out/{label}/{stem}"))
        return [row for p in found for row in pq.read_table(io.BytesIO(fs.cat_file(p))).to_pylist()]

    first = run_job(config)
    assert all(first["metrics"][label]["rows_scored"] == 24 for label in labels)
    before = {(label, shard): rows_of(label, f"old-{shard}") for label in labels for shard in "ab"}
    for shard in "ab":
        fs.mv(f"{s3_bucket}/in/old-{shard}.parquet", f"{s3_bucket}/in/new-{shard}.parquet")
    again = run_job(config)
    for label in labels:
        report = again["metrics"][label]
        assert (report["rows_scored"], report["rows_cached"], report["rows_out"]) == (0, 24, 24), (label, report)
        folders = {shard: f"s3://{s3_bucket}/out/{label}/old-{shard}" for shard in "ab"}
        # both folders were lent to each; each names only the one its rows came from
        assert report["reused_by_content"] == {"new-a.parquet": [folders["a"]], "new-b.parquet": [folders["b"]]}
        for shard in "ab":
            assert rows_of(label, f"new-{shard}") == before[(label, shard)]  # the first run's scores
    fs.rm([f"{s3_bucket}/in/new-{shard}.parquet" for shard in "ab"])
    for shard in "cd":
        _multipart_put(moto_endpoint, s3_bucket, f"in/other-{shard}.parquet", data[shard])
    third = run_job(config)
    for label in labels:
        report = third["metrics"][label]
        assert (report["rows_scored"], report["rows_cached"], report["rows_out"]) == (24, 0, 24), (label, report)
        assert "reused_by_content" not in report
    ids = {shard: [row["id"] for row in rows_of("text_stats", f"other-{shard}")] for shard in "cd"}
    assert ids == {"c": [rotate(i) for i in base.column("id").to_pylist()],
                   "d": [rotate(i[::-1]) for i in base.column("id").to_pylist()]}

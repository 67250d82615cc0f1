"""Parts on an S3 bucket whose ETags are not the md5 of the bytes (SSE-KMS or SSE-C, a common
bucket default): the run that writes them verifies them, the next run reuses the unchanged
ones and still catches a part written again behind its back (docs/job.md, "Planning from the
manifest"; `ray_jobs/job/verify.py`, `part_check.py`). The store is a fake of the few calls the
job makes, giving every PUT a new random ETag as KMS does, or the md5 as SSE-S3 does."""

from __future__ import annotations

import hashlib
import io
import secrets
from types import SimpleNamespace

import pytest

from ray_jobs.config import parse_config
from ray_jobs.storage import listing, writes
from tests.job_support import part_bytes

DIGEST = "d1"
OUTPUT = "s3://bucket/out"


class FakeBucket:
    """An fsspec-like S3 store: PUT, whole and ranged GETs (counted), and its listing. With
    `kms`, every PUT gets a random ETag, never the md5 of its bytes."""

    def __init__(self, kms: bool) -> None:
        self.kms, self.objects, self.gets = kms, {}, []

    def pipe_file(self, path, data):
        etag = secrets.token_hex(16) if self.kms else hashlib.md5(data).hexdigest()
        self.objects[path] = (bytes(data), etag)
        return {"ETag": f'"{etag}"', "ServerSideEncryption": "aws:kms" if self.kms else "AES256"}

    def cat_file(self, path, start=None, end=None):
        self.gets.append((path, start))
        data = self.objects[path][0]
        return data if start is None else data[start:]

    def open(self, path, mode="rb"):
        self.gets.append((path, "whole"))
        return io.BytesIO(self.objects[path][0])

    def tree(self) -> dict[str, dict]:
        """What a LIST shows: key, size and (quoted) ETag."""
        return {path: {"name": path, "size": len(data), "ETag": f'"{etag}"', "type": "file"}
                for path, (data, etag) in self.objects.items()}


def _night_one(bucket: FakeBucket):
    """A shard of 8 rows scored into two parts of 4, written and verified as a run does;
    returns (config, metric, shard, committed parts, reports, listing after the commit)."""
    from ray_jobs.job import layout
    from ray_jobs.job.commit import CommitResult, Cover
    from ray_jobs.job.plan import MetricPlan, Shard, ShardPlan

    info = listing.ShardInfo(uri="s3://bucket/in/a.parquet", rel="a.parquet", size=1234, etag="ab" * 16)
    shard = Shard(info, 8, {"id": "string", "text": "string"}, layout.input_version(info.etag, info.size))
    config = parse_config({"input": "s3://bucket/in", "output": OUTPUT, "metrics": [{"name": "text_stats"}],
                           "part_rows": 4})
    metric = SimpleNamespace(label="text_stats", digest=DIGEST)
    parts, reports = [], []
    for start, errors in ((0, 1), (4, 0)):
        part = layout.PartName(start, start + 4, shard.version)
        uri = layout.part_uri(OUTPUT, "text_stats", "a.parquet", part)
        data = part_bytes("a.parquet", info.etag, info.size, DIGEST, start, start + 4, errors=errors)
        put_etag = writes.put_atomic(bucket, uri, data)  # what write_part reports
        parts.append((part, uri))
        reports.append({"part": uri, "rows": 4, "size": len(data), "errors": errors, "skipped": 0, "retry": 0,
                        "md5": hashlib.md5(data).hexdigest(), "put_etag": put_etag})
    plan = MetricPlan(metric=metric, shards={"a.parquet": ShardPlan(shard=shard, units=[(0, 4), (4, 8)])})
    committed = CommitResult(covers=[Cover("a.parquet", info.uri, 8, parts, new={uri for _, uri in parts})])
    return config, metric, shard, plan, committed, reports


def _listed(bucket: FakeBucket) -> dict[str, listing.ListedFile]:
    return {f.uri: f for f in listing.output_files(OUTPUT, bucket.tree())}


def _verified_manifest(bucket: FakeBucket):
    from ray_jobs.job.verify import verify_metric

    config, metric, shard, plan, committed, reports = _night_one(bucket)
    verified = verify_metric(plan, committed, reports, _listed(bucket))
    return config, metric, shard, reports, {"metrics": {"text_stats": {"parts": verified.parts}}}


def _recorded_manifest(bucket: FakeBucket):
    """Night one's parts with the manifest's record of them as any run keeps it (the listed
    ETag and size, the md5 its worker reported), made without `verify_metric`: what the next
    night's plan is given, whichever run or code wrote it (a part copied to a renamed shard's
    folder is recorded so too: the md5 it was copied with, the ETag of the copy)."""
    config, metric, shard, _plan, committed, reports = _night_one(bucket)
    listed = _listed(bucket)
    parts = {}
    for report in reports:
        found = listed[report["part"]]
        parts[report["part"].rsplit("/", 1)[-1]] = {
            "rows": 4, "errors": report["errors"], "skipped": 0, "retry": 0, "size": found.size, "etag": found.etag,
            "md5": report["md5"]}
    record = {"input_etag": shard.info.etag, "input_size": shard.info.size, "digest": DIGEST, "parts": parts}
    return config, metric, shard, reports, {"metrics": {"text_stats": {"parts": {"a.parquet": record}}}}


def _next_night(bucket: FakeBucket, config, metric, shard, manifest):
    from ray_jobs.job.plan import plan_metric

    bucket.gets.clear()
    return plan_metric(bucket, config, metric, [shard], tree=bucket.tree(), previous=manifest)


def test_a_kms_bucket_put_returns_an_etag_that_is_no_md5():
    bucket = FakeBucket(kms=True)
    data = b"some part bytes"
    etag = writes.put_atomic(bucket, "s3://bucket/out/x.parquet", data)
    assert len(etag) == 32 and etag != hashlib.md5(data).hexdigest()
    assert writes.put_atomic(FakeBucket(kms=False), "s3://bucket/out/x.parquet", data) == hashlib.md5(data).hexdigest()


@pytest.mark.parametrize("kms", [True, False])
def test_parts_written_to_the_bucket_are_verified_and_recorded(kms):
    """Old code: on the KMS bucket the job failed ("does not hold rows ... as its worker wrote
    them") for every part it wrote, since the listed ETag is no md5."""
    bucket = FakeBucket(kms=kms)
    _config, _metric, _shard, reports, manifest = _verified_manifest(bucket)
    records = manifest["metrics"]["text_stats"]["parts"]["a.parquet"]["parts"]
    for report in reports:
        name = report["part"].rsplit("/", 1)[-1]
        data, etag = bucket.objects[report["part"][len("s3://"):]]
        assert records[name]["md5"] == hashlib.md5(data).hexdigest() == report["md5"]  # the worker's, not the ETag
        assert records[name]["etag"] == etag == report["put_etag"]
        assert (records[name]["etag"] == records[name]["md5"]) is not kms


@pytest.mark.parametrize("kms", [True, False])
def test_a_part_overwritten_before_the_listing_still_fails_verification(kms):
    """Between the worker's PUT and the listing another object took the part's name (same
    size): on either bucket its ETag is not the one the worker's PUT got."""
    from ray_jobs.job.errors import JobError
    from ray_jobs.job.verify import verify_metric

    bucket = FakeBucket(kms=kms)
    _config, _metric, _shard, plan, committed, reports = _night_one(bucket)
    key = reports[0]["part"][len("s3://"):]
    data = bytearray(bucket.objects[key][0])
    bucket.pipe_file(key, bytes(data[:-9]) + b"x" + bytes(data[-8:]))  # one byte of the footer changed
    with pytest.raises(JobError, match="as its worker wrote them"):
        verify_metric(plan, committed, reports, _listed(bucket))


def test_a_staged_part_copied_into_place_on_a_kms_bucket_is_verified_by_size():
    """A copy gets an ETag of its own on a KMS bucket: a part the commit moved is checked by
    its size and the worker's report."""
    from ray_jobs.job.commit import CommitResult, Cover
    from ray_jobs.job.verify import verify_metric

    bucket = FakeBucket(kms=True)
    _config, _metric, _shard, plan, committed, reports = _night_one(bucket)
    cover = committed.covers[0]
    staged = {uri: uri.replace("/part-", "/.staged-part-") for _, uri in cover.parts}
    for report in reports:  # as written: under the staged name, then copied into place
        report["part"] = staged[report["part"]]
    for uri in staged:
        key = uri[len("s3://"):]
        bucket.pipe_file(key, bucket.objects[key][0])  # the copy: new ETag
    moved = CommitResult(covers=[Cover(cover.rel, cover.uri, cover.num_rows, cover.parts, new=set(staged.values()),
                                       renamed={uri: staged[uri] for uri in staged})])
    verified = verify_metric(plan, moved, reports, _listed(bucket))
    assert verified.rows_out == 8


@pytest.mark.parametrize("kms", [True, False])
def test_the_next_night_reuses_unchanged_parts_with_one_tail_read_each(kms):
    """Old code: every part on the KMS bucket was 'not reused' (field md5: the listed ETag taken
    for the md5 of its bytes) and all its rows scored again, every night."""
    bucket = FakeBucket(kms=kms)
    config, metric, shard, reports, manifest = _recorded_manifest(bucket)
    planned = _next_night(bucket, config, metric, shard, manifest)
    assert planned.not_reused == []
    shard_plan = planned.shards["a.parquet"]
    assert shard_plan.units == [] and len(shard_plan.kept) == 2
    assert shard_plan.kept_md5 == {report["part"]: report["md5"] for report in reports}  # carried to the next record
    assert sorted(start for _, start in bucket.gets) == [0, 0]  # one ranged GET per part (its tail), no whole read


@pytest.mark.parametrize("kms", [True, False])
@pytest.mark.parametrize("same_bytes", [True, False])
def test_a_part_written_again_is_not_reused(kms, same_bytes):
    """A part written again behind the job's back, the manifest's size and md5 edited to
    match, even with the very same bytes on the KMS bucket: its ETag is not the recorded one."""
    bucket = FakeBucket(kms=kms)
    config, metric, shard, reports, manifest = _recorded_manifest(bucket)
    uri = reports[0]["part"]
    key = uri[len("s3://"):]
    old = bucket.objects[key][0]
    new = old if same_bytes else part_bytes("a.parquet", shard.info.etag, shard.info.size, DIGEST, 0, 4, errors=2)
    bucket.pipe_file(key, new)
    entry = manifest["metrics"]["text_stats"]["parts"]["a.parquet"]["parts"][uri.rsplit("/", 1)[-1]]
    entry.update(size=len(new), md5=hashlib.md5(new).hexdigest())
    planned = _next_night(bucket, config, metric, shard, manifest)
    if same_bytes and not kms:  # the md5 is the ETag: the same bytes are the same object
        assert planned.not_reused == []
        return
    assert [(item["file"], item["field"]) for item in planned.not_reused] == [(uri, "etag")]
    assert "the manifest records ETag" in planned.not_reused[0]["why"]
    assert planned.shards["a.parquet"].units == [(0, 4)]


def test_without_a_manifest_an_s3_part_records_no_md5_it_cannot_know():
    """A resumed run (no manifest) reads each part's tail only; on a KMS bucket its ETag is no
    md5, so the next record carries its ETag and size, and no md5 taken from the ETag."""
    bucket = FakeBucket(kms=True)
    config, metric, shard, _reports, _manifest = _verified_manifest(bucket)
    planned = _next_night(bucket, config, metric, shard, None)
    assert planned.not_reused == [] and len(planned.shards["a.parquet"].kept) == 2
    assert planned.shards["a.parquet"].kept_md5 == {}
    assert sorted(start for _, start in bucket.gets) == [0, 0]


def test_a_record_with_an_md5_and_no_etag_has_the_object_hashed():
    """A record without an ETag (not one a run writes) on S3: the md5 is all there is to
    compare, so the object is read whole and hashed."""
    bucket = FakeBucket(kms=True)
    config, metric, shard, reports, manifest = _recorded_manifest(bucket)
    for entry in manifest["metrics"]["text_stats"]["parts"]["a.parquet"]["parts"].values():
        del entry["etag"]
    planned = _next_night(bucket, config, metric, shard, manifest)
    assert planned.not_reused == [] and len(planned.shards["a.parquet"].kept) == 2
    assert sorted(str(start) for _, start in bucket.gets) == ["0", "0", "whole", "whole"]


@pytest.mark.timeout(60)
def test_a_put_through_s3fs_returns_the_etag_s3_gave_it(moto, s3_bucket):
    """`put_atomic` on a real S3 API (moto keeps md5 ETags, as SSE-S3 does): the ETag of the
    PUT's answer, the one the listing then shows."""
    import s3fs

    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": moto})
    data = part_bytes("a.parquet", "e", 1, DIGEST, 0, 4)
    uri = f"s3://{s3_bucket}/out/text_stats/a/part.parquet"
    etag = writes.put_atomic(fs, uri, data)
    assert etag == hashlib.md5(data).hexdigest()
    assert [f.etag for f in listing.list_outputs(fs, f"s3://{s3_bucket}/out")] == [etag]


def test_parts_copied_for_a_renamed_shard_are_reused_the_night_after():
    """A renamed shard gets the vanished shard's parts copied under its folder; on a KMS bucket
    each copy has a new ETag and the md5 it was copied with. Old code: the vanished shard's
    parts were already 'not reused' (md5), so nothing was copied and every row scored again."""
    from ray_jobs.job.commit import CommitResult, Cover
    from ray_jobs.job.plan import Shard
    from ray_jobs.job.verify import verify_metric

    bucket = FakeBucket(kms=True)
    config, metric, shard, reports, manifest = _recorded_manifest(bucket)
    info = listing.ShardInfo(uri="s3://bucket/in/b.parquet", rel="b.parquet", size=shard.info.size, etag=shard.info.etag)
    renamed = Shard(info, 8, shard.columns, shard.version)
    planned = _next_night(bucket, config, metric, renamed, manifest)
    shard_plan = planned.shards["b.parquet"]
    assert planned.not_reused == [] and shard_plan.units == [] and len(shard_plan.kept) == 2
    copies = [uri for _, uri, _ in shard_plan.kept]
    assert all("/text_stats/b/" in uri and uri[len("s3://"):] in bucket.objects for uri in copies)
    cover = Cover("b.parquet", info.uri, 8, [(part, uri) for part, uri, _ in shard_plan.kept])
    verified = verify_metric(planned, CommitResult(covers=[cover]), [], _listed(bucket))
    records = verified.parts["b.parquet"]["parts"]
    assert sorted(entry["md5"] for entry in records.values()) == sorted(report["md5"] for report in reports)
    after = {"metrics": {"text_stats": {"parts": verified.parts}}}
    again = _next_night(bucket, config, metric, renamed, after)
    assert again.not_reused == [] and len(again.shards["b.parquet"].kept) == 2

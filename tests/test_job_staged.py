"""Staged parts (`docs/job.md`, "Bad shards"): an unchanged shard scored again under a new
signature writes its parts under `_next-` names, because its folder already holds those names;
the commit moves them into place only once the shard's new parts cover it. A shard that fails
half way keeps its old parts byte for byte; an interrupted run's staged parts are kept by the
next run. Plan, write and commit are driven here as the job drives them, without Ray, on a
local output and on S3 (moto)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ray_jobs.config import S3Config, parse_config
from ray_jobs.job import layout
from ray_jobs.job.commit import commit_metric
from ray_jobs.job.metrics import ResolvedMetric
from ray_jobs.job.plan import Shard, plan_metric
from ray_jobs.job.units import UNIT, build_units, staged_units
from ray_jobs.job.verify import verify_metric
from ray_jobs.job.write import write_part
from ray_jobs.storage import clients, listing, uris
from tests.job_support import FAKE_AWS

ROWS, PART_ROWS = 6, 2


@pytest.fixture(params=["local", "s3"])
def output(request, tmp_path):
    """(output uri, its filesystem): a local folder, or a bucket on the shared moto server."""
    if request.param == "local":
        out = str(tmp_path / "out")
        return out, clients.fsspec_filesystem(out, S3Config())
    endpoint = request.getfixturevalue("moto")
    monkeypatch = request.getfixturevalue("monkeypatch")
    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    out = f"s3://{request.getfixturevalue('s3_bucket')}/out"
    return out, clients.fsspec_filesystem(out, S3Config(endpoint_url=endpoint))


def _setup(output):
    out, fs = output
    config = parse_config({"input": "/in", "output": out, "part_rows": PART_ROWS,
                           "metrics": [{"name": "text_stats", "label": "m"}]})
    info = listing.ShardInfo("/in/a.parquet", "a.parquet", 1234, "e" * 32)
    shard = Shard(info, ROWS, {"id": "string", "text": "string"}, layout.input_version(info.etag, info.size))
    return fs, config, shard


def _metric(config, digest: str) -> ResolvedMetric:
    return ResolvedMetric(config.metrics[0], object, {}, f"sig-{digest}", digest, ("text",), ("x",))


def _score(fs, config, metric, shard, fail_from: int | None = None, tree=None):
    """Plan, then write every unit's part as a worker would (value: the signature digest's
    length, so rows of two signatures differ), except the units from row `fail_from` on (a read
    that fails half way). Returns (plan, reports)."""
    plan = plan_metric(fs, config, metric, [shard], tree)
    reports = []
    for descriptor in build_units([plan], lambda columns: ["id"]):
        unit = json.loads(descriptor[UNIT])
        if fail_from is not None and unit["start"] >= fail_from:
            continue
        rows = range(unit["start"], unit["stop"])
        reports.append(write_part(fs, config.output, metric, metric.signature, unit, [f"r{i}" for i in rows], {},
                                  [f"k{i}" for i in rows], [{"x": float(len(metric.digest))} for _ in rows], 0))
    return plan, reports


def _folder(fs, config, shard) -> dict[str, bytes]:
    folder = layout.shard_dir(config.output, "m", shard.rel)
    return {path.rsplit("/", 1)[-1]: fs.cat_file(path) for path in fs.find(uris.fs_path(folder))}


def _commit(fs, config, plan, reports, bad: bool):
    bad_uris = {plan.shards["a.parquet"].shard.info.uri} if bad else set()
    done = commit_metric(fs, config.output, plan, reports, bad_uris, {"a.parquet"} if bad else set(), False)
    fs.invalidate_cache()
    listed = {f.uri: f for f in listing.list_outputs(fs, config.output)}
    return done, (None if bad else verify_metric(plan, done, reports, listed))


def _signatures(files: dict[str, bytes]) -> dict[str, str]:
    return {name: pq.read_metadata(pa.BufferReader(data)).metadata[b"ctgscore.signature_digest"].decode()
            for name, data in files.items()}


def test_a_shard_failing_half_way_under_a_new_signature_keeps_its_old_parts_byte_for_byte(output):
    fs, config, shard = _setup(output)
    old = _metric(config, "d1")
    plan, reports = _score(fs, config, old, shard)
    assert staged_units(plan.shards["a.parquet"]) == set()  # a first run: nothing to stage, own names at once
    _commit(fs, config, plan, reports, bad=False)
    before = _folder(fs, config, shard)
    assert sorted(before) == [layout.PartName(s, s + 2, shard.version).filename() for s in (0, 2, 4)]

    new = _metric(config, "d22")  # a new model revision: same input, same part names, another signature
    plan, reports = _score(fs, config, new, shard, fail_from=4)
    assert staged_units(plan.shards["a.parquet"]) == {(0, 2), (2, 4), (4, 6)}
    assert all(layout.is_staged(report["part"]) for report in reports) and len(reports) == 2
    assert _folder(fs, config, shard) == {**before, **{r["part"].rsplit("/", 1)[-1]: fs.cat_file(uris.fs_path(r["part"]))
                                                      for r in reports}}  # old parts untouched while scoring
    done, _ = _commit(fs, config, plan, reports, bad=True)
    assert _folder(fs, config, shard) == before  # as it was: no part of the new signature, nothing staged left
    assert done.kept_for_bad_shards == [layout.shard_dir(config.output, "m", shard.rel)]

    # the next run finds the shard whole: every part replaced, under the same names
    plan, reports = _score(fs, config, new, shard)
    done, verified = _commit(fs, config, plan, reports, bad=False)
    after = _folder(fs, config, shard)
    assert sorted(after) == sorted(before) and set(_signatures(after).values()) == {"d22"}
    assert done.renamed == 3 and verified.rows_out == ROWS
    assert sorted(verified.parts["a.parquet"]["parts"]) == sorted(before)  # the manifest records their own names
    assert verified.parts["a.parquet"]["digest"] == "d22"


def test_an_interrupted_runs_staged_parts_are_kept_and_moved_into_place_by_the_next_run(output):
    fs, config, shard = _setup(output)
    plan, reports = _score(fs, config, _metric(config, "d1"), shard)
    _commit(fs, config, plan, reports, bad=False)
    before = _folder(fs, config, shard)
    new = _metric(config, "d22")
    _score(fs, config, new, shard, fail_from=4)  # then the driver dies: no commit
    interrupted = _folder(fs, config, shard)
    assert sorted(interrupted) == sorted([*before, *(layout.PartName(s, s + 2, shard.version).staged_filename()
                                                      for s in (0, 2))])
    assert {k: v for k, v in interrupted.items() if k in before} == before  # readers see the old output whole

    plan, reports = _score(fs, config, new, shard)
    shard_plan = plan.shards["a.parquet"]
    assert shard_plan.units == [(4, 6)] and staged_units(shard_plan) == {(4, 6)}  # only the rows the interrupted run missed
    assert [layout.is_staged(uri) for _, uri, _ in shard_plan.kept] == [True, True]
    done, verified = _commit(fs, config, plan, reports, bad=False)
    after = _folder(fs, config, shard)
    assert sorted(after) == sorted(before) and set(_signatures(after).values()) == {"d22"}
    assert after[layout.PartName(0, 2, shard.version).filename()] == interrupted[
        layout.PartName(0, 2, shard.version).staged_filename()]  # the staged bytes, not scored again
    assert done.renamed == 3 and verified.rows_out == ROWS


def test_parts_of_an_old_signature_under_other_names_are_removed_once_the_new_cover_is_whole(output):
    """A new signature and a new `part_rows` together: the new parts have other names, so no
    staging; once they cover the shard, the old signature's parts go (they are no cover's), so
    the folder never holds a row twice."""
    fs, config, shard = _setup(output)
    plan, reports = _score(fs, config, _metric(config, "d1"), shard)
    _commit(fs, config, plan, reports, bad=False)
    wider = parse_config({"input": "/in", "output": config.output, "part_rows": 3, "metrics": [{"name": "text_stats", "label": "m"}]})
    plan, reports = _score(fs, wider, _metric(wider, "d22"), shard)
    assert plan.shards["a.parquet"].units == [(0, 3), (3, 6)] and staged_units(plan.shards["a.parquet"]) == set()
    done, verified = _commit(fs, wider, plan, reports, bad=False)
    after = _folder(fs, wider, shard)
    assert sorted(after) == [layout.PartName(s, s + 3, shard.version).filename() for s in (0, 3)]
    assert set(_signatures(after).values()) == {"d22"} and verified.rows_out == ROWS and done.replaced == 3

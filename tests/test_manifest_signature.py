"""The signed manifest (`manifest_key_env`, `ray_jobs/job/manifest_key.py`, docs/job.md "Signed
manifests", docs/security.md): with a key only the driver holds, the manifest carries an
HMAC-SHA256 of its canonical content; a previous manifest without a valid one is set aside and
no part of the earlier run is reused (every row scored again, one line in the summary). The key
never shows in the manifest, the output, the summary or the console; a missing or short key is
a usage error before any work."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pathlib
import pickle

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli
from ray_jobs.config import ConfigError, parse_config
from ray_jobs.job import manifest_key
from ray_jobs.storage import writes
from scoring.errors import UsageError
from tests.job_support import child_env, make_corpus

KEY = "k3y-ONLY-the-driver-holds-7f1c9a0e55d2b4c8"  # 42 bytes
ENV = "CTGSCORE_TEST_MANIFEST_KEY"


def _config(tmp_path: pathlib.Path, **extra) -> dict:
    return {"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "metrics": [{"name": "text_stats"}],
            "part_rows": 10, "progress": False, "batch_size": 16,
            "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}, **extra}


# ----- the signature itself ------------------------------------------------------------------

def test_the_signature_is_hmac_sha256_of_the_canonical_json_without_the_field():
    key = manifest_key.ManifestKey(ENV, KEY.encode())
    manifest = {"metrics": {"b": 1, "a": [1.5, None]}, "note": "é\u2028", "config": {"x": True}}
    signed = key.signed(manifest)
    expected = hmac.new(KEY.encode(), json.dumps(manifest, sort_keys=True, separators=(",", ":"),
                                                 ensure_ascii=True).encode("ascii"), hashlib.sha256).hexdigest()
    assert signed["manifest_hmac"] == expected
    assert key.problem(json.loads(json.dumps(signed, indent=2, sort_keys=True))) is None  # as written and read back
    assert key.signed(signed) == signed  # signing a signed manifest leaves out its old signature


@pytest.mark.parametrize("change, fragment", [
    (lambda m: m["metrics"].update(a=[1.5, 0]), "does not match its content"),
    (lambda m: m.pop("manifest_hmac"), "carries no 'manifest_hmac'"),
    (lambda m: m.update(manifest_hmac=7), "does not match its content"),
    (lambda m: m.update(manifest_hmac="é" * 64), "does not match its content"),
])
def test_an_edited_or_unsigned_manifest_is_named(change, fragment):
    key = manifest_key.ManifestKey(ENV, KEY.encode())
    signed = key.signed({"metrics": {"a": [1.5, None]}})
    change(signed)
    assert fragment in key.problem(signed)
    assert manifest_key.ManifestKey(ENV, b"another key of at least thirty-two bytes").problem(
        key.signed({"metrics": {}})).startswith("its 'manifest_hmac' does not match")


def test_the_key_is_never_shown_nor_pickled():
    key = manifest_key.load_key(ENV, {ENV: KEY})
    assert KEY not in repr(key) and KEY not in str(key) and ENV in repr(key)
    with pytest.raises(TypeError, match="stays on the driver"):
        pickle.dumps(key)
    assert KEY not in json.dumps(key.signed({"metrics": {}}))


@pytest.mark.parametrize("environ, fragment", [
    ({}, "is not set on the driver"),
    ({ENV: ""}, "is empty"),
    ({ENV: KEY[:31]}, "fewer than 32 bytes"),
])
def test_a_missing_empty_or_short_key_is_a_usage_error_naming_the_variable_not_the_value(environ, fragment):
    with pytest.raises(UsageError) as caught:
        manifest_key.load_key(ENV, environ)
    assert ENV in str(caught.value) and fragment in str(caught.value)
    assert KEY[:31] not in str(caught.value)
    assert manifest_key.load_key(None, environ) is None  # not configured: no key, whatever the environment


@pytest.mark.parametrize("name", ["", "1KEY", "MY-KEY", "A B", "KEY=x", "K" * 129])
def test_the_config_refuses_what_is_no_variable_name(tmp_path, name):
    with pytest.raises(ConfigError, match="'manifest_key_env' must name an environment variable"):
        parse_config(_config(tmp_path, manifest_key_env=name))
    with pytest.raises(ConfigError, match="manifest_key_env"):
        parse_config(_config(tmp_path, manifest_key_env=["A"]))


def test_the_config_records_the_variable_name_only_when_set(tmp_path):
    assert "manifest_key_env" not in parse_config(_config(tmp_path)).as_dict()  # the manifest as before
    assert parse_config(_config(tmp_path, manifest_key_env=ENV)).as_dict()["manifest_key_env"] == ENV


def test_the_cli_refuses_a_missing_key_before_any_work(cli, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    make_corpus(tmp_path / "in", shards=1, rows=4)
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps(_config(tmp_path, manifest_key_env=ENV)))
    assert_user_error(cli(["run", str(job)]), 2, ENV, "is not set")
    monkeypatch.setenv(ENV, KEY[:20])
    line = assert_user_error(cli(["run", str(job)]), 2, ENV, "fewer than 32 bytes")
    assert KEY[:20] not in line
    assert not (tmp_path / "out").exists()  # nothing written, no Ray started


# ----- the plan: no signed manifest, no earlier part reused ---------------------------------

def test_an_untrusted_plan_reads_keeps_and_lends_no_earlier_part(tmp_path):
    from ray_jobs.job.plan import plan_metric
    from tests.test_part_check import _committed

    config, metric, shard, manifest, paths = _committed(tmp_path)
    fs = fsspec.filesystem("file")
    trusted = plan_metric(fs, config, metric, [shard], previous=manifest).shards["a.parquet"]
    assert len(trusted.kept) == 2 and trusted.units == []
    plan = plan_metric(fs, config, metric, [shard], previous=manifest, trusted=False)
    shard_plan = plan.shards["a.parquet"]
    assert (shard_plan.kept, shard_plan.previous, shard_plan.units) == ([], [], [(0, 4), (4, 8)])
    assert sorted(shard_plan.superseded) == sorted(str(p) for p in paths)  # replaced by the new cover
    assert (plan.not_trusted, plan.footers_read, plan.not_reused) == (2, 0, [])


def test_under_a_signed_manifest_a_part_it_does_not_record_is_not_reused(tmp_path):
    """A part added beside the recorded ones, consistent with itself and covering the whole
    shard, is chosen over them by the plan (the longest cover from row 0); under a signed
    manifest it is set aside and named, and the recorded parts are kept."""
    from ray_jobs.job import layout
    from ray_jobs.job.plan import plan_metric
    from tests.job_support import part_bytes
    from tests.test_part_check import DIGEST, _committed

    config, metric, shard, manifest, paths = _committed(tmp_path)
    whole = layout.PartName(0, 8, shard.version)
    added = pathlib.Path(layout.part_uri(config.output, "text_stats", "a.parquet", whole))
    added.write_bytes(part_bytes("a.parquet", shard.info.etag, shard.info.size, DIGEST, 0, 8))
    fs = fsspec.filesystem("file")
    unsigned = plan_metric(fs, config, metric, [shard], previous=manifest).shards["a.parquet"]
    assert [uri for _, uri, _ in unsigned.kept] == [str(added)]  # what a job without the key reuses
    plan = plan_metric(fs, config, metric, [shard], previous=manifest, signed=True)
    assert [uri for _, uri, _ in plan.shards["a.parquet"].kept] == [str(p) for p in paths]
    assert plan.not_reused == [{"file": str(added), "field": "record",
                                "why": "the signed manifest does not record it (added since)"}]
    assert str(added) in plan.shards["a.parquet"].superseded


# ----- the real job ---------------------------------------------------------------------------

def _forge(out: pathlib.Path) -> tuple[pathlib.Path, float]:
    """Replace one part by a forged one, consistent with itself (footer, statistics) and with an
    edited manifest (md5, size; modification time kept): what someone who can write to the folder,
    without the key, can do. Returns (the part, the forged score)."""
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    part = sorted((out / "text_stats").rglob("part-*.parquet"))[0]
    table = pq.read_table(part)  # its footer's key-value metadata comes along in the schema
    column = next(name for name in table.column_names if pa.types.is_floating(table.schema.field(name).type))
    forged = 123456.0
    table = table.set_column(table.column_names.index(column), table.schema.field(column),
                             pa.array([forged] * table.num_rows, table.schema.field(column).type))
    stat = part.stat()
    part.write_bytes(writes.table_bytes(table, None))
    os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    data = part.read_bytes()
    entry = manifest["metrics"]["text_stats"]["parts"][part.parent.name + ".parquet"]["parts"][part.name]
    entry.update(md5=hashlib.md5(data).hexdigest(), size=len(data))
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return part, forged


def _scores(out: pathlib.Path) -> dict[str, list]:
    return {str(p.relative_to(out)): pq.read_table(p).to_pylist() for p in sorted(out.rglob("part-*.parquet"))}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_job_signs_reuses_and_rescores_a_forgery(ray_local, tmp_path, monkeypatch):
    """Signed round trip (an unchanged night reuses every part), then a forged part and a
    consistently edited manifest: without the key the plan would keep the forgery; with it the
    manifest is set aside, every row scored again, the forgery gone, the summary says why."""
    from ray_jobs.job.manifest import previous_manifest, summary_line
    from ray_jobs.job.plan import plan_metric, read_shards
    from ray_jobs.score_corpus import run_job

    make_corpus(tmp_path / "in", shards=2, rows=20)
    monkeypatch.setenv(ENV, KEY)
    config = parse_config(_config(tmp_path, manifest_key_env=ENV))
    out = tmp_path / "out"
    first = run_job(config)
    written = json.loads((out / "manifest.json").read_text())
    assert manifest_key.load_key(ENV).problem(written) is None and len(written["manifest_hmac"]) == 64
    reference = _scores(out / "text_stats")

    again = run_job(config)
    assert "previous_manifest_ignored" not in again and "earlier_output_not_trusted" not in again
    assert (again["metrics"]["text_stats"]["rows_scored"], again["metrics"]["text_stats"]["parts_kept"]) == (0, 4)

    part, forged = _forge(out)
    fs = fsspec.filesystem("file")
    unsigned = parse_config(_config(tmp_path))  # the same folder, read as a job without the key reads it
    previous, why = previous_manifest(fs, unsigned)
    shards = read_shards(unsigned, fs, ("id", "text"), previous)[0]
    metric = type("M", (), {"label": "text_stats", "digest": first["metrics"]["text_stats"]["signature_digest"]})()
    kept = plan_metric(fs, unsigned, metric, shards, previous=previous)
    assert why is None and str(part) in {uri for p in kept.shards.values() for _, uri, _ in p.kept}  # it passes

    third = run_job(config)
    report = third["metrics"]["text_stats"]
    assert (report["rows_scored"], report["rows_cached"], report["parts_kept"], report["rows_out"]) == (40, 0, 0, 40)
    assert "does not match its content" in third["previous_manifest_ignored"]
    assert third["earlier_output_not_trusted"]["parts"] == 4
    assert _scores(out / "text_stats") == reference  # the forged scores are gone
    assert forged not in {v for rows in _scores(out / "text_stats").values() for row in rows for v in row.values()}
    line = summary_line(third)
    assert line.count("earlier output not trusted") == 1
    assert "earlier output not trusted (previous manifest set aside: its 'manifest_hmac' does not match" in line
    assert "none of its 4 part(s) reused, every row scored again" in line
    assert KEY not in json.dumps(third) and KEY not in line
    assert run_job(config)["metrics"]["text_stats"]["rows_scored"] == 0  # signed again: trusted again


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_unsigned_manifest_from_before_the_key_is_not_trusted(ray_local, tmp_path, monkeypatch):
    from ray_jobs.job.manifest import summary_line
    from ray_jobs.score_corpus import run_job

    make_corpus(tmp_path / "in", shards=2, rows=20)
    monkeypatch.delenv(ENV, raising=False)
    plain = run_job(parse_config(_config(tmp_path)))
    assert "manifest_hmac" not in json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "manifest_key_env" not in plain["config"]
    monkeypatch.setenv(ENV, KEY)
    signed = run_job(parse_config(_config(tmp_path, manifest_key_env=ENV)))
    report = signed["metrics"]["text_stats"]
    assert (report["rows_scored"], report["rows_cached"], report["parts_kept"]) == (40, 0, 0)
    assert signed["previous_manifest_ignored"].startswith("it carries no 'manifest_hmac'")
    line = summary_line(signed)
    assert line.count("earlier output not trusted (previous manifest set aside: it carries no 'manifest_hmac'") == 1
    (tmp_path / "out" / "manifest.json").unlink()  # deleting the manifest only costs a full rescore
    deleted = run_job(parse_config(_config(tmp_path, manifest_key_env=ENV)))
    assert deleted["metrics"]["text_stats"]["rows_scored"] == 40
    assert deleted["earlier_output_not_trusted"]["why"] == "no readable previous manifest to vouch for it"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_key_never_shows_in_the_cli_output_or_manifest(ray_address, sample_corpus, tmp_path):
    """`ctgscore run` on the sample corpus, twice (signed, then the signed manifest read back):
    the key is in no output file, nor on stdout or stderr; the summary is as without a key."""
    out = tmp_path / "out"
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({"input": str(sample_corpus), "output": str(out), "metrics": [{"name": "text_stats"}],
                               "part_rows": 40, "progress": False, "manifest_key_env": ENV,
                               "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}}))
    env = child_env(RAY_ADDRESS=ray_address, **{ENV: KEY})
    runs = [run_cli(["run", str(job)], env=env, timeout=240) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert KEY not in run.stdout + run.stderr and KEY[:8] not in run.stdout + run.stderr
    assert "280 in -> 280 out, 0 scored, 280 reused" in runs[1].stdout + runs[1].stderr
    assert "not trusted" not in runs[1].stdout + runs[1].stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["manifest_key_env"] == ENV and len(manifest["manifest_hmac"]) == 64
    leaked = [str(p) for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []

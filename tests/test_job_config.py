"""Job config validation, shard listing and schema checks, reuse rules: no Ray needed."""

from __future__ import annotations

import hashlib
import sys

import pyarrow as pa
import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from ray_jobs import incremental
from ray_jobs.config import ConfigError, S3Config, load_config, parse_config
from ray_jobs.job import layout
from ray_jobs.job.metrics import metric_params
from ray_jobs.score_corpus import error_rate_exceeded
from ray_jobs.storage import clients, failures, listing, shard_checks, writes
from scoring.errors import StorageError, UsageError
from tests.job_support import make_rows, write_rows

BASE = {"input": "data/sample", "output": "out/x", "metrics": [{"name": "text_stats"}]}


def config_with(**changes):
    data = {**BASE, **changes}
    return {k: v for k, v in data.items() if v is not None}


def test_minimal_config_defaults():
    config = parse_config(dict(BASE), base_dir="/base")
    assert config.input == "/base/data/sample"
    assert config.output == "/base/out/x"
    assert [(m.name, m.label, m.params) for m in config.metrics] == [("text_stats", "text_stats", {})]
    assert 0 < config.pool.num_cpus < 1  # fractional by default: a full-CPU pool hangs 2-core Ray
    assert config.skip_bad_shards is False


@pytest.mark.parametrize(
    "data, message",
    [
        (config_with(outptu="x"), "unknown key 'outptu'"),
        (config_with(output=None), "missing required key 'output'"),
        (config_with(metrics=[]), "at least one metric"),
        (config_with(metrics=[{"name": "nope"}]), "unknown metric 'nope'"),
        (config_with(metrics=[{"name": "text_stats", "parms": {}}]), "unknown key 'parms' in 'metrics[0]'"),
        (config_with(metrics=[{"params": {}}]), "missing required key 'metrics[0].name'"),
        (config_with(metrics=[{"name": "text_stats"}, {"name": "text_stats"}]), "labels must be unique"),
        (config_with(pool={"num_cpu": 1}), "unknown key 'num_cpu' in 'pool'"),
        (config_with(pool={"num_cpus": "half"}), "'pool.num_cpus' must be int or float"),
        (config_with(pool={"min_size": 3, "max_size": 2}), "'pool.max_size' (2) must be >= 'pool.min_size' (3)"),
        (config_with(pool={"min_size": True}), "'pool.min_size' must be int, got bool"),
        (config_with(batch_size=0), "'batch_size' must be > 0"),
        (config_with(dtype="fp8"), "'dtype' must be one of"),
        (config_with(s3={"endpoint": "x"}), "unknown key 'endpoint' in 's3'"),
        (config_with(input="gs://bucket/x"), "only local paths and s3://"),
        (config_with(input="s3://"), "must name a bucket"),
        (config_with(skip_bad_shards="yes"), "'skip_bad_shards' must be bool"),
        (config_with(output="data/sample/scores"), "is inside 'input'"),
        (config_with(input="s3://b/dump", output="s3://b/dump/scores"), "is inside 'input'"),
        (config_with(input="s3://b/dump/2026", output="s3://b/dump"), "is inside 'output'"),
        (config_with(input="s3://b/dump", output="s3://b"), "is inside 'output'"),
        (config_with(input="/data/out/in", output="/data/out/"), "is inside 'output'"),
    ],
)
def test_bad_configs_name_the_key(data, message):
    with pytest.raises(ConfigError) as excinfo:
        parse_config(data)
    assert message in str(excinfo.value)


def test_load_config_names_the_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("input: a\noutput: b\nmetrics:\n  - name: text_stats\nextra: 1\n")
    with pytest.raises(ConfigError, match=r"job\.yaml: unknown key 'extra'"):
        load_config(path)
    path.write_text("input: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_job_dtype_and_budget_go_only_to_metrics_that_take_them():
    config = parse_config(
        config_with(
            metrics=[{"name": "text_stats"}, {"name": "perplexity", "params": {"model": "m", "dtype": "float32"}}],
            dtype="bfloat16",
            token_budget=512,
        )
    )
    text_stats, perplexity = config.metrics
    assert metric_params(config, text_stats) == {}
    # the metric's own dtype wins over the job default; the budget is filled in
    assert metric_params(config, perplexity) == {"model": "m", "dtype": "float32", "token_budget": 512}


def test_cli_reports_config_errors_before_any_work(tmp_path, capsys):
    from ctgscore.cli import main

    path = tmp_path / "job.yaml"
    path.write_text("input: a\noutput: b\nmetrics:\n  - name: text_stats\n    params: {}\npool: {size: 2}\n")
    assert main(["run", str(path)]) == 2
    assert "unknown key 'size' in 'pool'" in capsys.readouterr().err


def test_list_shards_sizes_and_md5_etags(tmp_path):
    write_rows(tmp_path / "b.parquet", make_rows(1, 5))
    write_rows(tmp_path / "sub" / "a.parquet", make_rows(2, 5))
    (tmp_path / "notes.txt").write_text("ignored")
    (tmp_path / ".hidden.parquet").write_bytes(b"temp file")
    fs = clients.fsspec_filesystem(str(tmp_path), S3Config())
    shards = listing.list_shards(str(tmp_path), fs)
    assert [s.rel for s in shards] == ["b.parquet", "sub/a.parquet"]
    for shard in shards:
        data = open(shard.uri, "rb").read()
        assert shard.size == len(data)
        assert shard.etag == hashlib.md5(data).hexdigest()


def _check(path, needed=("text",)):
    fs = clients.fsspec_filesystem(str(path), S3Config())
    info = [s for s in listing.list_shards(str(path.parent), fs) if s.uri == str(path)][0]
    return shard_checks.check_shard(info, fs, needed)


def test_schema_check_accepts_good_shard(tmp_path):
    rows = make_rows(0, 6)
    write_rows(tmp_path / "good.parquet", rows)
    check = _check(tmp_path / "good.parquet", ("text", "prefix", "references"))
    assert check.num_rows == 6
    assert check.ids == [row["id"] for row in rows]


def test_schema_check_names_file_and_field(tmp_path):
    good = tmp_path / "good.parquet"
    write_rows(good, make_rows(0, 6))
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[:-40])
    wrong = tmp_path / "wrong_type.parquet"
    table = pa.Table.from_pylist(make_rows(1, 4)).set_column(7, "text", pa.array([1, 2, 3, 4], pa.int64()))
    __import__("pyarrow.parquet").parquet.write_table(table, wrong)
    no_id = tmp_path / "no_id.parquet"
    __import__("pyarrow.parquet").parquet.write_table(pa.Table.from_pylist(make_rows(2, 3)).drop_columns(["id"]), no_id)
    dup = tmp_path / "dup.parquet"
    rows = make_rows(3, 4)
    rows[3]["id"] = rows[1]["id"]
    write_rows(dup, rows)
    bad_refs = tmp_path / "bad_refs.parquet"
    __import__("pyarrow.parquet").parquet.write_table(
        pa.table({"id": ["a"], "text": ["x"], "references": ["not a list"]}), bad_refs
    )

    cases = {
        truncated: "unreadable Parquet",
        wrong: "column 'text' has type int64, expected string",
        no_id: "missing required column 'id'",
        dup: f"rows 1 and 3: duplicate id {rows[1]['id']!r}",
        bad_refs: "column 'references' has type string, expected list<string>",
    }
    for path, message in cases.items():
        with pytest.raises(shard_checks.BadShard) as excinfo:
            _check(path, ("text", "references"))
        assert str(path) in str(excinfo.value)
        assert message in str(excinfo.value)


def test_part_reuse_needs_same_bytes_signature_and_range():
    meta = incremental.part_metadata("a.parquet", "e1", 100, "sig", "d1", 20, 30, errors=2)
    assert incremental.part_is_complete((10, meta), "e1", 100, "d1", 20, 30)
    assert incremental.footer_errors((10, meta)) == 2
    assert not incremental.part_is_complete(None, "e1", 100, "d1", 20, 30)
    assert not incremental.part_is_complete((10, meta), "e1", 100, "d2", 20, 30)  # metric params/model changed
    assert not incremental.part_is_complete((10, meta), "e2", 100, "d1", 20, 30)  # shard bytes changed
    assert not incremental.part_is_complete((10, meta), "e1", 101, "d1", 20, 30)
    assert not incremental.part_is_complete((9, meta), "e1", 100, "d1", 20, 30)  # rows lost
    assert not incremental.part_is_complete((10, meta), "e1", 100, "d1", 10, 20)  # another range


def test_part_names_sort_by_row_and_parse_back():
    names = [layout.PartName(start, stop, "0123456789ab").filename() for start, stop in ((100, 200), (0, 100), (200, 250))]
    assert sorted(names)[0] == "part-0000000000-0000000100-0123456789ab.parquet"
    assert [layout.parse_part(n) for n in sorted(names)] == [
        layout.PartName(0, 100, "0123456789ab"), layout.PartName(100, 200, "0123456789ab"), layout.PartName(200, 250, "0123456789ab")
    ]
    assert layout.parse_part("part-00000.parquet") is None  # an input-style name is not a part
    assert layout.parse_part("part-0000000005-0000000001-0123456789ab.parquet") is None
    assert layout.part_uri("s3://b/out", "ppl", "sub/a.parquet", layout.PartName(0, 5, "0123456789ab")) == (
        "s3://b/out/ppl/sub/a/part-0000000000-0000000005-0123456789ab.parquet"
    )


def _write_part(out, label, shard, info, start, stop, digest="d1"):
    from ray_jobs.job import layout as lay

    # as a worker writes it: an `error` column, whose null count the plan checks against the footer's error count
    table = pa.table({"id": [f"r{i}" for i in range(start, stop)], "error": pa.array([None] * (stop - start), pa.string())})
    uri = lay.part_uri(str(out), label, shard.rel, lay.PartName(start, stop, shard.version))
    meta = incremental.part_metadata(shard.rel, info.etag, info.size, "sig", digest, start, stop, errors=0)
    writes.put_atomic(clients.fsspec_filesystem(str(out), S3Config()), uri, writes.table_bytes(table, meta))
    return uri


def _one_shard_plan(tmp_path, name, rows):
    """(fs, config, metric, info, shard): one input shard `name` said to hold `rows` rows, a
    text_stats metric of digest d1, parts of 100 rows."""
    from ray_jobs.job.metrics import ResolvedMetric
    from ray_jobs.job.plan import Shard

    write_rows(tmp_path / "in" / name, make_rows(0, 7))
    fs = clients.fsspec_filesystem(str(tmp_path), S3Config())
    (info,) = listing.list_shards(str(tmp_path / "in"), fs)
    shard = Shard(info, rows, {"id": "string", "text": "string"}, layout.input_version(info.etag, info.size))
    config = parse_config({**BASE, "input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "part_rows": 100})
    return fs, config, ResolvedMetric(config.metrics[0], object, {}, "sig", "d1", ("text",), ("x",)), info, shard


def test_plan_keeps_committed_parts_and_schedules_only_the_gaps(tmp_path):
    from ray_jobs.job.plan import Shard, plan_metric
    from ray_jobs.job.units import staged_units

    fs, config, metric, info, shard = _one_shard_plan(tmp_path, "a.parquet", 1000)
    # a killed run committed parts 0-100, 300-400 and 900-1000 (workers finish out of order)
    kept = [_write_part(tmp_path / "out", "text_stats", shard, info, s, e) for s, e in ((0, 100), (300, 400), (900, 1000))]
    other_signature = _write_part(tmp_path / "out", "text_stats", shard, info, 100, 200, digest="d0")
    plan = plan_metric(fs, config, metric, [shard]).shards["a.parquet"]
    assert [uri for _, uri, _ in plan.kept] == kept
    assert plan.units == [(100, 200), (200, 300)] + [(s, s + 100) for s in range(400, 900, 100)]
    # the d0 part is no cover's: superseded; it has this run's name for 100-200, so that unit is
    # written staged and the commit moves it over the d0 part (tests/test_job_staged.py)
    assert plan.superseded == [other_signature] and staged_units(plan) == {(100, 200)}
    assert other_signature not in plan.previous  # another signature is no cache
    # the shard changes: every old part becomes the row cache of the new run and is superseded
    changed = Shard(info, 1000, shard.columns, "fedcba987654")
    plan = plan_metric(fs, config, metric, [changed]).shards["a.parquet"]
    assert plan.kept == [] and len(plan.units) == 10
    assert sorted(plan.previous) == sorted(kept) and sorted(plan.superseded) == sorted(kept + [other_signature])


def test_a_shard_under_another_etag_takes_a_same_size_folder_as_its_row_cache(tmp_path):
    """Reuse by content when the ETag differs (an S3 object uploaded in parts, then copied):
    a new shard with no output of its own gets as its row cache the parts of the vanished
    folder the previous manifest records with the same signature and input size, nothing else
    (another size or signature, or no record: scored as new), and of those only the parts the
    listing shows as recorded (name, size, etag); a present shard's kept parts serve too."""
    from ray_jobs.job.plan import Shard, plan_metric

    fs, config, metric, info, shard = _one_shard_plan(tmp_path, "new.parquet", 200)
    old_info = listing.ShardInfo(str(tmp_path / "gone" / "old.parquet"), "old.parquet", info.size, "9f86d081884c7d65-3")
    old = Shard(old_info, 200, shard.columns, layout.input_version(old_info.etag, old_info.size))
    old_parts = [_write_part(tmp_path / "out", "text_stats", old, old_info, s, e) for s, e in ((0, 100), (100, 200))]
    folder = str(tmp_path / "out" / "text_stats" / "old")
    listed = {f.uri: f for f in listing.list_outputs(fs, folder)}

    def manifest(**record):
        record = {"input_etag": old_info.etag, "input_size": old_info.size, "digest": "d1",
                  "parts": {uri.rsplit("/", 1)[-1]: {"size": listed[uri].size, "etag": listed[uri].etag}
                            for uri in old_parts}, **record}
        return {"metrics": {"text_stats": {"parts": {"old.parquet": record}}}}

    plan = plan_metric(fs, config, metric, [shard], previous=manifest()).shards["new.parquet"]
    assert sorted(plan.previous) == old_parts and plan.reused_from == [folder]
    assert plan.units == [(0, 100), (100, 200)] and plan.kept == [] and plan.superseded == []  # written anew, own version
    for previous in (manifest(input_size=info.size + 1), manifest(digest="d0"), None):
        plan = plan_metric(fs, config, metric, [shard], previous=previous).shards["new.parquet"]
        assert plan.previous == [] and plan.reused_from == [], previous
    # a present shard of the same size under another ETag (a copy in S3): its kept parts
    present = Shard(old_info, 200, shard.columns, old.version)
    plans = plan_metric(fs, config, metric, [shard, present]).shards
    assert sorted(uri for _, uri, _ in plans["old.parquet"].kept) == old_parts
    assert sorted(plans["new.parquet"].previous) == old_parts and plans["new.parquet"].reused_from == [folder]
    # a vanished folder's part rewritten since its manifest record (a later run of another
    # signature under this label crashed before its manifest): not this signature's, not borrowed
    _write_part(tmp_path / "out", "text_stats", old, old_info, 100, 200, digest="d2")
    assert plan_metric(fs, config, metric, [shard], previous=manifest()).shards["new.parquet"].previous == old_parts[:1]


def test_two_renamed_shards_of_one_size_each_borrow_the_folder_that_holds_their_rows(tmp_path):
    """Two different shards of the same size renamed together under other ETags: each new
    shard's row cache holds the parts of every vanished folder of its size and row count (rows
    are found by content, so a folder that is not its own costs reads, never a wrong row), up
    to `MAX_LENDERS` folders, the one named most like it first; a folder of another row count
    lends nothing."""
    from ray_jobs.job.plan import Shard, plan_metric
    from ray_jobs.job.reuse_cache import MAX_LENDERS

    fs, config, metric, _, _ = _one_shard_plan(tmp_path, "unused.parquet", 7)
    size, columns = 4321, {"id": "string", "text": "string"}

    def shard(rel, etag, rows=200, where="gone"):
        info = listing.ShardInfo(str(tmp_path / where / rel), rel, size, etag)
        return Shard(info, rows, columns, layout.input_version(etag, size))

    names = ["old-a", "old-b", "other-c", "other-d", "other-e", "short-f"]
    records, parts = {}, {}
    for n, name in enumerate(names):
        rows = 100 if name == "short-f" else 200
        old = shard(f"{name}.parquet", f"{n:016x}-3", rows)
        parts[name] = [_write_part(tmp_path / "out", "text_stats", old, old.info, s, e) for s, e in ((0, 100), (100, 200))[: rows // 100]]
        listed = {f.uri: f for f in listing.list_outputs(fs, str(tmp_path / "out" / "text_stats" / name))}
        records[old.rel] = {"input_etag": old.info.etag, "input_size": size, "digest": "d1",
                            "parts": {uri.rsplit("/", 1)[-1]: {"size": listed[uri].size, "etag": listed[uri].etag}
                                      for uri in parts[name]}}
    new = [shard("new-a.parquet", "a" * 32, where="in"), shard("new-b.parquet", "b" * 32, where="in")]
    plans = plan_metric(fs, config, metric, new, previous={"metrics": {"text_stats": {"parts": records}}}).shards
    folder = {name: str(tmp_path / "out" / "text_stats" / name) for name in names}
    for mine in "ab":  # its own rows are in its row cache
        assert set(parts[f"old-{mine}"]) <= set(plans[f"new-{mine}.parquet"].previous), mine
    for mine, theirs in (("a", "b"), ("b", "a")):
        plan = plans[f"new-{mine}.parquet"]
        assert plan.reused_from == [folder[f"old-{mine}"], folder[f"old-{theirs}"], folder["other-c"], folder["other-d"]]
        assert len(plan.reused_from) == MAX_LENDERS and sorted(plan.previous) == sorted(
            uri for lender in ("old-a", "old-b", "other-c", "other-d") for uri in parts[lender])
        assert plan.units == [(0, 100), (100, 200)] and plan.kept == []  # scored from the cache, written anew
    # a lender's part rewritten since its record (another signature): not lent, the others are
    old_b = shard("old-b.parquet", f"{1:016x}-3")
    rewritten = _write_part(tmp_path / "out", "text_stats", old_b, old_b.info, 100, 200, digest="d2")
    assert rewritten == parts["old-b"][1]
    plans = plan_metric(fs, config, metric, new, previous={"metrics": {"text_stats": {"parts": records}}}).shards
    assert all(rewritten not in p.previous and set(parts["old-a"]) <= set(p.previous) for p in plans.values())


def test_looking_for_same_size_folders_reads_each_folder_once_not_once_per_new_shard(tmp_path, monkeypatch):
    """Many new shards beside many folders of vanished ones (a nightly run adding a day of
    shards to a large output): the same-size row cache indexes the folders once per metric,
    instead of going over every shard and folder again for each new shard."""
    from ray_jobs.job.metrics import ResolvedMetric
    from ray_jobs.job.plan import Shard, plan_metric

    count = 40
    for i in range(count):
        write_rows(tmp_path / "in" / f"new{i:02d}.parquet", make_rows(i, 3 + i))
    fs = clients.fsspec_filesystem(str(tmp_path), S3Config())
    shards = [Shard(info, 3 + i, {"id": "string", "text": "string"}, layout.input_version(info.etag, info.size))
              for i, info in enumerate(listing.list_shards(str(tmp_path / "in"), fs))]
    config = parse_config({**BASE, "input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "part_rows": 100})
    metric = ResolvedMetric(config.metrics[0], object, {}, "sig", "d1", ("text",), ("x",))
    records = {}
    for i in range(count):
        info = listing.ShardInfo(str(tmp_path / "gone" / f"old{i}.parquet"), f"old{i}.parquet", 7, "9f86d081884c7d65-3")
        old = Shard(info, 3, shards[0].columns, layout.input_version(info.etag, info.size))
        name = _write_part(tmp_path / "out", "text_stats", old, info, 0, 3).rsplit("/", 1)[-1]
        records[info.rel] = {"input_etag": info.etag, "input_size": 7, "digest": "d1", "parts": {name: {}}}
    stems = []
    original = layout.shard_stem
    monkeypatch.setattr(layout, "shard_stem", lambda rel: stems.append(rel) or original(rel))
    plans = plan_metric(fs, config, metric, shards, previous={"metrics": {"text_stats": {"parts": records}}}).shards
    assert all(not p.previous and not p.reused_from for p in plans.values())  # no folder of their sizes
    assert len(stems) <= 6 * count, len(stems)


def test_relative_paths_resolve_against_the_yaml_folder(tmp_path, monkeypatch):
    folder = tmp_path / "jobs"
    (folder / "models" / "tiny").mkdir(parents=True)
    path = folder / "job.yaml"
    path.write_text(
        "input: ../dump\noutput: out\nmetrics:\n  - name: perplexity\n"
        "    params: {model: models/tiny, other: facebook/bart-large-cnn}\nray: {temp_dir: raytmp}\n"
    )
    monkeypatch.chdir(tmp_path / "jobs" / "models")  # the working directory does not matter
    config = load_config(path)
    assert config.input == str(tmp_path / "dump")
    assert config.output == str(folder / "out")
    assert config.metrics[0].params == {"model": str(folder / "models" / "tiny"), "other": "facebook/bart-large-cnn"}
    assert config.ray.temp_dir == str(folder / "raytmp")


def test_set_overrides_are_yaml_scalars_at_key_paths(tmp_path, monkeypatch):
    path = tmp_path / "job.yaml"
    path.write_text("input: a\noutput: b\nmetrics:\n  - name: text_stats\n  - name: perplexity\n    params: {model: m}\n")
    monkeypatch.chdir(tmp_path)
    config = load_config(
        path,
        {"pool.num_cpus": "0.25", "skip_bad_shards": "true", "metrics.1.params.model": "other", "max_error_rate": "0.5",
         "output": "elsewhere/out", "ray.temp_dir": "null"},
    )
    assert config.pool.num_cpus == 0.25 and config.skip_bad_shards is True and config.max_error_rate == 0.5
    assert config.metrics[1].params == {"model": "other"}
    assert config.output == str(tmp_path / "elsewhere" / "out")  # typed on the command line: the cwd
    with pytest.raises(ConfigError, match="unknown key 'nope' in 'pool'"):
        load_config(path, {"pool.nope": "1"})
    with pytest.raises(ConfigError, match="'metrics.5' is not an index"):
        load_config(path, {"metrics.5.name": "x"})


@pytest.mark.parametrize(
    "data, message",
    [
        (config_with(metrics=[{"name": "text_stats", "class": "os:system"}]), "unknown key 'class' in 'metrics[0]'"),
        (config_with(max_error_rate=1.5), "'max_error_rate' must be a fraction between 0 and 1"),
        (config_with(part_rows=0), "'part_rows' must be > 0"),
        (config_with(prune="yes"), "'prune' must be bool"),
    ],
)
def test_new_keys_and_no_import_paths(data, message):
    with pytest.raises(ConfigError) as excinfo:
        parse_config(data)
    assert message in str(excinfo.value)
    assert isinstance(excinfo.value, UsageError) and excinfo.value.exit_code == 2


def test_error_rate_exceeded_names_each_metric_over_the_limit():
    manifest = {
        "config": {"max_error_rate": 0.1},
        "metrics": {"a": {"rows_out": 100, "rows_error": 10}, "b": {"rows_out": 100, "rows_error": 11}, "c": {"rows_out": 0, "rows_error": 0}},
    }
    assert error_rate_exceeded(manifest) == ["metric b: 11 of 100 rows (11.0%) have an error, above max_error_rate 0.1"]
    assert len(error_rate_exceeded(manifest, 0.0)) == 2


def test_manifest_config_dump_has_no_url_credentials():
    config = parse_config(config_with(s3={"endpoint_url": "http://user:hunter2@127.0.0.1:9000"}))
    dumped = str(config.as_dict())
    assert "hunter2" not in dumped and "127.0.0.1:9000" in dumped


@pytest.mark.parametrize(
    "raised, expected_type, exit_code",
    [
        (StorageError("cannot read model s3://m/x: bucket 'm' does not exist"), "StorageError", 1),
        (UsageError("model /nowhere: no such folder"), "ConfigError", 2),
    ],
)
def test_a_metric_that_cannot_be_built_keeps_storage_and_config_faults_apart(monkeypatch, raised, expected_type, exit_code):
    """A model bucket that cannot be reached is the storage's fault (exit 1), a bad model
    location the config's (exit 2); both name the metric and the cause in one line."""
    from ray_jobs.job import metrics

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(metrics, "build_metric_for", fail)
    config = parse_config(config_with(metrics=[{"name": "text_stats", "label": "ts"}]), base_dir="/base")
    with pytest.raises(Exception) as info:
        metrics.resolve_metric(config, config.metrics[0])
    assert type(info.value).__name__ == expected_type
    assert info.value.exit_code == exit_code
    assert "metric 'ts'" in str(info.value) and str(raised) in str(info.value)
    assert "\n" not in str(info.value)


def test_read_failures_say_whose_fault_they_are():
    uri = "s3://dumps/part-0.parquet"
    assert failures.read_failure(ConnectionError("Connection reset by peer"), uri).startswith("cannot read: storage unreachable")
    assert failures.read_failure(PermissionError(13, "Permission denied"), uri) == "cannot read: permission denied"
    broken = failures.read_failure(pa.ArrowInvalid("Parquet magic bytes not found"), uri)
    assert broken.startswith("unreadable Parquet (ArrowInvalid: Parquet magic bytes not found")


def test_metric_pool_overrides_the_job_pool_key_by_key():
    from ray_jobs.config import metric_pool

    config = parse_config(config_with(
        metrics=[{"name": "text_stats"}, {"name": "perplexity", "params": {"model": "m"}, "pool": {"num_gpus": 1, "max_size": 4}}],
        pool={"min_size": 2, "max_size": 3, "num_cpus": 0.25},
    ))
    text_stats, perplexity = config.metrics
    assert metric_pool(config, text_stats) == config.pool
    gpu = metric_pool(config, perplexity)
    assert (gpu.min_size, gpu.max_size, gpu.num_cpus, gpu.num_gpus) == (2, 4, 0.25, 1)
    # a GPU pool means device: auto for a metric that takes a device and names none
    assert metric_params(config, perplexity)["device"] == "auto"
    assert "device" not in metric_params(config, text_stats)
    assert config.as_dict()["metrics"][1]["pool"] == {"num_gpus": 1, "max_size": 4}
    assert "pool" not in config.as_dict()["metrics"][0]


def test_gpu_pools_default_to_a_32768_token_budget(repo_root):
    """A metric in a pool with GPUs gets 32,768 padded tokens per forward unless the job or
    the metric sets a budget; a CPU pool keeps the metric's own default (4,096 for
    perplexity), so CPU signatures are unchanged."""
    import inspect

    from ray_jobs.config import metric_pool
    from scoring.perplexity import PerplexityMetric

    gpu = {"name": "perplexity", "label": "gpu", "params": {"model": "m"}, "pool": {"num_gpus": 1}}
    cpu = {"name": "perplexity", "label": "cpu", "params": {"model": "m"}}
    own = {"name": "perplexity", "label": "own", "params": {"model": "m", "token_budget": 8192}, "pool": {"num_gpus": 1}}
    config = parse_config(config_with(metrics=[gpu, cpu, own]))
    assert [metric_params(config, spec).get("token_budget") for spec in config.metrics] == [32_768, None, 8192]
    assert inspect.signature(PerplexityMetric.__init__).parameters["token_budget"].default == 4096  # the CPU pool's
    job_set = parse_config(config_with(metrics=[gpu, cpu], token_budget=16_384))
    assert [metric_params(job_set, spec)["token_budget"] for spec in job_set.metrics] == [16_384, 16_384]
    for name in ("nightly_s3.yaml", "leaderboard_refresh.yaml"):  # the shipped GPU job configs
        shipped = load_config(repo_root / "examples" / name)
        for spec in shipped.metrics:
            budget = metric_params(shipped, spec).get("token_budget")
            assert budget == (32_768 if metric_pool(shipped, spec).num_gpus else None), (name, spec.label)


@pytest.mark.parametrize(
    "metrics, pool, message",
    [
        ([{"name": "perplexity", "params": {"model": "m", "device": "cuda"}}], None,
         "'metrics[0].params.device' is 'cuda' but 'pool.num_gpus' is 0"),
        ([{"name": "perplexity", "params": {"model": "m", "device": "cuda:1"}, "pool": {"num_gpus": 0}}], {"num_gpus": 1},
         "'metrics[0].params.device' is 'cuda:1' but 'metrics[0].pool.num_gpus' is 0"),
        ([{"name": "text_stats"}, {"name": "perplexity", "params": {"model": "m", "device": "cpu"}, "pool": {"num_gpus": 1}}], None,
         "'metrics[1].params.device' is 'cpu' but 'metrics[1].pool.num_gpus' is 1"),
        ([{"name": "text_stats", "pool": {"num_gpus": "one"}}], None, "'metrics[0].pool.num_gpus' must be int or float or null, got str"),
        ([{"name": "text_stats", "pool": {"gpus": 1}}], None, "unknown key 'gpus' in 'metrics[0].pool'"),
        ([{"name": "text_stats", "pool": {"max_size": 1}}], {"min_size": 2, "max_size": 4},
         "'metrics[0].pool.max_size' (1) must be >= 'metrics[0].pool.min_size' (2)"),
        ([{"name": "text_stats", "pool": {"num_cpus": -1}}], None, "'metrics[0].pool.num_cpus' must be >= 0, got -1"),
    ],
)
def test_device_and_gpus_must_agree_and_metric_pool_errors_name_the_key(metrics, pool, message):
    data = config_with(metrics=metrics, pool=pool)
    with pytest.raises(ConfigError) as excinfo:
        parse_config(data)
    assert message in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


def test_config_errors_from_nested_sections_name_the_key_path():
    cases = {
        "'ray.num_cpus' must be int or null, got str ('2')": config_with(ray={"num_cpus": "2"}),
        "'token_budget' must be int or null, got bool": config_with(token_budget=True),
        "'metrics[0].params' must be a mapping, got list": config_with(metrics=[{"name": "text_stats", "params": [1]}]),
        "'metrics[0]' must be a mapping, got str": config_with(metrics=["text_stats"]),
        "'metrics' must be a list, got str": config_with(metrics="text_stats"),
    }
    for message, data in cases.items():
        with pytest.raises(ConfigError) as excinfo:
            parse_config(data)
        assert message in str(excinfo.value)


def test_thousands_of_same_size_folders_cost_each_new_shard_a_few_name_comparisons(tmp_path, monkeypatch):
    """A day of same-size shards renamed together beside as many folders of that size (a
    nightly run): each new shard compares its name with a bounded number of folders, not with
    every one (2,000 x 2,000 comparisons took seconds, 6,000 x 6,000 minutes of planning), and
    still borrows the folder named like it first."""
    from types import SimpleNamespace

    from ray_jobs.job import reuse_cache

    count, size, rows = 2000, 12345, 200
    files_by_stem, recorded = {}, {}
    for i in range(count):
        stem = f"day1/shard-{i:05d}"
        parts = [layout.part_uri("/out", "m", stem + ".parquet", layout.PartName(0, rows, f"{i:012x}"))]
        files_by_stem[stem] = [SimpleNamespace(uri=uri, size=5, etag="e") for uri in parts]
        recorded[stem + ".parquet"] = {"digest": "d", "input_size": size,
                                       "parts": {uri.rsplit("/", 1)[-1]: {"size": 5, "etag": "e"} for uri in parts}}
    wanting = [SimpleNamespace(shard=SimpleNamespace(rel=f"day2/shard-{i:05d}.parquet", info=SimpleNamespace(size=size),
                                                     num_rows=rows), previous=[], reused_from=[]) for i in range(count)]
    plan = SimpleNamespace(metric=SimpleNamespace(digest="d", label="m"), shards={p.shard.rel: p for p in wanting})
    compared = []
    likeness = reuse_cache._likeness
    monkeypatch.setattr(reuse_cache, "_likeness", lambda a, b: compared.append(1) or likeness(a, b))
    folders = reuse_cache.SameSizeFolders(SimpleNamespace(output="/out"), plan, files_by_stem, recorded)
    for shard_plan in wanting:
        folders.apply(shard_plan)
    assert len(compared) <= 100 * count, len(compared)
    for i in (0, 1, 777, count - 1):
        lent = wanting[i].reused_from
        assert len(lent) == reuse_cache.MAX_LENDERS and lent[0] == f"/out/m/day1/shard-{i:05d}", lent

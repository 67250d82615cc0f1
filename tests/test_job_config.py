"""Job config validation, shard listing and schema checks, reuse rules: no Ray needed."""

from __future__ import annotations

import hashlib
import sys

import pyarrow as pa
import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from ray_jobs import incremental
from ray_jobs import io as jio
from ray_jobs.config import ConfigError, S3Config, load_config, metric_params, parse_config
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
    fs = jio.fsspec_filesystem(str(tmp_path), S3Config())
    shards = jio.list_shards(str(tmp_path), fs)
    assert [s.rel for s in shards] == ["b.parquet", "sub/a.parquet"]
    for shard in shards:
        data = open(shard.uri, "rb").read()
        assert shard.size == len(data)
        assert shard.etag == hashlib.md5(data).hexdigest()


def _check(path, needed=("text",)):
    fs = jio.fsspec_filesystem(str(path), S3Config())
    info = [s for s in jio.list_shards(str(path.parent), fs) if s.uri == str(path)][0]
    return jio.check_shard(info, fs, needed)


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
        with pytest.raises(jio.BadShard) as excinfo:
            _check(path, ("text", "references"))
        assert str(path) in str(excinfo.value)
        assert message in str(excinfo.value)


def test_reuse_needs_same_bytes_signature_and_row_count():
    info = jio.ShardInfo(uri="/x/a.parquet", rel="a.parquet", size=100, etag="e1")
    meta = incremental.shard_metadata(info, "sig", "d1", 10)
    assert incremental.is_complete((10, meta), info, "d1", 10)
    assert not incremental.is_complete(None, info, "d1", 10)
    assert not incremental.is_complete((10, meta), info, "d2", 10)  # metric params/model changed
    assert not incremental.is_complete((10, meta), jio.ShardInfo("/x/a.parquet", "a.parquet", 100, "e2"), "d1", 10)
    assert not incremental.is_complete((10, meta), jio.ShardInfo("/x/a.parquet", "a.parquet", 101, "e1"), "d1", 10)
    assert not incremental.is_complete((9, meta), info, "d1", 10)
    assert incremental.output_uri("s3://b/out", "ppl", "sub/a.parquet") == "s3://b/out/ppl/sub/a.parquet"

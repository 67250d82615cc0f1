"""`scoring.registry`: built-in metrics, plugins from the `ctgscore.metrics` entry point group
(an installed distribution is simulated by a dist-info folder on the path), unknown names and
parameters as `UsageError`, and `describe_metrics` for `ctgscore metrics`."""

from __future__ import annotations

import json
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli
from scoring import registry
from scoring.errors import UsageError

PLUGIN = textwrap.dedent('''
    """A test plugin metric."""
    from scoring.metric import RowMetric
    from scoring.signature import Signature


    class CharCount(RowMetric):
        """Characters of `text` times `scale`."""

        name = "char_count"
        output_columns = ("char_count",)

        def __init__(self, unit: str, scale: float = 1.0):
            self.unit = unit
            self.scale = scale

        def signature(self):
            return Signature(self.name, "1", {"scale": self.scale, "unit": self.unit})

        def score_valid(self, rows):
            return [{"char_count": self.scale * len(row["text"])} for row in rows]
''')


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    """A folder that looks like site-packages with one installed plugin distribution
    (`ctgscore-test-plugin`) registering `char_count`, a broken `broken_metric`, and an attempt
    to replace the built-in `text_stats`."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "ctgscore_test_plugin.py").write_text(PLUGIN)
    info = root / "ctgscore_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ctgscore-test-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[ctgscore.metrics]\n"
        "char_count = ctgscore_test_plugin:CharCount\n"
        "broken_metric = ctgscore_test_plugin_missing:Nothing\n"
        "text_stats = ctgscore_test_plugin:CharCount\n"
    )
    monkeypatch.syspath_prepend(str(root))
    return root


def test_builtins_are_registered():
    assert set(registry.BUILTIN_METRICS) <= set(registry.metric_names())
    from scoring.text_stats import TextStatsMetric

    assert registry.metric_class("text_stats") is TextStatsMetric


def test_unknown_metric_and_parameters_are_usage_errors():
    with pytest.raises(UsageError, match=r"unknown metric 'bleurt'; known metrics: .*bartscore.*text_stats"):
        registry.build_metric("bleurt")
    with pytest.raises(UsageError, match=r"metric 'text_stats' has no parameter 'lowercase'"):
        registry.build_metric("text_stats", {"lowercase": True})
    with pytest.raises(UsageError, match=r"metric 'perplexity' has no parameter 'temperature'; parameters: model"):
        registry.check_params("perplexity", {"temperature": 2})


def test_plugin_is_loaded_from_entry_points(plugin_path):
    assert "char_count" in registry.METRICS and "char_count" in registry.metric_names()
    assert registry.METRICS["text_stats"] == registry.BUILTIN_METRICS["text_stats"]  # no override
    metric = registry.build_metric("char_count", {"unit": "chars", "scale": 2})
    rows = [{"id": "a", "text": "abcd"}, {"id": "b", "text": ""}]
    results = metric.score_rows(rows)
    assert results[0]["char_count"] == 8.0 and results[0]["error"] is None
    assert results[1]["error"] == "empty field 'text'"
    with pytest.raises(UsageError, match="needs parameter 'unit'"):
        registry.build_metric("char_count")
    with pytest.raises(UsageError, match="broken_metric.*cannot import"):
        registry.metric_class("broken_metric")


def test_describe_metrics_reads_constructor_defaults(plugin_path):
    infos = {info.name: info for info in registry.describe_metrics()}
    plugin = infos["char_count"]
    assert plugin.source == "plugin" and plugin.target == "ctgscore_test_plugin:CharCount"
    assert plugin.doc == "Characters of `text` times `scale`."
    assert [(p.name, p.required, p.default) for p in plugin.params] == [("unit", True, None), ("scale", False, 1.0)]
    assert plugin.outputs == ["char_count"] and plugin.columns == ["text"]
    assert infos["broken_metric"].problem and "cannot import" in infos["broken_metric"].problem
    assert infos["text_stats"].source == "builtin"


def test_plugin_through_the_cli(plugin_path, tmp_path):
    env = {"PYTHONPATH": str(plugin_path)}
    listing = run_cli(["metrics", "--json"], env=env)
    assert listing.returncode == 0, listing.stderr
    names = {m["name"]: m for m in json.loads(listing.stdout)["metrics"]}
    assert names["char_count"]["params"][1] == {"name": "scale", "default": 1.0, "required": False, "annotation": "float"}
    assert "cannot import" in names["broken_metric"]["problem"]
    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["xyz", "hello"]}), rows)
    out = tmp_path / "out.parquet"
    proc = run_cli(["score", "-m", "char_count", "--param", "unit=c", "--param", "scale=0.5", "-i", rows, "-o", out],
                   env=env)
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(out).column("char_count").to_pylist() == [1.5, 2.5]
    assert_user_error(run_cli(["score", "-m", "broken_metric", "-i", rows, "-o", out], env=env), 2, "broken_metric")
    assert_user_error(run_cli(["score", "-m", "char_count", "-i", rows, "-o", out], env=env), 2, "'unit'")


def test_job_config_accepts_a_plugin_name(plugin_path, tmp_path):
    from ray_jobs.config import parse_config

    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"),
                           "metrics": [{"name": "char_count", "params": {"unit": "c"}}]})
    assert [m.name for m in config.metrics] == ["char_count"]

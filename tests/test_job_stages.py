"""The job's shape: small stage modules, and each metric resolved once (`ray_jobs/job/metrics.py`):
no other module of the job derives a metric's pool, params or class from `(config, spec)` again."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
JOB = ROOT / "ray_jobs" / "job"
RESOLVERS = {"metric_pool", "metric_params", "metric_class_for", "resolve_metric", "resolve_metrics", "build_metric_for"}


def _calls(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_no_stage_module_is_over_300_lines():
    long = {p.name: n for p in JOB.glob("*.py") if (n := len(p.read_text().splitlines())) > 300}
    assert not long, long


def test_metrics_are_resolved_in_one_place():
    callers = {p.name: sorted(_calls(p) & RESOLVERS) for p in JOB.glob("*.py") if p.name != "metrics.py"}
    allowed = {"run.py": ["resolve_metrics"]}  # the pipeline's first step
    assert {name: found for name, found in callers.items() if found and allowed.get(name) != found} == {}
    assert callers["run.py"] == ["resolve_metrics"]


def test_the_resolver_walker_sees_calls(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("from ray_jobs import config\ndef f(c, s):\n    return config.metric_pool(c, s), metric_params(c, s)\n")
    assert _calls(path) & RESOLVERS == {"metric_pool", "metric_params"}

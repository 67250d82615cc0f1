"""Metric names -> row-metric classes, so a config (CLI flags or a job YAML) builds the same
object everywhere: `build_metric("bartscore", {"model": "...", "dtype": "bfloat16"})`."""

from __future__ import annotations

import importlib
from typing import Any

from scoring.metric import RowMetric

METRICS: dict[str, str] = {
    "text_stats": "scoring.text_stats:TextStatsMetric",
    "bartscore": "scoring.bartscore:BARTScoreMetric",
    "ctrleval": "scoring.ctrleval:CTRLEvalMetric",
    "perplexity": "scoring.perplexity:PerplexityMetric",
    "codi": "scoring.codi.metric:CodiMetric",
}


def metric_class(name: str) -> type[RowMetric]:
    if name not in METRICS:
        raise ValueError(f"unknown metric '{name}'; known metrics: {', '.join(sorted(METRICS))}")
    module_name, class_name = METRICS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def build_metric(name: str, params: dict[str, Any] | None = None) -> RowMetric:
    """Build a row metric from its name and parameters; unknown parameters are an error."""
    cls = metric_class(name)
    params = dict(params or {})
    try:
        return cls(**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for metric '{name}': {exc}") from exc

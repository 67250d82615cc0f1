"""Metric names -> row-metric classes, so a config (CLI flags or a job YAML) builds the same
object everywhere: `build_metric("bartscore", {"model": "...", "dtype": "bfloat16"})`.

The built-in metrics are listed in `BUILTIN_METRICS`. Other packages add metrics through the
Python entry point group `ctgscore.metrics` (name = metric name, value = `module:Class` of a
`RowMetric` subclass), e.g. in their `pyproject.toml`:

    [project.entry-points."ctgscore.metrics"]
    my_metric = "my_package.metric:MyMetric"

`METRICS` maps every registered name (built-in and plugin) to its `module:Class`; plugin
classes are imported only when a metric of theirs is built or described. See docs/plugins.md.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterator

from scoring.errors import UsageError
from scoring.metric import RowMetric

ENTRY_POINT_GROUP = "ctgscore.metrics"

BUILTIN_METRICS: dict[str, str] = {
    "text_stats": "scoring.text_stats:TextStatsMetric",
    "bartscore": "scoring.bartscore:BARTScoreMetric",
    "ctrleval": "scoring.ctrleval:CTRLEvalMetric",
    "perplexity": "scoring.perplexity:PerplexityMetric",
    "gptscore": "scoring.prompted_lm:GPTScoreMetric",
    "codi": "scoring.codi.metric:CodiMetric",
    "bleu": "scoring.bleu:BLEUMetric",
    "chrf": "scoring.bleu:CHRFMetric",
    "rouge": "scoring.rouge:RougeMetric",
    "bertscore": "scoring.bertscore:BERTScoreMetric",
    "attribute_accuracy": "scoring.attribute_accuracy:AttributeAccuracyMetric",
}


def plugin_metrics() -> dict[str, str]:
    """Metrics registered by installed packages under the `ctgscore.metrics` entry point
    group; a plugin cannot replace a built-in name."""
    from importlib.metadata import entry_points

    found: dict[str, str] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name not in BUILTIN_METRICS:
            found.setdefault(entry.name, entry.value)
    return found


class _Registry(Mapping):
    """Read-only name -> `module:Class` view over the built-ins and the installed plugins
    (entry points are looked up on every access, so a plugin installed at run time counts)."""

    def _all(self) -> dict[str, str]:
        return {**BUILTIN_METRICS, **plugin_metrics()}

    def __getitem__(self, name: str) -> str:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __contains__(self, name: object) -> bool:
        return name in BUILTIN_METRICS or name in plugin_metrics()


METRICS: Mapping[str, str] = _Registry()


def metric_names() -> list[str]:
    """Every registered metric name, sorted."""
    return sorted(METRICS)


def metric_class(name: str) -> type[RowMetric]:
    """The `RowMetric` subclass registered as `name`; `UsageError` for an unknown name or a
    plugin that cannot be imported."""
    if not isinstance(name, str) or name not in METRICS:
        raise UsageError(f"unknown metric {name!r}; known metrics: {', '.join(metric_names())}")
    target = METRICS[name]
    module_name, _, attribute = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"metric {name!r}: cannot import {target!r} ({type(exc).__name__}: {exc})") from exc
    if not (isinstance(cls, type) and issubclass(cls, RowMetric)):
        raise UsageError(f"metric {name!r}: {target!r} is not a RowMetric subclass")
    return cls


def _signature_parameters(cls: type) -> list[inspect.Parameter]:
    if cls.__init__ is object.__init__:  # no constructor of its own: takes no parameters
        return []
    return list(inspect.signature(cls.__init__).parameters.values())[1:]  # drop self


def _init_parameters(cls: type) -> list[inspect.Parameter]:
    return [p for p in _signature_parameters(cls) if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _accepts_any_keyword(cls: type) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in _signature_parameters(cls))


def check_params(name: str, params: Mapping[str, Any]) -> None:
    """`UsageError` naming the first parameter `name`'s constructor does not take, or a
    required one that is missing, before anything is loaded."""
    cls = metric_class(name)
    if not isinstance(params, Mapping):
        raise UsageError(f"metric {name!r}: params must be a mapping, got {type(params).__name__}")
    known = {p.name: p for p in _init_parameters(cls)}
    if not _accepts_any_keyword(cls):
        for key in params:
            if key not in known:
                raise UsageError(
                    f"metric {name!r} has no parameter {key!r}; parameters: {', '.join(known) or '(none)'}"
                )
    for key, parameter in known.items():
        if parameter.default is inspect.Parameter.empty and key not in params:
            raise UsageError(f"metric {name!r} needs parameter {key!r}")


def build_metric(name: str, params: Mapping[str, Any] | None = None) -> RowMetric:
    """Build a row metric from its registered name and parameters; an unknown name, an unknown
    parameter or a missing required one is a `UsageError`."""
    params = dict(params or {})
    check_params(name, params)
    return metric_class(name)(**params)


@dataclass
class ParamInfo:
    """One constructor parameter of a metric: its name, default (`required` when none) and
    annotation as written."""

    name: str
    default: Any = None
    required: bool = False
    annotation: str = ""


@dataclass
class MetricInfo:
    """What `ctgscore metrics` prints for one registered metric."""

    name: str
    target: str
    source: str  # "builtin" or "plugin"
    doc: str = ""
    columns: list[str] = field(default_factory=list)  # input columns the metric reads
    needs: str = ""  # the columns a row needs for the metric to apply (others are skipped)
    outputs: list[str] = field(default_factory=list)  # score columns (may depend on params)
    params: list[ParamInfo] = field(default_factory=list)
    columns_by_score: dict[str, list[str]] = field(default_factory=dict)  # per direction or aspect: the columns it reads
    problem: str | None = None  # a plugin that cannot be imported


def _annotation(parameter: inspect.Parameter) -> str:
    annotation = parameter.annotation
    if annotation is inspect.Parameter.empty:
        return ""
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


def describe_metric(name: str) -> MetricInfo:
    """Name, class, first docstring paragraph, read columns, score columns and constructor
    parameters with their defaults, from the class itself (nothing is loaded)."""
    target = METRICS[name] if name in METRICS else ""
    source = "builtin" if name in BUILTIN_METRICS else "plugin"
    try:
        cls = metric_class(name)
    except UsageError as exc:
        return MetricInfo(name=name, target=target, source=source, problem=str(exc))
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    params = []
    for parameter in _init_parameters(cls):
        required = parameter.default is inspect.Parameter.empty
        params.append(ParamInfo(parameter.name, None if required else parameter.default, required, _annotation(parameter)))
    by_score = {str(k): list(v) for k, v in (getattr(cls, "score_inputs", None) or {}).items()}
    columns = list(getattr(cls, "required_columns", ())) + list(getattr(cls, "optional_columns", ()))
    columns += [c for needed in by_score.values() for c in needed if c not in columns]
    return MetricInfo(
        name=name, target=target, source=source, doc=doc.split("\n\n")[0].replace("\n", " "),
        columns=list(dict.fromkeys(columns)), columns_by_score=by_score,
        needs=getattr(cls, "needs", "") or ", ".join(getattr(cls, "required_columns", ())),
        outputs=list(getattr(cls, "output_columns", ()) or ()), params=params,
    )


def describe_metrics() -> list[MetricInfo]:
    """`describe_metric` for every registered metric, sorted by name."""
    return [describe_metric(name) for name in metric_names()]

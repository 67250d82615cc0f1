"""Job configuration: a YAML file (or dict) validated strictly before any work starts.

Every key is checked: an unknown key, a missing required key or a value of the wrong type is a
`ConfigError` naming the key path (e.g. `pool.num_cpus`). Example (see `examples/*.yaml`):

    input: data/sample                 # local folder or s3://bucket/prefix of Parquet shards
    output: out/sample                 # local folder or s3://bucket/prefix
    metrics:
      - name: text_stats               # a name from scoring.registry.METRICS
        params: {}
      - name: perplexity
        label: ppl_tiny                # output folder name; defaults to the metric name
        params: {model: .cache/tiny-models/gpt2}
    dtype: float32                     # injected into metric params that accept `dtype`
    token_budget: 4096                 # injected into metric params that accept `token_budget`
    batch_size: 64                     # rows per scorer call
    pool: {min_size: 1, max_size: 2, num_cpus: 0.5, num_gpus: 0}
    skip_bad_shards: false             # true: skip unreadable shards, record them in the manifest
    s3: {endpoint_url: null, region: us-east-1}
"""

from __future__ import annotations

import inspect
import pathlib
import re
from dataclasses import asdict, dataclass, field
from typing import Any

LABEL_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")


class ConfigError(ValueError):
    """A job configuration problem, named by its key path."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    cls: str | None = None  # "module:Class" of a RowMetric outside the registry (plugins, tests)


@dataclass(frozen=True)
class PoolConfig:
    min_size: int = 1
    max_size: int = 2
    num_cpus: float = 0.5
    num_gpus: float = 0.0
    torch_threads: int | None = None  # torch.set_num_threads in each actor (Ray sets 1 for <1 CPU)
    max_restarts: int = 3  # a killed scoring actor is restarted this many times
    max_task_retries: int = 3  # its in-flight batches are retried on the restarted actor


@dataclass(frozen=True)
class S3Config:
    endpoint_url: str | None = None  # default: $AWS_ENDPOINT_URL, else the AWS default chain
    region: str = "us-east-1"


@dataclass(frozen=True)
class RayConfig:
    address: str | None = None  # None: $RAY_ADDRESS when set (ray job submit), else local Ray
    num_cpus: int | None = None  # local Ray only
    object_store_memory: int | None = None  # local Ray only, bytes
    temp_dir: str | None = None  # local Ray only


@dataclass(frozen=True)
class JobConfig:
    input: str
    output: str
    metrics: tuple[MetricSpec, ...]
    dtype: str | None = None
    token_budget: int | None = None
    batch_size: int = 64
    pool: PoolConfig = field(default_factory=PoolConfig)
    skip_bad_shards: bool = False
    s3: S3Config = field(default_factory=S3Config)
    ray: RayConfig = field(default_factory=RayConfig)
    progress: bool = True

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["metrics"] = [
            {k: v for k, v in (("name", m.name), ("label", m.label), ("params", m.params), ("class", m.cls)) if v is not None}
            for m in self.metrics
        ]
        return data


_TOP_REQUIRED = {"input": str, "output": str, "metrics": list}
_TOP_OPTIONAL = {
    "dtype": (str, type(None)),
    "token_budget": (int, type(None)),
    "batch_size": int,
    "pool": dict,
    "skip_bad_shards": bool,
    "s3": dict,
    "ray": dict,
    "progress": bool,
}
_POOL = {
    "min_size": int,
    "max_size": int,
    "num_cpus": (int, float),
    "num_gpus": (int, float),
    "torch_threads": (int, type(None)),
    "max_restarts": int,
    "max_task_retries": int,
}
_S3 = {"endpoint_url": (str, type(None)), "region": str}
_RAY = {
    "address": (str, type(None)),
    "num_cpus": (int, type(None)),
    "object_store_memory": (int, type(None)),
    "temp_dir": (str, type(None)),
}
_METRIC = {"name": str, "params": (dict, type(None)), "label": str, "class": str}
DTYPES = ("float32", "float16", "bfloat16")


def _type_name(expected) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def _check_keys(section: dict, allowed: dict, path: str, required: tuple[str, ...] = ()) -> None:
    unknown = sorted(set(section) - set(allowed))
    if unknown:
        where = f" in '{path}'" if path else ""
        raise ConfigError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(repr(k) for k in unknown)}{where}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    for key in required:
        if key not in section:
            raise ConfigError(f"missing required key '{path + '.' if path else ''}{key}'")
    for key, value in section.items():
        expected = allowed[key]
        # bool is an int subclass: refuse it where a number is expected
        if isinstance(value, bool) and expected is not bool and bool not in (expected if isinstance(expected, tuple) else (expected,)):
            raise ConfigError(f"'{path + '.' if path else ''}{key}' must be {_type_name(expected)}, got bool")
        if not isinstance(value, expected):
            raise ConfigError(
                f"'{path + '.' if path else ''}{key}' must be {_type_name(expected)}, got {type(value).__name__} ({value!r})"
            )


def _positive(value, path: str, allow_zero: bool = False) -> None:
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"'{path}' must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def _parse_metric(entry: Any, index: int) -> MetricSpec:
    path = f"metrics[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"'{path}' must be a mapping with 'name' and 'params', got {type(entry).__name__}")
    _check_keys(entry, _METRIC, path, required=("name",))
    name = entry["name"]
    label = entry.get("label", name)
    if not LABEL_PATTERN.match(label):
        raise ConfigError(f"'{path}.label' {label!r} must match {LABEL_PATTERN.pattern} (it names the output folder)")
    cls = entry.get("class")
    if cls is None:
        from scoring.registry import METRICS

        if name not in METRICS:
            raise ConfigError(f"'{path}.name': unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}")
    elif ":" not in cls:
        raise ConfigError(f"'{path}.class' must look like 'package.module:ClassName', got {cls!r}")
    return MetricSpec(name=name, params=dict(entry.get("params") or {}), label=label, cls=cls)


def parse_config(data: Any, base_dir: str | pathlib.Path | None = None) -> JobConfig:
    """Validate a config mapping. Relative local paths resolve against `base_dir` (the YAML
    file's folder is *not* used: paths are relative to the working directory, as with
    `ray job submit --working-dir .`), unless `base_dir` is given."""
    if not isinstance(data, dict):
        raise ConfigError(f"a job config must be a mapping, got {type(data).__name__}")
    allowed = {**_TOP_REQUIRED, **_TOP_OPTIONAL}
    _check_keys(data, allowed, "", required=tuple(_TOP_REQUIRED))
    if not data["metrics"]:
        raise ConfigError("'metrics' must list at least one metric")
    metrics = tuple(_parse_metric(entry, i) for i, entry in enumerate(data["metrics"]))
    labels = [m.label for m in metrics]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ConfigError(f"metric labels must be unique (they name output folders); repeated: {', '.join(duplicates)}; set 'label'")

    pool_data = data.get("pool") or {}
    _check_keys(pool_data, _POOL, "pool")
    pool = PoolConfig(**pool_data)
    _positive(pool.min_size, "pool.min_size")
    _positive(pool.max_size, "pool.max_size")
    if pool.max_size < pool.min_size:
        raise ConfigError(f"'pool.max_size' ({pool.max_size}) must be >= 'pool.min_size' ({pool.min_size})")
    _positive(pool.num_cpus, "pool.num_cpus", allow_zero=True)
    _positive(pool.num_gpus, "pool.num_gpus", allow_zero=True)
    _positive(pool.torch_threads, "pool.torch_threads")
    _positive(pool.max_restarts, "pool.max_restarts", allow_zero=True)
    _positive(pool.max_task_retries, "pool.max_task_retries", allow_zero=True)

    s3_data = data.get("s3") or {}
    _check_keys(s3_data, _S3, "s3")
    s3 = S3Config(**s3_data)
    if s3.endpoint_url is not None and not re.match(r"^https?://", s3.endpoint_url):
        raise ConfigError(f"'s3.endpoint_url' must start with http:// or https://, got {s3.endpoint_url!r}")

    ray_data = data.get("ray") or {}
    _check_keys(ray_data, _RAY, "ray")
    ray_config = RayConfig(**ray_data)

    dtype = data.get("dtype")
    if dtype is not None and dtype not in DTYPES:
        raise ConfigError(f"'dtype' must be one of {', '.join(DTYPES)}, got {dtype!r}")
    _positive(data.get("token_budget"), "token_budget")
    batch_size = data.get("batch_size", 64)
    _positive(batch_size, "batch_size")

    def resolve(location: str, key: str) -> str:
        if not location.strip():
            raise ConfigError(f"'{key}' must not be empty")
        if location.startswith("s3://"):
            if len(location) <= len("s3://") or location[5] == "/":
                raise ConfigError(f"'{key}' {location!r} must name a bucket: s3://bucket/prefix")
            return location.rstrip("/")
        if "://" in location:
            raise ConfigError(f"'{key}' {location!r}: only local paths and s3:// are supported")
        path = pathlib.Path(location).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = pathlib.Path(base_dir) / path
        return str(path.resolve())

    input_location = resolve(data["input"], "input")
    output_location = resolve(data["output"], "output")
    if output_location == input_location or output_location.startswith(input_location.rstrip("/") + "/"):
        raise ConfigError(
            f"'output' {output_location!r} is inside 'input' {input_location!r}: its Parquet files would be read as input shards"
        )
    return JobConfig(
        input=input_location,
        output=output_location,
        metrics=metrics,
        dtype=dtype,
        token_budget=data.get("token_budget"),
        batch_size=batch_size,
        pool=pool,
        skip_bad_shards=data.get("skip_bad_shards", False),
        s3=s3,
        ray=ray_config,
        progress=data.get("progress", True),
    )


def load_config(path: str | pathlib.Path) -> JobConfig:
    """Read and validate a YAML job config file."""
    import yaml

    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"job config {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    try:
        return parse_config(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def metric_params(config: JobConfig, spec: MetricSpec) -> dict[str, Any]:
    """A metric's constructor parameters: its own `params`, plus the job-level `dtype` and
    `token_budget` when the metric's constructor takes them and `params` does not set them."""
    params = dict(spec.params)
    cls = metric_class_for(spec)
    accepted = inspect.signature(cls.__init__).parameters
    for key in ("dtype", "token_budget"):
        value = getattr(config, key)
        if value is not None and key not in params and key in accepted:
            params[key] = value
    return params


def metric_class_for(spec: MetricSpec):
    """The RowMetric class a spec names (registry name, or `class: module:Class`)."""
    import importlib

    from scoring.metric import RowMetric
    from scoring.registry import metric_class

    if spec.cls is None:
        return metric_class(spec.name)
    module_name, class_name = spec.cls.split(":", 1)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"metric {spec.label!r}: cannot import class {spec.cls!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, RowMetric)):
        raise ConfigError(f"metric {spec.label!r}: {spec.cls!r} is not a RowMetric subclass")
    return cls


def build_metric_for(spec: MetricSpec, params: dict[str, Any]):
    """Build the metric object (the same call on the driver and in every scoring actor)."""
    if spec.cls is None:
        from scoring.registry import build_metric

        return build_metric(spec.name, params)
    cls = metric_class_for(spec)
    try:
        return cls(**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for metric '{spec.label}': {exc}") from exc

"""Job configuration: a YAML file (or dict) validated strictly before any work starts.

Every key is checked: an unknown key, a missing required key or a value of the wrong type is a
`ConfigError` naming the key path (e.g. `pool.num_cpus`). Example (see `examples/*.yaml`):

    input: ../data/sample              # local folder or s3://bucket/prefix of Parquet shards
    output: ../out/sample              # local folder or s3://bucket/prefix
    metrics:
      - name: text_stats               # a registered metric name (`ctgscore metrics`)
        params: {}
      - name: perplexity
        label: ppl_tiny                # output folder name; defaults to the metric name
        params: {model: ../.cache/tiny-models/tiny-gpt2}
    dtype: float32                     # injected into metric params that accept `dtype`
    token_budget: 4096                 # injected into metric params that accept `token_budget`
    batch_size: 64                     # rows per scorer call
    part_rows: 10000                   # rows per output part (the unit of commit and resume)
    pool: {min_size: 1, max_size: 2, num_cpus: 0.5, num_gpus: 0}
    skip_bad_shards: false             # true: skip unreadable shards, record them in the manifest
    prune: false                       # true: remove outputs whose input shard is gone
    max_error_rate: 0.1                # error_rate_exceeded() reports metrics above this fraction
    s3: {endpoint_url: null, region: us-east-1}

Relative local paths (`input`, `output`, `ray.temp_dir`, and string metric params that name an
existing file or folder beside the YAML) resolve against the YAML file's folder, not the
working directory. See `docs/job.md` for every key.
"""

from __future__ import annotations

import inspect
import pathlib
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from scoring.errors import UsageError

LABEL_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")


class ConfigError(UsageError):
    """A job configuration problem, named by its key path (exit code 2)."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""


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
    part_rows: int = 10_000
    pool: PoolConfig = field(default_factory=PoolConfig)
    skip_bad_shards: bool = False
    prune: bool = False
    max_error_rate: float = 0.1
    s3: S3Config = field(default_factory=S3Config)
    ray: RayConfig = field(default_factory=RayConfig)
    progress: bool = True

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["metrics"] = [
            {"name": m.name, "label": m.label, "params": m.params} for m in self.metrics
        ]
        data["s3"]["endpoint_url"] = redact_url(self.s3.endpoint_url)
        data["ray"]["address"] = redact_url(self.ray.address)
        return data


def redact_url(url: str | None) -> str | None:
    """A URL without the user:password part (for manifests and messages)."""
    if not url or "@" not in url.split("//", 1)[-1].split("/", 1)[0]:
        return url
    scheme, rest = url.split("//", 1) if "//" in url else ("", url)
    host = rest.split("@", 1)[1]
    return f"{scheme}//***@{host}" if scheme else f"***@{host}"


_TOP_REQUIRED = {"input": str, "output": str, "metrics": list}
_TOP_OPTIONAL = {
    "dtype": (str, type(None)),
    "token_budget": (int, type(None)),
    "batch_size": int,
    "part_rows": int,
    "pool": dict,
    "skip_bad_shards": bool,
    "prune": bool,
    "max_error_rate": (int, float),
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
_METRIC = {"name": str, "params": (dict, type(None)), "label": str}
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
    known = registered_metric_names()
    if name not in known:
        raise ConfigError(f"'{path}.name': unknown metric {name!r}; known metrics: {', '.join(sorted(known))}")
    return MetricSpec(name=name, params=dict(entry.get("params") or {}), label=label)


def registered_metric_names() -> set[str]:
    """Names a job config may use: the built-in metrics and plugins registered through the
    `ctgscore.metrics` entry point group (no import paths: a config cannot import code)."""
    from scoring import registry

    names = getattr(registry, "metric_names", None)
    return set(names()) if callable(names) else set(registry.METRICS)


def parse_config(data: Any, base_dir: str | pathlib.Path | None = None) -> JobConfig:
    """Validate a config mapping. Relative local paths resolve against `base_dir` (the YAML
    file's folder, when loaded by `load_config`), else against the working directory."""
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
    part_rows = data.get("part_rows", 10_000)
    _positive(part_rows, "part_rows")
    max_error_rate = data.get("max_error_rate", 0.1)
    if not 0 <= max_error_rate <= 1:
        raise ConfigError(f"'max_error_rate' must be a fraction between 0 and 1, got {max_error_rate}")

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

    if ray_config.temp_dir is not None and base_dir is not None:
        ray_config = RayConfig(**{**ray_data, "temp_dir": str(pathlib.Path(base_dir, ray_config.temp_dir).expanduser())})
    if base_dir is not None:
        metrics = tuple(
            MetricSpec(name=m.name, label=m.label, params=_resolve_param_paths(m.params, pathlib.Path(base_dir))) for m in metrics
        )
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
        part_rows=part_rows,
        pool=pool,
        skip_bad_shards=data.get("skip_bad_shards", False),
        prune=data.get("prune", False),
        max_error_rate=float(max_error_rate),
        s3=s3,
        ray=ray_config,
        progress=data.get("progress", True),
    )


def _resolve_param_paths(params: dict[str, Any], base: pathlib.Path) -> dict[str, Any]:
    """String params (top level or in lists) that name an existing file or folder relative to
    the YAML's folder become absolute; anything else (hub ids, prompt-set names, s3://)
    stays as written."""

    def one(value):
        if isinstance(value, list):
            return [one(item) for item in value]
        if not isinstance(value, str) or not value or "://" in value or pathlib.Path(value).is_absolute():
            return value
        candidate = base / value
        return str(candidate.resolve()) if candidate.exists() else value

    return {key: one(value) for key, value in params.items()}


def apply_overrides(data: Any, overrides: dict[str, str]) -> Any:
    """`--set key.path=value` overrides: dotted keys into mappings (a number indexes a
    list, e.g. `metrics.0.params.model`), values parsed as YAML scalars (`true`, `0.5`,
    `null`). A relative local `input`/`output` given this way is relative to the working
    directory (where the command was typed), not the YAML file."""
    import yaml

    if not isinstance(data, dict):
        raise ConfigError(f"a job config must be a mapping, got {type(data).__name__}")
    for dotted, raw in overrides.items():
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {dotted}: value {raw!r} is not a YAML scalar ({exc.__class__.__name__})") from exc
        if dotted in ("input", "output") and isinstance(value, str) and "://" not in value:
            value = str(pathlib.Path(value).expanduser().resolve())
        keys = dotted.split(".")
        node = data
        for depth, key in enumerate(keys):
            last = depth == len(keys) - 1
            where = ".".join(keys[: depth + 1])
            if isinstance(node, list):
                if not key.isdigit() or int(key) >= len(node):
                    raise ConfigError(f"--set {dotted}: '{where}' is not an index of a list of {len(node)}")
                index = int(key)
                if last:
                    node[index] = value
                else:
                    node = node[index]
            elif isinstance(node, dict):
                if last:
                    node[key] = value
                else:
                    if node.get(key) is None:
                        node[key] = {}
                    node = node[key]
            else:
                raise ConfigError(f"--set {dotted}: '{'.'.join(keys[:depth])}' is not a mapping or list")
    return data


def load_config(path: str | pathlib.Path, overrides: dict[str, str] | None = None) -> JobConfig:
    """Read and validate a YAML job config file, with optional `--set` overrides.
    Relative paths resolve against the YAML file's folder."""
    import yaml

    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"job config {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{path}: not valid YAML: {first}") from exc
    try:
        if overrides:
            data = apply_overrides(data, dict(overrides))
        return parse_config(data, base_dir=path.resolve().parent)
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
    """The RowMetric class registered under the spec's name."""
    from scoring.registry import metric_class

    try:
        return metric_class(spec.name)
    except ValueError as exc:
        raise ConfigError(f"metric {spec.label!r}: {exc}") from exc


def build_metric_for(spec: MetricSpec, params: dict[str, Any], cls=None, s3: S3Config | None = None):
    """Build the metric object (the same call on the driver and in every scoring actor).
    `cls` is the class resolved on the driver: workers then need only its module, not the
    driver's plugin registry. `s3`, the job's S3 settings, applies to the `s3://` models this
    process loads as well as to the data (`scoring.models.configure_s3`)."""
    if s3 is not None:
        from scoring.models import configure_s3

        configure_s3(endpoint_url=s3.endpoint_url, region=s3.region)
    cls = cls or metric_class_for(spec)
    try:
        return cls(**params)
    except TypeError as exc:
        raise ConfigError(f"bad parameters for metric '{spec.label}': {exc}") from exc

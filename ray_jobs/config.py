"""Job configuration: a YAML file (or dict) validated strictly before any work starts.

The sections are pydantic models (unknown keys refused, strict types); an unknown key, a missing
required key or a value of the wrong type is a `ConfigError` naming the key path (e.g.
`pool.num_cpus`, `metrics[1].pool.num_gpus`). Example (see `examples/*.yaml`):

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
    pool: {min_size: 1, max_size: 2, num_cpus: 0.5, num_gpus: 0}   # every metric's actor pool ...
    # ... unless the metric sets its own keys: `- name: bartscore ... pool: {num_gpus: 1}`
    skip_bad_shards: false             # true: skip unreadable shards, record them in the manifest
    prune: false                       # true: remove outputs whose input shard is gone
    max_error_rate: 0.1                # error_rate_exceeded() reports metrics above this fraction
    s3: {endpoint_url: null, region: us-east-1}
    limits: {max_cell_bytes: 1000000, max_references: 1000, max_json_depth: 64, max_inflation: 100}
    manifest_key_env: CTGSCORE_MANIFEST_KEY   # optional: sign the manifest with the key this variable holds

Relative local paths (`input`, `output`, `ray.temp_dir`, and string metric params that name an
existing file or folder beside the YAML) resolve against the YAML file's folder, not the
working directory. See `docs/job.md` for every key.
"""

from __future__ import annotations

import pathlib
import re
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scoring import config_yaml
from scoring import limits as scoring_limits
from scoring.error_rate import is_fraction
from scoring.errors import UsageError
from scoring.redact import redact_url
from scoring.utf8_text import decode_utf8

LABEL_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class ConfigError(UsageError):
    """A job configuration problem, named by its key path (exit code 2)."""


class _Section(BaseModel):
    """A config mapping: unknown keys refused, strict types (no "1" for 1, no true for 1), finite numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class PoolConfig(_Section):
    min_size: int = Field(1, gt=0)
    max_size: int = Field(2, gt=0)
    num_cpus: float = Field(0.5, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    torch_threads: int | None = Field(None, gt=0)  # torch.set_num_threads in each actor (Ray sets 1 for <1 CPU)
    max_restarts: int = Field(3, ge=0)  # a killed scoring actor is restarted this many times
    max_task_retries: int = Field(3, ge=0)  # its in-flight batches are retried on the restarted actor
    # a unit's device work running longer than this ends the actor (a hung kernel); Ray retries the unit
    unit_timeout_s: float | None = Field(None, gt=0)


class MetricPool(_Section):
    """`metrics[].pool`: the keys it sets override the job's `pool` for this metric only."""

    min_size: int | None = Field(None, gt=0)
    max_size: int | None = Field(None, gt=0)
    num_cpus: float | None = Field(None, ge=0)
    num_gpus: float | None = Field(None, ge=0)
    torch_threads: int | None = Field(None, gt=0)
    max_restarts: int | None = Field(None, ge=0)
    max_task_retries: int | None = Field(None, ge=0)
    unit_timeout_s: float | None = Field(None, gt=0)


class MetricSpec(_Section):
    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    label: str = ""
    pool: MetricPool | None = None


class S3Config(_Section):
    endpoint_url: str | None = None  # default: $AWS_ENDPOINT_URL, else the AWS default chain
    region: str = "us-east-1"


class LimitsConfig(_Section):
    """`limits`: what one cell and one input file may hold (`scoring.limits`, docs/job.md)."""

    max_cell_bytes: int = Field(scoring_limits.MAX_CELL_BYTES, gt=0)  # UTF-8 bytes of one cell
    max_references: int = Field(scoring_limits.MAX_REFERENCES, gt=0)  # items of one list cell
    max_json_depth: int = Field(scoring_limits.MAX_JSON_DEPTH, gt=0)  # nesting of a JSON cell
    max_inflation: float = Field(scoring_limits.MAX_INFLATION, ge=1)  # declared uncompressed / file bytes

    def row_limits(self) -> scoring_limits.RowLimits:
        return scoring_limits.RowLimits(self.max_cell_bytes, self.max_references, self.max_json_depth)


class RayConfig(_Section):
    address: str | None = None  # None: $RAY_ADDRESS when set (ray job submit), else local Ray
    num_cpus: int | None = Field(None, gt=0)  # local Ray only
    object_store_memory: int | None = Field(None, gt=0)  # local Ray only, bytes
    temp_dir: str | None = None  # local Ray only


class JobConfig(_Section):
    input: str
    output: str
    metrics: list[MetricSpec]
    dtype: Literal["float32", "float16", "bfloat16"] | None = None
    token_budget: int | None = Field(None, gt=0)
    batch_size: int = Field(64, gt=0)
    part_rows: int = Field(10_000, gt=0)
    pool: PoolConfig = Field(default_factory=PoolConfig)
    skip_bad_shards: bool = False
    prune: bool = False
    max_error_rate: float = 0.1
    s3: S3Config = Field(default_factory=S3Config)
    ray: RayConfig = Field(default_factory=RayConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    progress: bool = True
    manifest_key_env: str | None = None  # names the driver's variable holding the manifest signing key

    def as_dict(self) -> dict[str, Any]:
        data = self.model_dump()
        data["metrics"] = []
        for m in self.metrics:
            entry = {"name": m.name, "label": m.label, "params": _redacted_params(m.params)}
            if m.pool is not None:
                entry["pool"] = m.pool.model_dump(exclude_none=True)
            data["metrics"].append(entry)
        data["input"], data["output"] = redact_url(self.input), redact_url(self.output)
        data["s3"]["endpoint_url"] = redact_url(self.s3.endpoint_url)
        data["ray"]["address"] = redact_url(self.ray.address)
        if data["manifest_key_env"] is None:  # unset: the manifest's config as before the key existed
            del data["manifest_key_env"]
        return data


def _redacted_params(params: dict[str, Any]) -> dict[str, Any]:
    """Metric params as the manifest records them: URLs in string values redacted."""

    def one(value):
        if isinstance(value, str):
            return redact_url(value) if "://" in value else value
        if isinstance(value, list):
            return [one(item) for item in value]
        if isinstance(value, dict):
            return {key: one(item) for key, item in value.items()}
        return value

    return {key: one(value) for key, value in params.items()}


def metric_pool(config: JobConfig, spec: MetricSpec) -> PoolConfig:
    """The pool a metric's actors run in: the job's `pool` with the metric's own keys on top."""
    if spec.pool is None:
        return config.pool
    return config.pool.model_copy(update=spec.pool.model_dump(exclude_none=True))


# ----- pydantic errors as one line naming the key path ---------------------------------------
_TYPE_NAMES = {int: "int", float: "int or float", bool: "bool", str: "str", dict: "a mapping", list: "a list"}


def _key_path(loc: tuple) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _field_at(loc: tuple):
    """(model class, annotation) of the config field at `loc`, walking nested sections."""
    annotation: Any = JobConfig
    model = None
    for part in loc:
        annotation = _strip_optional(annotation)
        if isinstance(part, int):
            args = typing.get_args(annotation)
            annotation = args[0] if args else Any
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and part in annotation.model_fields:
            model = annotation
            annotation = annotation.model_fields[part].annotation
        else:
            return None, Any
    return model, annotation


def _strip_optional(annotation):
    """`X` for `X | None`, else the annotation itself."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return args[0] if is_union and len(args) == 1 else annotation


def _expected(annotation) -> str:
    nullable = type(None) in typing.get_args(annotation)
    base = _strip_optional(annotation)
    base = typing.get_origin(base) or base
    if isinstance(base, type) and issubclass(base, BaseModel):
        name = "a mapping"
    else:
        name = _TYPE_NAMES.get(base, getattr(base, "__name__", str(base)))
    return f"{name} or null" if nullable else name


def _describe_error(errors: list[dict]) -> str:
    """The first problem pydantic found, worded as before: unknown keys, then missing keys,
    then values."""
    rank = {"extra_forbidden": 0, "missing": 1}
    errors = sorted(errors, key=lambda e: rank.get(e["type"], 2))
    first = errors[0]
    loc, kind = tuple(first["loc"]), first["type"]
    path = _key_path(loc)
    if kind == "extra_forbidden":
        parent = loc[:-1]
        unknown = [e["loc"][-1] for e in errors if e["type"] == kind and tuple(e["loc"][:-1]) == parent]
        model, annotation = _field_at(parent)
        section = _strip_optional(annotation)
        allowed = sorted(section.model_fields) if isinstance(section, type) and issubclass(section, BaseModel) else []
        where = f" in '{_key_path(parent)}'" if parent else ""
        return (f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(repr(k) for k in unknown)}{where}; "
                f"allowed: {', '.join(allowed)}")
    if kind == "missing":
        return f"missing required key '{path}'"
    value = first.get("input")
    ctx = first.get("ctx") or {}
    if kind in ("greater_than", "greater_than_equal"):
        bound = ctx.get("gt", ctx.get("ge"))
        return f"'{path}' must be {'>' if 'gt' in ctx else '>='} {bound:g}, got {value}"
    if kind == "literal_error":
        return f"'{path}' must be one of {ctx.get('expected', '').replace(chr(39), '')}, got {value!r}"
    _, annotation = _field_at(loc)
    got = "bool" if isinstance(value, bool) else f"{type(value).__name__} ({value!r})"
    if kind == "model_type" or kind.endswith("_type"):
        return f"'{path}' must be {_expected(annotation)}, got {got}"
    return f"'{path}': {first['msg']}"


def _validated(data: dict[str, Any]) -> JobConfig:
    try:
        return JobConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe_error(exc.errors())) from None


def _without_nulls(data: dict[str, Any]) -> dict[str, Any]:
    """`pool:`/`s3:`/`ray:` left empty in YAML (null) mean their defaults, `params:` empty {}."""
    data = {k: v for k, v in data.items() if not (k in ("pool", "s3", "ray", "limits") and v is None)}
    if isinstance(data.get("metrics"), list):
        data["metrics"] = [
            {k: v for k, v in entry.items() if not (k in ("params", "pool") and v is None)} if isinstance(entry, dict) else entry
            for entry in data["metrics"]
        ]
    return data


def registered_metric_names() -> set[str]:
    """Names a job config may use: the built-in metrics and plugins registered through the
    `ctgscore.metrics` entry point group (no import paths: a config cannot import code)."""
    from scoring import registry

    names = getattr(registry, "metric_names", None)
    return set(names()) if callable(names) else set(registry.METRICS)


def _check_metric(spec: MetricSpec, index: int, known: set[str]) -> MetricSpec:
    path = f"metrics[{index}]"
    label = spec.label or spec.name
    if not LABEL_PATTERN.fullmatch(label) or not label.strip("."):
        raise ConfigError(f"'{path}.label' {label!r} must match {LABEL_PATTERN.pattern} and not be only dots "
                          f"(it names the output folder, which must stay inside 'output')")
    if spec.name not in known:
        raise ConfigError(f"'{path}.name': unknown metric {spec.name!r}; known metrics: {', '.join(sorted(known))}")
    return spec.model_copy(update={"label": label})


def _check_pool(pool: PoolConfig, path: str) -> None:
    if pool.max_size < pool.min_size:
        raise ConfigError(f"'{path}.max_size' ({pool.max_size}) must be >= '{path}.min_size' ({pool.min_size})")


def check_device(config: JobConfig, spec: MetricSpec, index: int) -> None:
    """A metric's `device` and its pool's GPUs must agree: `cuda` in a pool without GPUs fails
    in every actor (Ray hides the GPUs), `cpu` in a GPU pool holds a GPU and computes on the CPU."""
    device = spec.params.get("device")
    gpus = metric_pool(config, spec).num_gpus
    where = f"'metrics[{index}].params.device'"
    pool_key = f"metrics[{index}].pool.num_gpus" if spec.pool is not None and spec.pool.num_gpus is not None else "pool.num_gpus"
    if isinstance(device, str) and device.startswith("cuda") and not gpus:
        raise ConfigError(
            f"{where} is {device!r} but '{pool_key}' is 0: Ray gives the metric's actors no GPU; "
            f"set metrics[{index}].pool.num_gpus or use device: cpu"
        )
    if device == "cpu" and gpus:
        raise ConfigError(
            f"{where} is 'cpu' but '{pool_key}' is {gpus:g}: each actor would hold a GPU and compute on the CPU; "
            f"use device: auto or cuda, or num_gpus: 0"
        )


def parse_config(data: Any, base_dir: str | pathlib.Path | None = None) -> JobConfig:
    """Validate a config mapping (pydantic models above; errors name the key path). Relative
    local paths resolve against `base_dir` (the YAML file's folder, when loaded by
    `load_config`), else against the working directory."""
    if not isinstance(data, dict):
        raise ConfigError(f"a job config must be a mapping, got {type(data).__name__}")
    config = _validated(_without_nulls(data))
    if not config.metrics:
        raise ConfigError("'metrics' must list at least one metric")
    known = registered_metric_names()
    metrics = [_check_metric(spec, i, known) for i, spec in enumerate(config.metrics)]
    labels = [m.label for m in metrics]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ConfigError(f"metric labels must be unique (they name output folders); repeated: {', '.join(duplicates)}; set 'label'")
    _check_pool(config.pool, "pool")
    for index, spec in enumerate(metrics):
        if spec.pool is not None:
            _check_pool(metric_pool(config, spec), f"metrics[{index}].pool")
        check_device(config, spec, index)
    if config.s3.endpoint_url is not None and not re.match(r"^https?://", config.s3.endpoint_url):
        raise ConfigError(f"'s3.endpoint_url' must start with http:// or https://, got {config.s3.endpoint_url!r}")
    if config.manifest_key_env is not None and not ENV_NAME_PATTERN.match(config.manifest_key_env):
        raise ConfigError(f"'manifest_key_env' must name an environment variable (letters, digits and _, "
                          f"not starting with a digit), got {config.manifest_key_env!r}")
    if not is_fraction(config.max_error_rate):
        raise ConfigError(f"'max_error_rate' must be a fraction between 0 and 1, got {config.max_error_rate}")

    def resolve(location: str, key: str) -> str:
        if not location.strip():
            raise ConfigError(f"'{key}' must not be empty")
        if "://" in location and redact_url(location) != location:
            raise ConfigError(f"'{key}' {redact_url(location)!r} carries credentials; give them through the "
                              f"environment or an AWS profile, never in the URL")
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

    ray_config = config.ray
    if ray_config.temp_dir is not None and base_dir is not None:
        ray_config = ray_config.model_copy(update={"temp_dir": str(pathlib.Path(base_dir, pathlib.Path(ray_config.temp_dir).expanduser()))})
    if base_dir is not None:
        metrics = [m.model_copy(update={"params": _resolve_param_paths(m.params, pathlib.Path(base_dir))}) for m in metrics]
    input_location = resolve(config.input, "input")
    output_location = resolve(config.output, "output")
    if output_location == input_location or output_location.startswith(input_location.rstrip("/") + "/"):
        raise ConfigError(
            f"'output' {output_location!r} is inside 'input' {input_location!r}: its Parquet files would be read as input shards"
        )
    if input_location.startswith(output_location.rstrip("/") + "/"):
        raise ConfigError(
            f"'input' {input_location!r} is inside 'output' {output_location!r}: the job cleans, lists and prunes its "
            "output, so input files named like its temp files or parts would be removed, and a metric's folder could "
            "be the input's; put them side by side"
        )
    return config.model_copy(
        update={"input": input_location, "output": output_location, "metrics": metrics, "ray": ray_config,
                "max_error_rate": float(config.max_error_rate)}
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
    if not isinstance(data, dict):
        raise ConfigError(f"a job config must be a mapping, got {type(data).__name__}")
    for dotted, raw in overrides.items():
        try:
            value = config_yaml.load(raw, f"--set {dotted}") if raw != "" else ""
        except config_yaml.YamlSyntaxError as exc:
            raise ConfigError(f"--set {dotted}: value {raw!r} is not a YAML scalar ({exc})") from None
        except UsageError as exc:
            raise ConfigError(str(exc)) from None
        if dotted in ("input", "output") and isinstance(value, str) and "://" not in value:
            value = str(pathlib.Path(value).expanduser().resolve())
        keys = dotted.split(".")
        node = data
        for depth, key in enumerate(keys):
            last = depth == len(keys) - 1
            where = ".".join(keys[: depth + 1])
            if isinstance(node, list):
                if not (key.isascii() and key.isdigit() and len(key) <= 9) or int(key) >= len(node):
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
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"job config {path} does not exist")
    try:
        data = config_yaml.load(decode_utf8(path.read_bytes(), path, ConfigError), str(path))
    except UsageError as exc:  # not YAML, a key twice, an alias bomb, too deep (scoring.config_yaml)
        raise ConfigError(str(exc)) from None
    try:
        if overrides:
            data = apply_overrides(data, dict(overrides))
        return parse_config(data, base_dir=path.resolve().parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc

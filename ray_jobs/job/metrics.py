"""Each metric of a job resolved once, before any work starts: `resolve_metrics(config)`.

A `ResolvedMetric` holds everything a stage needs to know about one metric: its spec and
label, its class, its checked constructor parameters (with the job's `dtype`, `token_budget`
and `device: auto` filled in, `ray_jobs.config.metric_params`), its effective pool (the job's
`pool` under the metric's own keys), whether it has the CPU step (`RowMetric.prepare`), and
what building it once showed: signature and digest, columns read and written, and where it was
built. Every stage receives it; none looks at `(config, spec)` again."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from ray_jobs.config import ConfigError, JobConfig, MetricSpec, PoolConfig, S3Config, metric_pool
from ray_jobs.storage import worker_errors
from scoring.applicability import score_needs_by_label
from scoring.errors import StorageError, last_line


@dataclass(frozen=True)
class ResolvedMetric:
    spec: MetricSpec
    cls: type
    params: dict[str, Any]
    signature: str
    digest: str
    read_columns: tuple[str, ...]
    output_columns: tuple[str, ...]
    score_needs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # per score (short name): columns it needs
    described_on: dict[str, Any] = field(default_factory=dict)  # node and device, when built in a worker
    pool: PoolConfig = field(default_factory=PoolConfig)
    row_limits: Any = None  # the job's per-cell caps (`scoring.limits.RowLimits`); None: the defaults
    label: str = field(init=False)  # the output folder name (`spec.label`)
    two_stage: bool = field(init=False)  # the class has the CPU step (`RowMetric.prepare`)

    def __post_init__(self) -> None:
        from scoring.metric import RowMetric

        cls = self.cls
        two_stage = isinstance(cls, type) and issubclass(cls, RowMetric) and cls.prepare is not RowMetric.prepare
        object.__setattr__(self, "label", self.spec.label)
        object.__setattr__(self, "two_stage", two_stage)

    def build(self, s3: S3Config | None):
        """The metric object (the same call on the driver and in every worker)."""
        return build_metric_for(self.spec, self.params, self.cls, s3, self.row_limits)


def resolve_metrics(config: JobConfig, session=None) -> list[ResolvedMetric]:
    """Every metric of the job, resolved and built once. A metric whose pool has GPUs is built
    in a Ray task with its actors' resources (`session` is started for it)."""
    pools = [metric_pool(config, spec) for spec in config.metrics]
    if session is not None and any(pool.num_gpus for pool in pools):
        from ray_jobs.job.cluster import check_local_gpus

        session.ensure()  # the metric is described on a GPU worker
        check_local_gpus(pools, session)
    return [resolve_metric(config, spec, pool) for spec, pool in zip(config.metrics, pools)]


def resolve_metric(config: JobConfig, spec: MetricSpec, pool: PoolConfig | None = None) -> ResolvedMetric:
    """Build the metric once: validates its parameters and gives the signature that keys its
    outputs. Built on the driver, or, when actors ask for GPUs (a CPU-only head), in one Ray
    task with the actors' resources (Ray must be up). `pool`: the metric's effective pool
    (`metric_pool`, unless given)."""
    pool = pool or metric_pool(config, spec)
    cls = metric_class_for(spec)
    params = metric_params(config, spec, pool, cls)
    _check_params(spec, params)
    if pool.num_gpus:
        import ray

        task = ray.remote(num_cpus=pool.num_cpus, num_gpus=pool.num_gpus, max_retries=0)(_describe)
        try:
            described = ray.get(task.remote(spec, cls, params, config.s3, True))
        except Exception as exc:  # noqa: BLE001 - the task's error names the metric
            raise _build_error(spec, params, worker_errors.error_from_worker(exc) or exc) from exc
    else:
        try:
            described = _describe(spec, cls, params, config.s3, False)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - bad params or unloadable model: before any work
            raise _build_error(spec, params, exc) from exc
    return ResolvedMetric(spec=spec, cls=cls, params=params, pool=pool, row_limits=config.limits.row_limits(), **described)


def _build_error(spec: MetricSpec, params: dict[str, Any], exc: BaseException) -> Exception:
    """A metric that cannot be built, as one line naming it: storage that cannot be reached
    (a model bucket, say) stays a `StorageError` (exit 1); anything else is the config's fault."""
    message = f"metric {spec.label!r}: cannot build it with params {params}: {last_line(exc)}"
    if isinstance(exc, StorageError):
        error = StorageError(message)
        error.transient = getattr(exc, "transient", False)
        return error
    return ConfigError(message)


def _describe(spec: MetricSpec, cls: type, params: dict[str, Any], s3: S3Config, remote: bool) -> dict[str, Any]:
    metric = build_metric_for(spec, params, cls, s3)
    signature = metric.signature()
    described_on: dict[str, Any] = {}
    if remote:
        import ray

        described_on = {"node_id": ray.get_runtime_context().get_node_id(), "gpu_ids": ray.get_gpu_ids()}
        device = device_of(metric)
        if device is not None:
            described_on["device"] = device
    return {
        "signature": str(signature),
        "digest": signature.digest,
        "read_columns": tuple(metric.read_columns()),
        "output_columns": tuple(metric.output_columns),
        "score_needs": score_needs_by_label(metric),
        "described_on": described_on,
    }


def _check_params(spec: MetricSpec, params: dict[str, Any]) -> None:
    """Unknown or missing constructor parameters, named before anything is loaded."""
    from scoring.registry import check_params

    try:
        check_params(spec.name, params)
    except ValueError as exc:
        raise ConfigError(f"metric {spec.label!r}: {exc}") from exc


def device_of(metric) -> str | None:
    """The torch device a metric's model sits on, if it has one (metric.scorer.model...)."""
    for path in (("device",), ("scorer", "device"), ("scorer", "model", "device"), ("model", "device")):
        value = metric
        for name in path:
            value = getattr(value, name, None)
        if value is not None:
            return str(value)
    return None


# Padded tokens per forward for a metric in a pool with GPUs when neither the job nor the
# metric sets `token_budget`: sized for an 80 GB card (H100/H200; docs/gpu.md). CPU pools keep
# the metric's own default, so CPU signatures and stored scores are unchanged.
GPU_POOL_TOKEN_BUDGET = 32_768


def metric_params(config: JobConfig, spec: MetricSpec, pool: PoolConfig | None = None, cls: type | None = None) -> dict[str, Any]:
    """A metric's constructor parameters: its own `params`, plus the job-level `dtype` and
    `token_budget` (unset: `GPU_POOL_TOKEN_BUDGET` in a pool with GPUs) when the metric's
    constructor takes them and `params` does not set them, and `device: auto` when its pool
    (`metric_pool`, unless given) has GPUs and `params` names no device."""
    params = dict(spec.params)
    cls = cls or metric_class_for(spec)
    pool = pool or metric_pool(config, spec)
    accepted = inspect.signature(cls.__init__).parameters
    defaults = {"dtype": config.dtype, "token_budget": config.token_budget}
    if defaults["token_budget"] is None and pool.num_gpus:
        defaults["token_budget"] = GPU_POOL_TOKEN_BUDGET
    for key, value in defaults.items():
        if value is not None and key not in params and key in accepted:
            params[key] = value
    if "device" in accepted and "device" not in params and pool.num_gpus:
        params["device"] = "auto"
    return params


def metric_class_for(spec: MetricSpec):
    """The RowMetric class registered under the spec's name."""
    from scoring.registry import metric_class

    try:
        return metric_class(spec.name)
    except ValueError as exc:
        raise ConfigError(f"metric {spec.label!r}: {exc}") from exc


def build_metric_for(spec: MetricSpec, params: dict[str, Any], cls=None, s3: S3Config | None = None, row_limits=None):
    """Build the metric object (the same call on the driver and in every scoring actor).
    `cls` is the class resolved on the driver: workers then need only its module, not the
    driver's plugin registry. `s3`, the job's S3 settings, applies to the `s3://` models this
    process loads as well as to the data (`scoring.models.configure_s3`). `row_limits`, the
    job's `limits` (`scoring.limits.RowLimits`), replace the metric's default caps."""
    if s3 is not None:
        from scoring.models import configure_s3

        configure_s3(endpoint_url=s3.endpoint_url, region=s3.region)
    cls = cls or metric_class_for(spec)
    try:
        metric = cls(**params)
    except TypeError as exc:
        raise ConfigError(f"bad parameters for metric '{spec.label}': {exc}") from exc
    if row_limits is not None:
        metric.row_limits = row_limits
    return metric

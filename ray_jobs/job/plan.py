"""Stage 1 (driver): what this run has to do, from listings and Parquet footers only.

* `describe_metric`: build each metric once (validates its params, gives its signature);
* `read_shards`: list the input shards and check each footer (readable, `id`/`text` present,
  canonical column types); no rows are read here;
* `plan_metric`: per metric and shard, the committed parts that can be kept, the row ranges
  (units) still to score, the earlier parts that serve as the row cache, the parts a new
  cover will supersede, and outputs whose shard is gone or unreadable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray_jobs import incremental
from ray_jobs import io as jio
from ray_jobs.config import (
    ConfigError,
    JobConfig,
    MetricSpec,
    S3Config,
    build_metric_for,
    metric_class_for,
    metric_params,
)
from ray_jobs.job import layout
from ray_jobs.job.errors import JobError
from scoring.errors import StorageError


@dataclass
class MetricInfo:
    spec: MetricSpec
    cls: type
    params: dict[str, Any]
    signature: str
    digest: str
    read_columns: tuple[str, ...]
    output_columns: tuple[str, ...]
    described_on: dict[str, Any] = field(default_factory=dict)  # node and device, when built in a worker


@dataclass
class Shard:
    info: jio.ShardInfo
    num_rows: int
    columns: dict[str, str]
    version: str

    @property
    def rel(self) -> str:
        return self.info.rel


@dataclass
class ShardPlan:
    shard: Shard
    kept: list[tuple[layout.PartName, str, int]] = field(default_factory=list)  # (part, uri, errors)
    kept_skipped: dict[str, int] = field(default_factory=dict)  # part uri -> rows the metric does not apply to
    units: list[tuple[int, int]] = field(default_factory=list)  # row ranges to score
    previous: list[str] = field(default_factory=list)  # older parts, same signature: the row cache
    superseded: list[str] = field(default_factory=list)  # removed once the shard's new cover is complete


@dataclass
class MetricPlan:
    info: MetricInfo
    shards: dict[str, ShardPlan] = field(default_factory=dict)  # by shard rel
    outside: dict[str, list[str]] = field(default_factory=dict)  # shard stem -> files of shards not planned

    @property
    def pending_rows(self) -> int:
        return sum(stop - start for plan in self.shards.values() for start, stop in plan.units)

    @property
    def kept_rows(self) -> int:
        return sum(part.rows for plan in self.shards.values() for part, _, _ in plan.kept)


def describe_metric(config: JobConfig, spec: MetricSpec) -> MetricInfo:
    """Build the metric once before any work starts: validates its parameters and gives the
    signature that keys its outputs. Built on the driver, or, when actors ask for GPUs (a
    CPU-only head), in one Ray task with the actors' resources (Ray must be up)."""
    params = metric_params(config, spec)
    cls = metric_class_for(spec)
    _check_params(spec, params)
    if config.pool.num_gpus:
        import ray

        task = ray.remote(num_cpus=config.pool.num_cpus, num_gpus=config.pool.num_gpus, max_retries=0)(_describe)
        try:
            described = ray.get(task.remote(spec, cls, params, config.s3, True))
        except Exception as exc:  # noqa: BLE001 - the task's error names the metric
            raise _build_error(spec, params, jio.error_from_worker(exc) or exc) from exc
    else:
        try:
            described = _describe(spec, cls, params, config.s3, False)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - bad params or unloadable model: before any work
            raise _build_error(spec, params, exc) from exc
    return MetricInfo(spec=spec, cls=cls, params=params, **described)


def _build_error(spec: MetricSpec, params: dict[str, Any], exc: BaseException) -> Exception:
    """A metric that cannot be built, as one line naming it: storage that cannot be reached
    (a model bucket, say) stays a `StorageError` (exit 1); anything else is the config's fault."""
    message = f"metric {spec.label!r}: cannot build it with params {params}: {_first_line(exc)}"
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
        device = _device_of(metric)
        if device is not None:
            described_on["device"] = device
    return {
        "signature": str(signature),
        "digest": signature.digest,
        "read_columns": tuple(metric.read_columns()),
        "output_columns": tuple(metric.output_columns),
        "described_on": described_on,
    }


def _check_params(spec: MetricSpec, params: dict[str, Any]) -> None:
    """Unknown or missing constructor parameters, named before anything is loaded."""
    from scoring.registry import check_params

    try:
        check_params(spec.name, params)
    except ValueError as exc:
        raise ConfigError(f"metric {spec.label!r}: {exc}") from exc


def _device_of(metric) -> str | None:
    """The torch device a metric's model sits on, if it has one (metric.scorer.model...)."""
    for path in (("device",), ("scorer", "device"), ("scorer", "model", "device"), ("model", "device")):
        value = metric
        for name in path:
            value = getattr(value, name, None)
        if value is not None:
            return str(value)
    return None


def _first_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    text = str(cause if cause is not None else exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def read_shards(config: JobConfig, in_fs, needed: tuple[str, ...]) -> tuple[list[Shard], list[dict[str, str]]]:
    """Every input shard with its footer checked (no rows read). Returns (good, bad)."""
    infos = jio.list_shards(config.input, in_fs)
    if not infos:
        raise JobError(f"no *.parquet shards under {config.input}")
    shards, bad = [], []
    for info in infos:
        try:
            check = jio.check_shard(info, in_fs, needed, read_ids=False)
        except jio.BadShard as exc:
            bad.append({"file": exc.uri, "rel": info.rel, "error": exc.reason})
            continue
        shards.append(Shard(info, check.num_rows, check.columns, layout.input_version(info.etag, info.size)))
    return shards, bad


def plan_metric(out_fs, config: JobConfig, info: MetricInfo, shards: list[Shard]) -> MetricPlan:
    """Per shard: keep the committed parts that cover rows from 0 on; schedule the gaps as
    units aligned to multiples of `part_rows` (so a resumed run writes the same names)."""
    plan = MetricPlan(info=info)
    by_stem = {layout.shard_stem(shard.rel): shard for shard in shards}
    root = layout.metric_root(config.output, info.spec.label)
    files_by_stem: dict[str, list[str]] = {}
    for uri in jio.list_outputs(out_fs, root):
        stem = uri[len(root) + 1 :].rsplit("/", 1)[0] if "/" in uri[len(root) + 1 :] else ""
        files_by_stem.setdefault(stem, []).append(uri)
    for stem, files in files_by_stem.items():
        if stem not in by_stem:
            plan.outside[stem] = files
    for shard in shards:
        plan.shards[shard.rel] = _plan_shard(out_fs, config, info, shard, files_by_stem.get(layout.shard_stem(shard.rel), []))
    return plan


def _plan_shard(out_fs, config: JobConfig, info: MetricInfo, shard: Shard, files: list[str]) -> ShardPlan:
    plan = ShardPlan(shard=shard)
    candidates: list[tuple[layout.PartName, str, int]] = []
    for uri in files:
        part = layout.parse_part(uri.rsplit("/", 1)[-1])
        if part is None:
            continue  # not ours: left alone
        footer = jio.read_footer_metadata(out_fs, uri)
        etag, size = shard.info.etag, shard.info.size
        if part.version == shard.version and incremental.part_is_complete(footer, etag, size, info.digest, part.start, part.stop):
            candidates.append((part, uri, incremental.footer_errors(footer)))
            plan.kept_skipped[uri] = incremental.footer_skipped(footer)
            continue
        if incremental.footer_digest(footer) == info.digest:
            plan.previous.append(uri)
        if part.version != shard.version:
            plan.superseded.append(uri)  # same names are simply overwritten
    candidates.sort(key=lambda item: (item[0].start, -item[0].stop))
    total = shard.num_rows
    if total == 0:  # an empty shard still gets one (empty) part
        empty = [c for c in candidates if c[0].start == c[0].stop == 0]
        if empty:
            plan.kept.append(empty[0])
        else:
            plan.units.append((0, 0))
        plan.superseded.extend(uri for _, uri, _ in candidates if not empty or uri != empty[0][1])
        return plan
    position, index = 0, 0
    while position < total:
        while index < len(candidates) and candidates[index][0].start < position:
            plan.superseded.append(candidates[index][1])  # overlaps the cover chosen so far
            index += 1
        if index < len(candidates) and candidates[index][0].start == position and candidates[index][0].stop > position:
            plan.kept.append(candidates[index])
            position = candidates[index][0].stop
            index += 1
            continue
        if index < len(candidates) and candidates[index][0].start == position:
            plan.superseded.append(candidates[index][1])  # an empty part inside a non-empty shard
            index += 1
            continue
        gap_end = candidates[index][0].start if index < len(candidates) else total
        plan.units.extend(_aligned_units(position, gap_end, config.part_rows))
        position = gap_end
    plan.superseded.extend(uri for _, uri, _ in candidates[index:])
    return plan


def _aligned_units(start: int, stop: int, part_rows: int) -> list[tuple[int, int]]:
    bounds = [start]
    boundary = (start // part_rows + 1) * part_rows
    while boundary < stop:
        bounds.append(boundary)
        boundary += part_rows
    bounds.append(stop)
    return list(zip(bounds[:-1], bounds[1:]))

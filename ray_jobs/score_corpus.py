"""The scoring job: Parquet shards (local or `s3://`) -> Ray Data actor pools -> Parquet.

    python -m ray_jobs.score_corpus --config JOB.yaml       # or: ctgscore run JOB.yaml
    ray job submit --working-dir . -- python -m ray_jobs.score_corpus --config JOB.yaml

Per metric: `read_parquet` (column projection, `include_paths`) -> `repartition` into blocks
of `batch_size` rows so every actor gets work -> `map_batches(BatchScorer)` on an
`ActorPoolStrategy(min_size, max_size)` pool (fractional CPUs; GPUs when asked; killed actors
restarted, their batches retried) -> the driver streams the scored blocks and commits each
shard's output atomically as soon as every one of its ids is back (see `incremental.py` for
why the shard, not Ray Data's block, is the unit of commit). Then rows out == rows in is
verified from the committed files' footers, outputs of vanished shards are removed, and the
manifest is written last, atomically.

The Ray layer only moves data: scores come from `metric.score_rows(rows)` (`scoring/metric.py`),
which keeps one result per row, with `error`/`warning`, and bisects failing batches.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ray_jobs import incremental
from ray_jobs import io as jio
from ray_jobs.config import ConfigError, JobConfig, MetricSpec, build_metric_for, load_config, metric_params
from scoring.metric import carried_columns, carried_type, is_carried

VERSION = "1"
MANIFEST = "manifest.json"
PATH_COLUMN = "path"  # added by read_parquet(include_paths=True)
INTERNAL = ("_path", "_cached")
WORKER_ENV_PREFIXES = ("AWS_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "CTGSCORE_", "OMP_")
MAX_ERROR_SAMPLES = 20


class JobError(RuntimeError):
    """The job cannot finish correctly (bad shards without `skip_bad_shards`, lost rows)."""


@dataclass
class MetricInfo:
    spec: MetricSpec
    params: dict[str, Any]
    signature: str
    signature_dict: dict[str, Any]
    digest: str
    read_columns: tuple[str, ...]
    output_columns: tuple[str, ...]


def describe_metric(config: JobConfig, spec: MetricSpec) -> MetricInfo:
    """Build the metric once before any work starts: validates its parameters and gives the
    signature that keys its outputs. Built on the driver, or, when actors ask for GPUs (a
    CPU-only head), in one Ray task with the actors' resources."""
    params = metric_params(config, spec)
    if config.pool.num_gpus:
        import ray

        task = ray.remote(num_cpus=config.pool.num_cpus, num_gpus=config.pool.num_gpus, max_retries=0)(_describe)
        try:
            described = ray.get(task.remote(spec, params))
        except Exception as exc:  # noqa: BLE001 - the task's error names the metric
            raise ConfigError(f"metric {spec.label!r}: cannot build it with params {params}: {exc}") from exc
    else:
        try:
            described = _describe(spec, params)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - bad params or unloadable model: before any work
            raise ConfigError(f"metric {spec.label!r}: cannot build it with params {params}: {exc}") from exc
    return MetricInfo(spec=spec, params=params, **described)


def _describe(spec: MetricSpec, params: dict[str, Any]) -> dict[str, Any]:
    metric = build_metric_for(spec, params)
    signature = metric.signature()
    return {
        "signature": str(signature),
        "signature_dict": signature.as_dict(),
        "digest": signature.digest,
        "read_columns": tuple(metric.read_columns()),
        "output_columns": tuple(metric.output_columns),
    }


def _score_array(values: list) -> pa.Array:
    try:
        return pa.array(values, type=pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array(values)


class BatchScorer:
    """Ray Data callable class: `__init__` builds the metric once per actor; `__call__` maps
    a batch of input rows to a batch of output rows (same length, no side effects)."""

    def __init__(
        self,
        spec: MetricSpec,
        params: dict[str, Any],
        missing_by_path: dict[str, list[str]],
        carried: list[str],
        cache_ref: list | None = None,
        torch_threads: int | None = None,
        expected_signature: str | None = None,
    ):
        if torch_threads:
            import torch

            torch.set_num_threads(torch_threads)
        self.metric = build_metric_for(spec, params)
        self.signature = str(self.metric.signature())
        if expected_signature is not None and self.signature != expected_signature:
            raise RuntimeError(
                f"metric {spec.label}: signature on this worker differs from the driver's "
                f"(worker {self.signature!r}, driver {expected_signature!r}): different library or model versions"
            )
        self.output_columns = tuple(self.metric.output_columns)
        self.missing_by_path = missing_by_path
        self.carried = carried
        self.cache = incremental.RowCache(None, self.output_columns)
        if cache_ref:
            import ray

            self.cache = incremental.RowCache(ray.get(cache_ref[0]), self.output_columns)

    def __call__(self, batch: pa.Table) -> pa.Table:
        paths = batch.column(PATH_COLUMN).to_pylist()
        rows = batch.drop_columns([PATH_COLUMN]).to_pylist()
        for row, path in zip(rows, paths):
            for column in self.missing_by_path.get(path, ()):
                row.pop(column, None)  # absent from the shard: the metric reports "missing field"
        keys = [self.metric.row_key(row) for row in rows]
        results: list[dict | None] = [self.cache.get(key) for key in keys]
        cached = [result is not None for result in results]
        todo = [index for index, result in enumerate(results) if result is None]
        if todo:
            scored = self.metric.score_rows([rows[index] for index in todo])
            for index, result in zip(todo, scored):
                results[index] = result
        columns: dict[str, pa.Array] = {"id": pa.array([row["id"] for row in rows], type=pa.string())}
        for column in self.output_columns:
            columns[column] = _score_array([result.get(column) for result in results])
        columns["error"] = pa.array([result.get("error") for result in results], type=pa.string())
        columns["warning"] = pa.array([result.get("warning") for result in results], type=pa.string())
        columns["signature"] = pa.array([self.signature] * len(rows), type=pa.string())
        columns["row_key"] = pa.array(keys, type=pa.string())
        for column in self.carried:
            values = [row.get(column) for row in rows]
            columns[column] = pa.array(values, type=carried_type(column))
        columns["_path"] = pa.array(paths, type=pa.string())
        columns["_cached"] = pa.array(cached, type=pa.bool_())
        return pa.table(columns)


def _worker_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(WORKER_ENV_PREFIXES)}


def _ensure_ray(config: JobConfig) -> bool:
    """Connect to Ray (already initialised, `ray.address`, `$RAY_ADDRESS`, or a new local
    instance). Returns True when this call started it (and should shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    address = config.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True)
        return True
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    kwargs: dict[str, Any] = {"include_dashboard": False, "runtime_env": {"env_vars": _worker_env()}}
    if config.ray.num_cpus is not None:
        kwargs["num_cpus"] = config.ray.num_cpus
    if config.ray.object_store_memory is not None:
        kwargs["object_store_memory"] = config.ray.object_store_memory
    if config.ray.temp_dir is not None:
        kwargs["_temp_dir"] = config.ray.temp_dir
    ray.init(**kwargs)
    return True


class _RaySession:
    """Starts or connects to Ray on first use (a re-run with nothing to score never does) and
    shuts down only a Ray it started."""

    def __init__(self, config: JobConfig):
        self.config = config
        self.owned = False
        self.ready = False
        self.local = False  # a local Ray this job started (no cluster, no autoscaler)

    def ensure(self) -> None:
        if not self.ready:
            self.owned = _ensure_ray(self.config)
            self.local = self.owned and not (self.config.ray.address or os.environ.get("RAY_ADDRESS"))
            self.ready = True

    def close(self) -> None:
        if self.owned:
            import ray

            ray.shutdown()
            self.owned = False


class _ShardCollector:
    """Gathers scored rows per shard on the driver, drops retried duplicates (by id), and
    commits a shard's output atomically once every input id is back."""

    def __init__(self, config, info: MetricInfo, checks: list[jio.ShardCheck], out_fs, progress):
        self.config = config
        self.info = info
        self.out_fs = out_fs
        self.by_path = {jio.fs_path(check.info.uri): check for check in checks}
        self.parts: dict[str, list[pa.Table]] = {path: [] for path in self.by_path}
        self.seen: dict[str, set[str]] = {path: set() for path in self.by_path}
        self.committed: set[str] = set()
        self.duplicates = 0
        self.rows = 0
        self.cached = 0
        self.errors = 0
        self.error_reasons: Counter = Counter()
        self.error_samples: list[dict[str, Any]] = []
        self.progress = progress

    def add(self, batch: pa.Table) -> None:
        for path in pc.unique(batch.column("_path")).to_pylist():
            if path not in self.by_path:
                raise JobError(f"metric {self.info.spec.label}: scored rows for unknown shard {path}")
            part = batch.filter(pc.equal(batch.column("_path"), path))
            seen = self.seen[path]
            ids = part.column("id").to_pylist()
            keep = []
            for index, value in enumerate(ids):
                if value in seen:
                    self.duplicates += 1  # a retried batch: its rows are already here
                else:
                    seen.add(value)
                    keep.append(index)
            if len(keep) < len(ids):
                part = part.take(pa.array(keep, type=pa.int64()))
            if part.num_rows:
                self.parts[path].append(part)
                if self.progress is not None:
                    self.progress.update(part.num_rows)
            check = self.by_path[path]
            if len(seen) == check.num_rows and path not in self.committed:
                self._commit(path, check)

    def commit_empty(self, check: jio.ShardCheck, carried: list[str]) -> None:
        fields = [("id", pa.string())] + [(c, pa.float64()) for c in self.info.output_columns]
        fields += [(c, pa.string()) for c in ("error", "warning", "signature", "row_key")]
        fields += [(c, carried_type(c)) for c in carried]
        fields += [("_path", pa.string()), ("_cached", pa.bool_())]
        path = jio.fs_path(check.info.uri)
        self.parts[path].append(pa.schema(fields).empty_table())
        self._commit(path, check)

    def _commit(self, path: str, check: jio.ShardCheck) -> None:
        table = pa.concat_tables(self.parts.pop(path), promote_options="permissive")
        if set(table.column("id").to_pylist()) != set(check.ids):
            raise JobError(f"metric {self.info.spec.label}: {check.info.uri}: scored ids differ from the input ids")
        order = pc.index_in(pa.array(check.ids, type=pa.string()), value_set=table.column("id"))
        table = table.take(order)  # input row order
        self.cached += pc.sum(table.column("_cached")).as_py() or 0
        drop = [c for c in INTERNAL if c in table.column_names]
        drop += [c for c in table.column_names if is_carried(c) and c not in check.columns]
        table = table.drop_columns(drop)
        errors = table.column("error").to_pylist()
        for row, reason in enumerate(errors):
            if reason is None:
                continue
            self.errors += 1
            self.error_reasons[reason if len(reason) < 80 else reason[:77] + "..."] += 1
            if len(self.error_samples) < MAX_ERROR_SAMPLES:
                self.error_samples.append({"file": check.info.uri, "row": row, "id": check.ids[row], "error": reason})
        uri = incremental.output_uri(self.config.output, self.info.spec.label, check.info.rel)
        metadata = incremental.shard_metadata(check.info, self.info.signature, self.info.digest, table.num_rows)
        jio.put_atomic(self.out_fs, uri, jio.table_bytes(table, metadata))
        self.rows += table.num_rows
        self.committed.add(path)


def _map_scorer(ds, config: JobConfig, info: MetricInfo, missing_by_path, carried, cache_ref):
    """`map_batches` over the scorer class on an autoscaling actor pool."""
    from ray.data import ActorPoolStrategy

    pool = config.pool
    return ds.map_batches(
        BatchScorer,
        fn_constructor_kwargs={
            "spec": info.spec,
            "params": info.params,
            "missing_by_path": missing_by_path,
            "carried": carried,
            "cache_ref": cache_ref,
            "torch_threads": pool.torch_threads,
            "expected_signature": info.signature,
        },
        batch_size=config.batch_size,
        batch_format="pyarrow",
        compute=ActorPoolStrategy(min_size=pool.min_size, max_size=pool.max_size),
        num_cpus=pool.num_cpus,
        num_gpus=pool.num_gpus or None,
        max_restarts=pool.max_restarts,
        max_task_retries=pool.max_task_retries,
        runtime_env={"env_vars": _worker_env()},
    )


def _score_pending(config: JobConfig, info: MetricInfo, plan: incremental.MetricPlan, in_fs, out_fs) -> dict[str, Any]:
    """Run the Ray Data pipeline for one metric's pending shards; returns run statistics."""
    import ray
    import ray.data
    from ray.data import DataContext

    from tqdm import tqdm

    context = DataContext.get_current()
    context.enable_progress_bars = config.progress
    union = set().union(*(check.columns for check in plan.pending))
    read = ["id"] + [c for c in info.read_columns if c in union and c != "id"]
    carried = [c for c in carried_columns(union) if c != "id"]
    columns = list(dict.fromkeys(read + carried))
    missing_by_path = {}
    for check in plan.pending:
        absent = [c for c in info.read_columns if c not in check.columns]
        if absent:
            missing_by_path[jio.fs_path(check.info.uri)] = absent
    cache_table = incremental.load_row_cache(out_fs, plan.previous, info.output_columns)
    cache_ref = [ray.put(cache_table)] if cache_table is not None and cache_table.num_rows else None

    total = sum(check.num_rows for check in plan.pending)
    progress = tqdm(total=total, desc=f"score {info.spec.label}", unit="row", disable=not config.progress, file=sys.stderr)
    collector = _ShardCollector(config, info, plan.pending, out_fs, progress)
    for check in plan.pending:
        if check.num_rows == 0:  # nothing to read: commit an empty output with the full schema
            collector.commit_empty(check, carried)
    work = [check for check in plan.pending if check.num_rows]
    started = time.perf_counter()
    first_at = None
    rows_after_first = 0
    if work:
        first_at, rows_after_first = _stream(config, info, work, columns, missing_by_path, carried, cache_ref, collector)
    ended = time.perf_counter()
    progress.close()
    missing = [
        f"{check.info.uri}: {len(collector.seen[jio.fs_path(check.info.uri)])} of {check.num_rows} rows came back"
        for check in plan.pending
        if jio.fs_path(check.info.uri) not in collector.committed
    ]
    if missing:
        raise JobError(f"metric {info.spec.label}: rows lost, no output committed for: " + "; ".join(missing))
    wall = ended - started
    steady_time = (ended - first_at) if first_at is not None else 0.0
    return {
        "rows_scored_or_cached": collector.rows,
        "rows_cached": collector.cached,
        "rows_error": collector.errors,
        "duplicates_dropped": collector.duplicates,
        "error_reasons": dict(collector.error_reasons.most_common(20)),
        "error_samples": collector.error_samples,
        "pipeline_wall_s": round(wall, 3),
        "steady_rows_per_s": round(rows_after_first / steady_time, 2) if steady_time > 0 else None,
    }


def _stream(config, info, work, columns, missing_by_path, carried, cache_ref, collector) -> tuple[float | None, int]:
    """read_parquet -> repartition -> map_batches(BatchScorer); the driver consumes the scored
    blocks as they come and hands them to the collector. Returns (time of the first block,
    rows after it) for the steady-state rate."""
    import ray.data

    ds = ray.data.read_parquet(
        [jio.fs_path(check.info.uri) for check in work],
        filesystem=jio.arrow_filesystem(config.input, config.s3),
        include_paths=True,
    ).select_columns(columns + [PATH_COLUMN])  # projection, pushed down into the Parquet reader
    ds = ds.repartition(target_num_rows_per_block=config.batch_size)
    with warnings.catch_warnings():
        # max_restarts/max_task_retries have no named parameter; Ray Data documents passing
        # them as extra kwargs, which warns about `ray_remote_args`
        warnings.simplefilter("ignore")
        ds = _map_scorer(ds, config, info, missing_by_path, carried, cache_ref)
    first_at = None
    rows_after_first = 0
    for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        if first_at is None:
            first_at = time.perf_counter()
        else:
            rows_after_first += batch.num_rows
        collector.add(batch)
    return first_at, rows_after_first


def _check_pool_fits(config: JobConfig, session: "_RaySession") -> None:
    """On a local Ray (fixed size, no autoscaler), a pool whose actors take every CPU starves
    Ray Data's 1-CPU list/read tasks and hangs without an error (measured on 2 cores): refuse
    it with a clear message instead."""
    if not session.local:
        return
    import ray

    cpus = ray.cluster_resources().get("CPU", 0)
    needed = config.pool.max_size * config.pool.num_cpus
    if cpus and needed > cpus - 1:
        raise ConfigError(
            f"pool.max_size x pool.num_cpus = {needed:g} CPUs leaves less than one of this local Ray's "
            f"{cpus:g} CPUs for reading; Ray Data would hang. Use fractional num_cpus (e.g. 0.5) or a smaller pool"
        )


def _verify_outputs(config: JobConfig, info: MetricInfo, checks: list[jio.ShardCheck], out_fs) -> tuple[int, list[dict]]:
    """Rows out == rows in, per shard and in total, read back from the committed footers."""
    rows_out = 0
    outputs = []
    for check in checks:
        uri = incremental.output_uri(config.output, info.spec.label, check.info.rel)
        footer = jio.read_footer_metadata(out_fs, uri)
        if footer is None:
            raise JobError(f"metric {info.spec.label}: output {uri} for {check.info.uri} is missing or unreadable")
        if not incremental.is_complete(footer, check.info, info.digest, check.num_rows):
            raise JobError(
                f"metric {info.spec.label}: output {uri} has {footer[0]} rows for {check.num_rows} input rows "
                f"of {check.info.uri} (or was made from another input/signature)"
            )
        rows_out += footer[0]
        outputs.append({"file": uri, "input": check.info.uri, "rows": footer[0]})
    return rows_out, outputs


def run_job(config: JobConfig) -> dict[str, Any]:
    """Run a validated job; returns the manifest (also written to `OUT/manifest.json`)."""
    started_at = dt.datetime.now(dt.timezone.utc)
    t0 = time.perf_counter()
    session = _RaySession(config)
    try:
        return _run(config, session, started_at, t0)
    finally:
        session.close()


def _run(config: JobConfig, session: "_RaySession", started_at, t0) -> dict[str, Any]:
    from tqdm import tqdm

    from scoring.signature import Signature, library_versions

    if config.pool.num_gpus:
        session.ensure()  # the metric is described on a GPU worker
        if session.local:
            import ray

            gpus = ray.cluster_resources().get("GPU", 0)
            if gpus < config.pool.num_gpus:  # a local Ray has no autoscaler: it would wait forever
                raise ConfigError(f"'pool.num_gpus' is {config.pool.num_gpus} but this local Ray has {gpus:g} GPU(s)")
    infos = [describe_metric(config, spec) for spec in config.metrics]
    in_fs = jio.fsspec_filesystem(config.input, config.s3)
    out_fs = jio.fsspec_filesystem(config.output, config.s3)
    manifest_uri = jio.join(config.output, MANIFEST)

    shards = jio.list_shards(config.input, in_fs)
    if not shards:
        raise JobError(f"no *.parquet shards under {config.input}")
    needed = tuple(dict.fromkeys(c for info in infos for c in info.read_columns))
    checks, bad = [], []
    for shard in tqdm(shards, desc="check shards", unit="shard", disable=not config.progress, file=sys.stderr):
        try:
            checks.append(jio.check_shard(shard, in_fs, needed))
        except jio.BadShard as exc:
            bad.append({"file": exc.uri, "error": exc.reason})
    if bad and not config.skip_bad_shards:
        lines = "\n".join(f"  {item['file']}: {item['error']}" for item in bad)
        raise JobError(f"{len(bad)} bad input shard(s) (set skip_bad_shards: true to skip them and record them in the manifest):\n{lines}")
    if not checks:
        raise JobError(f"every shard under {config.input} is bad")
    schema_notes = [
        f"{check.info.uri} lacks column '{column}' read by metric {info.spec.label} (its rows get an error)"
        for info in infos
        for check in checks
        for column in info.read_columns
        if column not in check.columns and column != "id"
    ]

    rows_in = sum(check.num_rows for check in checks)
    if out_fs.exists(jio.fs_path(manifest_uri)):
        jio.remove(out_fs, manifest_uri)  # no manifest while outputs may change
    metrics_report: dict[str, Any] = {}
    plans = [incremental.plan_metric(out_fs, config.output, info.spec.label, info.digest, checks) for info in infos]
    for info, plan in zip(infos, plans):
        metric_start = time.perf_counter()
        stats: dict[str, Any] = {"rows_cached": 0, "rows_error": 0, "duplicates_dropped": 0}
        if plan.pending:
            session.ensure()
            _check_pool_fits(config, session)
            stats = _score_pending(config, info, plan, in_fs, out_fs)
        rows_out, outputs = _verify_outputs(config, info, checks, out_fs)
        if rows_out != rows_in:
            raise JobError(f"metric {info.spec.label}: {rows_out} rows out != {rows_in} rows in")
        for uri in plan.stale:
            jio.remove(out_fs, uri)
        rows_reused = sum(check.num_rows for check in plan.reused)
        pending_rows = sum(check.num_rows for check in plan.pending)
        wall = time.perf_counter() - metric_start
        scored = pending_rows - stats["rows_cached"]
        metrics_report[info.spec.label] = {
            "metric": info.spec.name,
            "params": info.params,
            "signature": info.signature,
            "signature_digest": info.digest,
            "rows_in": rows_in,
            "rows_out": rows_out,
            "rows_scored": scored,
            "rows_cached": rows_reused + stats["rows_cached"],
            "rows_error": _count_errors(out_fs, outputs, stats, plan),
            "duplicates_dropped": stats["duplicates_dropped"],
            "shards_reused": len(plan.reused),
            "shards_scored": len(plan.pending),
            "stale_outputs_removed": plan.stale,
            "error_reasons": stats.get("error_reasons", {}),
            "error_samples": stats.get("error_samples", []),
            "wall_s": round(wall, 3),
            "rows_per_s": round(scored / wall, 2) if wall > 0 and scored else 0.0,
            "steady_rows_per_s": stats.get("steady_rows_per_s"),
            "outputs": outputs,
        }

    wall = time.perf_counter() - t0
    job_signature = Signature(
        "ctgscore.ray_job",
        VERSION,
        {
            "metrics": {info.spec.label: info.signature for info in infos},
            "batch_size": config.batch_size,
            "libraries": library_versions("ray", "pyarrow", "torch", "transformers"),
        },
    )
    manifest = {
        "signature": str(job_signature),
        "signature_digest": job_signature.digest,
        "config": config.as_dict(),
        "started_at": started_at.isoformat(),
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "wall_s": round(wall, 3),
        "rows_per_s": round(rows_in * len(infos) / wall, 2) if wall > 0 else None,
        "input": {
            "prefix": config.input,
            "files": [
                {"file": c.info.uri, "size": c.info.size, "etag": c.info.etag, "rows": c.num_rows} for c in checks
            ],
            "rows": rows_in,
        },
        "bad_shards": bad,
        "schema_notes": schema_notes,
        "metrics": metrics_report,
    }
    jio.put_json_atomic(out_fs, manifest_uri, manifest)  # last: its presence means a complete run
    manifest["manifest"] = manifest_uri
    return manifest


def _count_errors(out_fs, outputs: list[dict], stats: dict, plan) -> int:
    """Errors over all outputs: counted while committing for scored shards, read back (error
    column only) for reused ones."""
    total = stats.get("rows_error", 0)
    pending_rels = {check.info.rel for check in plan.pending}
    for output in outputs:
        if any(output["file"].endswith("/" + rel) for rel in pending_rels):
            continue
        table = jio.read_table(out_fs, output["file"], columns=["error"])
        total += table.num_rows - table.column("error").null_count
    return total


def summary_line(manifest: dict[str, Any]) -> str:
    parts = []
    for label, report in manifest["metrics"].items():
        parts.append(
            f"{label}: {report['rows_in']} in -> {report['rows_out']} out, {report['rows_scored']} scored, "
            f"{report['rows_cached']} reused, {report['rows_error']} errors"
        )
    bad = f", {len(manifest['bad_shards'])} bad shard(s) skipped" if manifest["bad_shards"] else ""
    return (
        f"ctgscore run: {len(manifest['input']['files'])} shards{bad}; " + "; ".join(parts)
        + f"; {manifest['wall_s']:.1f} s; manifest {manifest.get('manifest')}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ray_jobs.score_corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="job YAML (see examples/)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    return run_from_path(args.config, progress=not args.no_progress)


def run_from_path(path: str, progress: bool = True) -> int:
    try:
        config = load_config(path)
        if not progress:
            from dataclasses import replace

            config = replace(config, progress=False)
        manifest = run_job(config)
    except (ConfigError, JobError, jio.BadShard, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    print(summary_line(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The score stage as a pipeline declared as data (`docs/job.md`, "Stages"):

    read (task)  ->  per metric: [prepare (CPU task, two-stage metrics)]  ->  score + write (its actor pool)

`declare_stages` lists the steps (`Step`: the function or class, its arguments and its
resources); `build` applies them to a Ray Data dataset of units in order; `run_units` runs
the dataset and collects the small per-part reports. Each step's module does one job:
`read.read_unit`, `prepare.prepare_unit`, `scorer.PartScorer` (which writes with
`write.write_part`)."""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from ray_jobs.job import cluster
from ray_jobs.job.prepare import prepare_unit
from ray_jobs.job.read import READ_ERROR, REPORTS, read_unit
from ray_jobs.job.scorer import PartScorer
from ray_jobs.job.units import UNIT, build_units, unit_of


@dataclass(frozen=True)
class Step:
    """One `map_batches` of the pipeline: one unit per call."""

    name: str
    fn: Callable | type
    kwargs: dict[str, Any]  # fn_kwargs of a task, fn_constructor_kwargs of an actor class
    num_cpus: float
    num_gpus: float | None = None
    pool: Any = None  # the metric's PoolConfig, for an actor step
    options: dict[str, Any] = field(default_factory=dict)  # further Ray remote args


def declare_stages(job, metrics: list, carried: list[str]) -> list[Step]:
    """The steps for `metrics` (resolved, in the job's order): one read, then per metric its
    CPU step (when it has one) and its actor pool, which scores and writes."""
    task_cpus = min(1.0, job.pool.num_cpus or 0.5)
    steps = [Step("read", read_unit, {"input_root": job.input, "s3": job.s3}, task_cpus)]
    for position, metric in enumerate(metrics):
        if metric.two_stage:
            steps.append(Step(f"prepare {metric.label}", prepare_unit,
                              {"metric": metric, "output": job.output, "s3": job.s3, "carried": carried}, task_cpus))
        steps.append(Step(
            f"score {metric.label}", PartScorer,
            {"metric": metric, "output": job.output, "s3": job.s3, "carried": carried, "batch_size": job.batch_size,
             "last": position == len(metrics) - 1},
            metric.pool.num_cpus, metric.pool.num_gpus or None, metric.pool,
            {"max_restarts": metric.pool.max_restarts, "max_task_retries": metric.pool.max_task_retries},
        ))
    return steps


def actor_pool(pool) -> Any:
    """The actor pool of one metric. A GPU pool runs two calls per actor in threads (the
    writer beside the GPU work: one unit's decode, part building, compression and PUT overlap
    the other's forwards; `PartScorer.device_lock` keeps the device to one of them); a CPU
    pool one call per actor, as its CPUs are all busy scoring."""
    from ray.data import ActorPoolStrategy

    if not pool.num_gpus:
        return ActorPoolStrategy(min_size=pool.min_size, max_size=pool.max_size)
    return ActorPoolStrategy(min_size=pool.min_size, max_size=pool.max_size, max_tasks_in_flight_per_actor=4,
                             max_concurrent_calls_per_actor=2, enable_true_multi_threading=True)


def build(ds, steps: list[Step]):
    """`ds` with every step applied, in order, one unit per batch."""
    for step in steps:
        if step.pool is None:
            ds = ds.map_batches(step.fn, batch_size=1, batch_format="pyarrow", fn_kwargs=step.kwargs, num_cpus=step.num_cpus)
            continue
        with warnings.catch_warnings():
            # max_restarts/max_task_retries have no named parameter; Ray Data documents passing
            # them as extra kwargs, which warns about `ray_remote_args`
            warnings.simplefilter("ignore")
            ds = ds.map_batches(step.fn, fn_constructor_kwargs=step.kwargs, batch_size=1, batch_format="pyarrow",
                                compute=actor_pool(step.pool), num_cpus=step.num_cpus, num_gpus=step.num_gpus,
                                **step.options)
    return ds


class Progress:
    """One tqdm bar per metric on stderr, owned by ctgscore (nothing when disabled)."""

    def __init__(self, totals: dict[str, int], enabled: bool):
        self.bars = {}
        if enabled:
            from tqdm import tqdm

            for position, (label, total) in enumerate(totals.items()):
                self.bars[label] = tqdm(
                    total=total, desc=f"score {label}", unit="row", file=sys.stderr, position=position, leave=True,
                    dynamic_ncols=True,
                )

    def update(self, label: str, rows: int) -> None:
        bar = self.bars.get(label)
        if bar is not None:
            bar.update(rows)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def run_units(job, plans: list, carried: list[str]) -> dict[str, Any]:
    """Run the pipeline over every unit some metric needs. Returns per-label reports, the
    shards that failed while scoring ({uri: reason}), and timing for the steady-state rate."""
    import json

    import ray.data

    from scoring.schema import carried_columns

    active = [plan for plan in plans if any(p.units for p in plan.shards.values())]  # an empty shard: one (0, 0) unit
    units = build_units(active, carried_columns)
    result: dict[str, Any] = {"reports": {plan.metric.label: [] for plan in active}, "bad": {}, "first_at": None,
                              "rows_after_first": 0, "started": time.perf_counter(), "ended": None}
    if not units:
        result["ended"] = time.perf_counter()
        return result
    metrics = [plan.metric for plan in active]
    ds = build(ray.data.from_items(units, override_num_blocks=len(units)), declare_stages(job, metrics, carried))
    progress = Progress({plan.metric.label: plan.pending_rows for plan in active}, job.progress)
    requested = cluster.request_gpu_pools([metric.pool for metric in metrics])
    try:
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            now = time.perf_counter()
            for text, read_error, reports in zip(
                batch.column(UNIT).to_pylist(), batch.column(READ_ERROR).to_pylist(), batch.column(REPORTS).to_pylist()
            ):
                if read_error is not None:
                    result["bad"].setdefault(unit_of(text)["uri"], read_error)
                    continue
                for report in json.loads(reports):
                    if "failed" in report:
                        result["bad"].setdefault(report["uri"], report["failed"])
                        continue
                    result["reports"][report["label"]].append(report)
                    progress.update(report["label"], report["rows"])
                    if result["first_at"] is None:
                        result["first_at"] = now
                    else:
                        result["rows_after_first"] += report["rows"]
    except Exception as exc:  # noqa: BLE001 - one line naming the cause, never a Ray traceback
        raise cluster.worker_failure(exc) from exc
    finally:
        progress.close()
        if requested:
            cluster.release_requests()
    result["ended"] = time.perf_counter()
    return result

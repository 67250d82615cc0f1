"""Stage 3 (workers): read each unit once, score it with every metric that needs it, write
each metric's part where it was scored.

A *unit* is one row range `[start, stop)` of one input shard (at most `part_rows` rows). The
Ray Data pipeline is

    from_items(units) -> map_batches(read_unit)                       one unit per batch
                      -> [map_batches(prepare_unit, metric 1)]         CPU tasks, model metrics
                      -> map_batches(PartScorer, metric 1 pool) -> ... -> (metric k)

`read_unit` reads the unit's rows (only the row groups it overlaps, only the columns some
metric reads or carries) and hands them on as one Arrow IPC payload, so a unit is never
split or merged on the way. The rows are then settled (`settle_rows`): decoded
(`scoring.schema.rows_from_table`: an undecodable value is that row's error), keyed, looked
up in the row cache of the unit's shard (its earlier parts), and validated. For a metric with
the two-stage protocol (`RowMetric.prepare`: BARTScore, CTRLEval, perplexity) that happens in
`prepare_unit`, a stateless CPU task that also tokenises the rows left to score into `int32`
id columns and hands them on as a second IPC payload (`prepared_column`); its `PartScorer`
actor then only turns ids into scores (`score_prepared`) and writes the part. For the others
the actor settles the rows itself and scores them with `RowMetric.score_rows`. Either way rows
are scored in chunks of `batch_size` (one result per row, failing chunks bisected) and the part
is written atomically (`io.put_atomic`). What reaches the
driver is one small JSON report per unit and metric (rows, scored, reused, errors, skipped rows,
a few error examples), never rows. A unit whose file cannot be read is reported as such (its shard then
counts as bad); a part that cannot be written fails the job (storage errors are not a
property of the shard).

Each metric has its own pool (`metrics[].pool` over the job's `pool`). A GPU pool runs two
units per actor in threads, one on the device at a time (`actor_pool`), scores a whole unit
per call, and is requested from the autoscaler up front (`request_gpu_pools`). An accelerator
error ends the actor (`end_actor`): Ray restarts it and retries the unit.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import threading
import time
import warnings
from collections import Counter, OrderedDict
from typing import Any

import pyarrow as pa

from ray_jobs.config import JobConfig, S3Config, metric_pool
from ray_jobs.job import device_guard, layout
from ray_jobs.job.errors import JobError
from ray_jobs.job.plan import MetricInfo, MetricPlan, device_of
from scoring.errors import CtgscoreError, is_accelerator_error

PAYLOAD = "_payload"
REPORTS = "_reports"
UNIT = "_unit"
READ_ERROR = "_read_error"
MAX_SAMPLES_PER_PART = 5
CACHED_SHARDS_PER_ACTOR = 2


def build_units(config: JobConfig, plans: list[MetricPlan], read_columns: dict[str, tuple[str, ...]]) -> list[dict[str, Any]]:
    """One unit per distinct (shard, start, stop) to score, listing the metrics that need it
    and, per metric, the shard's earlier parts (its row cache)."""
    units: dict[tuple[str, int, int], dict[str, Any]] = {}
    for plan in plans:
        label = plan.info.spec.label
        for rel, shard_plan in plan.shards.items():
            shard = shard_plan.shard
            for start, stop in shard_plan.units:
                key = (rel, start, stop)
                unit = units.get(key)
                if unit is None:
                    unit = units[key] = {
                        "uri": shard.info.uri,
                        "rel": rel,
                        "etag": shard.info.etag,
                        "size": shard.info.size,
                        "version": shard.version,
                        "start": start,
                        "stop": stop,
                        "columns": [],
                        "labels": [],
                        "previous": {},
                    }
                unit["labels"].append(label)
                unit["previous"][label] = shard_plan.previous
                wanted = [c for c in read_columns[label] if c in shard.columns]
                unit["columns"] = list(dict.fromkeys(unit["columns"] + wanted))
    from scoring.schema import carried_columns

    for unit in units.values():
        shard_columns = next(p.shards[unit["rel"]].shard.columns for p in plans if unit["rel"] in p.shards)
        carried = carried_columns(shard_columns)
        unit["columns"] = list(dict.fromkeys(["id", *unit["columns"], *carried]))
    return [{UNIT: json.dumps(unit)} for unit in units.values()]


def read_unit(batch: pa.Table, input_root: str, s3: S3Config) -> pa.Table:
    """Ray Data task: the rows of each unit in `batch`, as one IPC payload per unit."""
    import pyarrow.parquet as pq

    from ray_jobs.storage import clients, failures, uris

    payloads, errors = [], []
    for text in batch.column(UNIT).to_pylist():
        unit = json.loads(text)
        try:
            fs = clients.arrow_filesystem(input_root, s3)
            with fs.open_input_file(uris.fs_path(unit["uri"])) as handle:
                parquet = pq.ParquetFile(handle)
                table = _read_range(parquet, unit["start"], unit["stop"], unit["columns"])
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            payloads.append(sink.getvalue().to_pybytes())
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - the shard is then handled as a bad shard
            payloads.append(b"")
            errors.append(f"{failures.read_failure(exc, unit['uri'])} (while scoring)")
    return pa.table(
        {
            UNIT: batch.column(UNIT),
            PAYLOAD: pa.array(payloads, type=pa.binary()),
            READ_ERROR: pa.array(errors, type=pa.string()),
            REPORTS: pa.array(["[]"] * len(payloads), type=pa.string()),
        }
    )


def _read_range(parquet, start: int, stop: int, columns: list[str]) -> pa.Table:
    """Rows [start, stop) of a Parquet file, reading only the row groups they overlap."""
    present = [c for c in columns if c in parquet.schema_arrow.names]
    groups, first_row, offset = [], None, 0
    for index in range(parquet.metadata.num_row_groups):
        rows = parquet.metadata.row_group(index).num_rows
        if offset + rows > start and offset < stop:
            groups.append(index)
            if first_row is None:
                first_row = offset
        offset += rows
    if not groups:
        return parquet.schema_arrow.empty_table().select(present)
    table = parquet.read_row_groups(groups, columns=present)
    return table.slice(start - first_row, stop - start)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def settle_rows(metric, table: pa.Table, read_columns, carried, cache) -> tuple[list[dict], list[str], list, list[int], int]:
    """Decode a unit's rows and settle every row that needs no scoring: skipped, undecodable,
    reused from the row cache (`cache`, or None), or invalid (`RowMetric.validate`, as
    `score_rows` applies it). Returns the rows, their keys, the results so far (None where
    still to score), the rows left to score and how many came from the cache."""
    from scoring.schema import rows_from_table

    wanted = [c for c in table.column_names if c == "id" or c in read_columns or c in carried]
    rows, decode_errors = rows_from_table(table.select(wanted))
    keys = [metric.row_key(row) for row in rows]
    results: list[dict[str, Any] | None] = [None] * len(rows)
    todo, cached = [], 0
    for index, key in enumerate(keys):
        settled = metric.precheck(rows[index], decode_errors[index])  # skipped, or undecodable
        if settled is not None:
            results[index] = settled
            continue
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            results[index] = hit
            cached += 1
        else:
            todo.append(index)
    return rows, keys, results, todo, cached


class PreparationFailed(Exception):
    """`prepare_unit` failed outside any row; the message is its cause."""


def prepared_column(label: str) -> str:
    return f"_prepared:{label}"


_PREPARERS: dict[str, Any] = {}


def _preparer(info: MetricInfo, s3: S3Config):
    """The metric built without its model weights (tokenizer and configuration only), once
    per worker process; row keys use the driver's signature."""
    metric = _PREPARERS.get(info.digest)
    if metric is None:
        from ray_jobs.config import build_metric_for
        from scoring.models import without_weights

        with without_weights():
            metric = build_metric_for(info.spec, info.params, info.cls, s3)
        metric.pin_signature(info.signature)
        _PREPARERS.clear()  # one metric per process at a time: tokenizers can be large
        _PREPARERS[info.digest] = metric
    return metric


class RowCaches:
    """Row caches of the shards seen last (each shard's earlier parts of one metric), the
    least recently used dropped beyond CACHED_SHARDS_PER_ACTOR: units of one shard mostly
    arrive together."""

    def __init__(self) -> None:
        self.loaded: OrderedDict = OrderedDict()

    def get(self, fs, label: str, output_columns, unit: dict[str, Any]):
        """The row cache of the unit's shard for `label`, or None when it has no earlier parts."""
        from ray_jobs import incremental

        previous = unit["previous"].get(label) or []
        if not previous:
            return None
        key = (label, unit["rel"], tuple(previous))
        if key in self.loaded:
            self.loaded.move_to_end(key)
            return self.loaded[key]
        cache = incremental.load_row_cache(fs, previous, tuple(output_columns))
        self.loaded[key] = cache
        while len(self.loaded) > CACHED_SHARDS_PER_ACTOR:
            self.loaded.popitem(last=False)
        return cache


_ROW_CACHES = RowCaches()  # of this worker process, for `prepare_unit`


def prepare_unit(batch: pa.Table, info: MetricInfo, output: str, s3: S3Config, carried: list[str]) -> pa.Table:
    """Ray Data task (the CPU stage of a model metric): settle each unit's rows
    (`settle_rows`) and tokenise those left to score (`RowMetric.prepare_rows`) into the id
    columns of an IPC payload (`prepared_payload`), added as `prepared_column(label)`."""
    from ray_jobs.storage import clients

    metric = _preparer(info, s3)
    label = info.spec.label
    read_errors = batch.column(READ_ERROR).to_pylist()
    payloads = batch.column(PAYLOAD)
    prepared = []
    for index, text in enumerate(batch.column(UNIT).to_pylist()):
        unit = json.loads(text)
        if label not in unit["labels"] or read_errors[index] is not None:
            prepared.append(None)
            continue
        try:
            table = pa.ipc.open_stream(io.BytesIO(payloads[index].as_py())).read_all()
            cache = _ROW_CACHES.get(clients.fsspec_filesystem(output, s3), label, info.output_columns, unit)
            ids, meta = prepare_table(metric, table, set(info.read_columns), carried, cache)
        except (CtgscoreError, OSError):
            raise  # storage: retried by Ray, then fails the job with its message
        except Exception as exc:  # noqa: BLE001 - outside any row: the shard counts as bad
            ids, meta = pa.table({}), {"failed": f"{type(exc).__name__}: {_one_line(exc)}"}
        prepared.append(prepared_payload(ids, meta))
    return batch.append_column(prepared_column(label), pa.array(prepared, type=pa.binary()))


def prepare_table(metric, table: pa.Table, read_columns, carried, cache) -> tuple[pa.Table, dict[str, Any]]:
    """The CPU stage's work on one unit's rows: settle them (`settle_rows`, then `validate`
    as `score_rows` applies it) and prepare the rest (`RowMetric.prepare_rows`). Returns the
    id columns and what the scoring actor needs besides them: every row's key, the settled
    results, and per prepared row its unit row and its position among the rows left to score
    (the `batch_size` chunks)."""
    rows, keys, results, todo, cached = settle_rows(metric, table, read_columns, carried, cache)
    valid, positions = [], []
    for position, row_index in enumerate(todo):
        skip = metric.skip_reason(rows[row_index])
        reason = metric.validate(rows[row_index]) if skip is None else None
        if skip is not None:
            results[row_index] = metric.skipped_result(skip)
        elif reason is not None:
            results[row_index] = metric.empty_result(reason)
        else:
            valid.append(row_index)
            positions.append(position)
    ids, reasons = metric.prepare_rows([rows[i] for i in valid])
    kept = []
    for row_index, position, reason in zip(valid, positions, reasons):
        if reason is None:
            kept.append((row_index, position))
        else:
            results[row_index] = metric.empty_result(reason)
    meta = {"keys": keys, "cached": cached, "rows": [r for r, _ in kept], "positions": [p for _, p in kept],
            "settled": {str(i): result for i, result in enumerate(results) if result is not None}}
    return ids, meta


def prepared_payload(ids: pa.Table, meta: dict[str, Any]) -> bytes:
    """The id columns of the rows to score, with the unit's row keys and settled results in
    the schema metadata, as one Arrow IPC stream."""
    ids = ids.replace_schema_metadata({b"ctgscore": json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ids.schema) as writer:
        writer.write_table(ids)
    return sink.getvalue().to_pybytes()


def read_prepared(payload: bytes) -> tuple[pa.Table, dict[str, Any]]:
    ids = pa.ipc.open_stream(io.BytesIO(payload)).read_all()
    return ids, json.loads(ids.schema.metadata[b"ctgscore"])


ACCELERATOR_EXIT = 70


def end_actor(label: str, unit: dict[str, Any], exc: BaseException) -> None:
    """After an accelerator error every later CUDA call of this process fails: nothing of
    the unit is written, the process exits, Ray restarts the actor (`pool.max_restarts`) and
    retries the unit on it (`pool.max_task_retries`). Never a committed row error."""
    print(f"ctgscore: metric {label}: accelerator error while scoring {unit['rel']} rows {unit['start']}-{unit['stop']} "
          f"({type(exc).__name__}: {_one_line(exc)}); ending this actor so Ray restarts it and retries the unit",
          file=sys.stderr, flush=True)
    os._exit(ACCELERATOR_EXIT)


class PartScorer:
    """Ray Data callable class for one metric: scores the units that need it and writes its
    parts; passes every unit on (without the payload after the last metric)."""

    def __init__(
        self,
        info: MetricInfo,
        output: str,
        s3: S3Config,
        carried: list[str],
        batch_size: int,
        torch_threads: int | None,
        last: bool,
        prepared: bool = False,
        num_gpus: float = 0,  # issue 29: the pool's GPUs (device_guard.require_cuda)
        unit_timeout_s: float | None = None,  # issue 29: device_guard.Watchdog
    ):
        if torch_threads:
            import torch

            torch.set_num_threads(torch_threads)
        from ray_jobs.config import build_metric_for
        from ray_jobs.storage import clients

        self.metric = build_metric_for(info.spec, info.params, info.cls, s3)
        self.signature = str(self.metric.signature())
        if self.signature != info.signature:
            raise CtgscoreError(
                f"metric {info.spec.label}: signature on this worker differs from the driver's "
                f"(worker {self.signature!r}, driver {info.signature!r}): different library or model versions"
            )
        self.label = info.spec.label
        device_guard.require_cuda(device_of(self.metric), num_gpus)  # issue 29: a GPU pool never scores on the CPU
        self.watchdog = device_guard.Watchdog(unit_timeout_s, self.label)  # issue 29: a hung call ends the actor
        self.digest = info.digest
        self.read_columns = set(info.read_columns)
        self.output_columns = tuple(info.output_columns)
        self.output = output
        self.carried = [c for c in carried if c != "id"]
        # on CUDA one scoring call takes the whole unit, so the engine's length sorting, token
        # budgets and source de-duplication see every row of it (batch_size caps CPU calls only)
        self.batch_size = None if str(device_of(self.metric) or "cpu").startswith("cuda") else batch_size
        self.last = last
        self.prepared = prepared  # ids come from `prepare_unit`: this actor only scores and writes
        self.out_fs = clients.fsspec_filesystem(output, s3)
        self.caches = RowCaches()
        # GPU pools run two units at once in an actor (`actor_pool`): the device is used by one
        # at a time, while the other decodes rows, builds, compresses and writes its part
        self.device_lock = threading.Lock()
        self.cache_lock = threading.Lock()

    def __call__(self, batch: pa.Table) -> pa.Table:
        reports = batch.column(REPORTS).to_pylist()
        units = batch.column(UNIT).to_pylist()
        read_errors = batch.column(READ_ERROR).to_pylist()
        payloads = batch.column(PAYLOAD)
        prepared = batch.column(prepared_column(self.label)) if self.prepared else None
        for index, text in enumerate(units):
            unit = json.loads(text)
            if self.label not in unit["labels"] or read_errors[index] is not None:
                continue
            try:
                report = self._score_unit(unit, payloads[index].as_py(), prepared[index].as_py() if prepared is not None else None)
            except (CtgscoreError, OSError):
                raise  # storage: retried by Ray, then fails the job with its message
            except Exception as exc:  # noqa: BLE001 - outside any row: the shard counts as bad
                if is_accelerator_error(exc):
                    end_actor(self.label, unit, exc)  # does not return
                cause = str(exc) if isinstance(exc, PreparationFailed) else f"{type(exc).__name__}: {_one_line(exc)}"
                report = {"label": self.label, "rel": unit["rel"], "uri": unit["uri"], "start": unit["start"],
                          "stop": unit["stop"], "rows": 0, "failed": f"scoring failed ({cause})"}
            reports[index] = json.dumps(json.loads(reports[index]) + [report])
        columns = {UNIT: batch.column(UNIT), READ_ERROR: batch.column(READ_ERROR), REPORTS: pa.array(reports, type=pa.string())}
        if not self.last:
            columns[PAYLOAD] = payloads
            for name in batch.column_names:  # later metrics' prepared ids ride along
                if name.startswith("_prepared:") and name != prepared_column(self.label):
                    columns[name] = batch.column(name)
        return pa.table(columns)

    def _score_unit(self, unit: dict[str, Any], payload: bytes, prepared: bytes | None = None) -> dict[str, Any]:
        from ray_jobs import incremental
        from ray_jobs.storage import writes
        from scoring.schema import output_table

        table = pa.ipc.open_stream(io.BytesIO(payload)).read_all()
        step = self.batch_size
        if prepared is None:
            with self.cache_lock:
                cache = self.caches.get(self.out_fs, self.label, self.output_columns, unit)
            rows, keys, results, todo, cached = settle_rows(self.metric, table, self.read_columns, self.carried, cache)
            step = step or max(len(todo), 1)
            with self.device_lock, self.watchdog.guard(f"{unit['rel']} rows {unit['start']}-{unit['stop']}"):  # issue 29
                for begin in range(0, len(todo), step):
                    chunk = todo[begin : begin + step]
                    for index, result in zip(chunk, self.metric.score_rows([rows[i] for i in chunk])):
                        results[index] = result
        else:
            prepared_ids, meta = read_prepared(prepared)
            if "failed" in meta:
                raise PreparationFailed(meta["failed"])
            rows, _ = _carried_rows(table, self.carried)
            keys, cached = meta["keys"], meta["cached"]
            results = [None] * len(rows)
            for index, result in meta["settled"].items():
                results[int(index)] = result
            # the chunks `score_rows` would have seen: todo positions cut every `batch_size`
            chunk_of = [position // step for position in meta["positions"]] if step else [0] * len(meta["rows"])
            with self.device_lock, self.watchdog.guard(f"{unit['rel']} rows {unit['start']}-{unit['stop']}"):  # issue 29
                begin = 0
                while begin < len(chunk_of):
                    end = begin
                    while end < len(chunk_of) and chunk_of[end] == chunk_of[begin]:
                        end += 1
                    scored = self.metric.score_prepared_rows(prepared_ids.slice(begin, end - begin))
                    for index, result in zip(meta["rows"][begin:end], scored):
                        results[index] = result
                    begin = end
        ids = [row.get("id") for row in rows]
        carried = {c: [row.get(c) for row in rows] for c in self.carried}
        out = output_table(ids, results, self.output_columns, self.signature, keys, carried)
        reasons: Counter = Counter()
        samples = []
        part = layout.PartName(unit["start"], unit["stop"], unit["version"])
        uri = layout.part_uri(self.output, self.label, unit["rel"], part)
        for index, result in enumerate(results):
            reason = result.get("error")
            if reason is None:
                continue
            reasons[reason if len(reason) < 80 else reason[:77] + "..."] += 1
            if len(samples) < MAX_SAMPLES_PER_PART:
                samples.append({"file": unit["uri"], "row": unit["start"] + index, "id": ids[index], "error": reason})
        errors = sum(reasons.values())
        skipped = sum(1 for result in results if result.get("skipped"))
        retry = device_guard.retry_rows(results)  # issue 29: single-row OOMs, scored again next run
        metadata = incremental.part_metadata(
            unit["rel"], unit["etag"], unit["size"], self.signature, self.digest, unit["start"], unit["stop"], errors,
            skipped, retry,
        )
        data = writes.table_bytes(out, metadata)
        writes.put_atomic(self.out_fs, uri, data)
        return {
            "size": len(data),  # with md5, what verification checks against the output listing
            "md5": hashlib.md5(data).hexdigest(),
            "label": self.label,
            "rel": unit["rel"],
            "start": unit["start"],
            "stop": unit["stop"],
            "part": uri,
            "rows": len(rows),
            "cached": cached,
            "errors": errors,
            "skipped": skipped,
            "retry": retry,  # issue 29
            "reasons": dict(reasons),
            "samples": samples,
        }

def _carried_rows(table: pa.Table, carried: list[str]) -> tuple[list[dict], list]:
    """The id and carried columns of a unit's rows (what the part keeps besides scores)."""
    from scoring.schema import rows_from_table

    return rows_from_table(table.select([c for c in table.column_names if c == "id" or c in carried]))


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


def run_units(config: JobConfig, plans: list[MetricPlan], carried: list[str]) -> dict[str, Any]:
    """Run the pipeline over every unit some metric needs. Returns per-label reports, the
    shards that failed while scoring ({uri: reason}), and timing for the steady-state rate."""
    import ray.data

    active = [plan for plan in plans if plan.pending_rows or any(p.units for p in plan.shards.values())]
    read_columns = {plan.info.spec.label: plan.info.read_columns for plan in active}
    units = build_units(config, active, read_columns)
    result: dict[str, Any] = {"reports": {plan.info.spec.label: [] for plan in active}, "bad": {}, "first_at": None,
                              "rows_after_first": 0, "started": time.perf_counter(), "ended": None}
    if not units:
        result["ended"] = time.perf_counter()
        return result
    ds = ray.data.from_items(units, override_num_blocks=len(units))
    ds = ds.map_batches(
        read_unit, batch_size=1, batch_format="pyarrow", fn_kwargs={"input_root": config.input, "s3": config.s3},
        num_cpus=min(1.0, config.pool.num_cpus or 0.5),
    )
    for position, plan in enumerate(active):
        pool = metric_pool(config, plan.info.spec)
        two_stage = supports_prepare(plan.info)
        if two_stage:
            ds = ds.map_batches(
                prepare_unit, batch_size=1, batch_format="pyarrow", num_cpus=min(1.0, config.pool.num_cpus or 0.5),
                fn_kwargs={"info": plan.info, "output": config.output, "s3": config.s3, "carried": carried},
            )
        with warnings.catch_warnings():
            # max_restarts/max_task_retries have no named parameter; Ray Data documents passing
            # them as extra kwargs, which warns about `ray_remote_args`
            warnings.simplefilter("ignore")
            ds = ds.map_batches(
                PartScorer,
                fn_constructor_kwargs={
                    "info": plan.info,
                    "output": config.output,
                    "s3": config.s3,
                    "carried": carried,
                    "batch_size": config.batch_size,
                    "torch_threads": pool.torch_threads,
                    "last": position == len(active) - 1,
                    "prepared": two_stage,
                    "num_gpus": pool.num_gpus,  # issue 29 (device_guard)
                    "unit_timeout_s": pool.unit_timeout_s,  # issue 29 (device_guard)
                },
                batch_size=1,
                batch_format="pyarrow",
                compute=actor_pool(pool),
                num_cpus=pool.num_cpus,
                num_gpus=pool.num_gpus or None,
                max_restarts=pool.max_restarts,
                max_task_retries=pool.max_task_retries,
            )
    totals = {plan.info.spec.label: plan.pending_rows for plan in active}
    progress = Progress(totals, config.progress)
    requested = request_gpu_pools([metric_pool(config, plan.info.spec) for plan in active])
    try:
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            now = time.perf_counter()
            for text, read_error, reports in zip(
                batch.column(UNIT).to_pylist(), batch.column(READ_ERROR).to_pylist(), batch.column(REPORTS).to_pylist()
            ):
                unit = json.loads(text)
                if read_error is not None:
                    result["bad"].setdefault(unit["uri"], read_error)
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
        raise worker_failure(exc) from exc
    finally:
        progress.close()
        if requested:
            release_requests()
    result["ended"] = time.perf_counter()
    return result


def supports_prepare(info: MetricInfo) -> bool:
    """Whether the metric's class has the two-stage protocol (`RowMetric.prepare`)."""
    from scoring.metric import RowMetric

    cls = info.cls
    return isinstance(cls, type) and issubclass(cls, RowMetric) and cls.prepare is not RowMetric.prepare


def request_gpu_pools(pools: list) -> bool:
    """Ask the cluster autoscaler up front for every GPU actor the pools may run
    (`max_size` bundles each). Ray Data grows an actor pool only onto resources the cluster
    already has, and the autoscaler adds nodes only for pending demand, so a GPU pool on nodes
    scaled from zero otherwise stays at its first replica (ray-project/ray#59144). Without an
    autoscaler the request is a no-op."""
    bundles = [{"CPU": pool.num_cpus, "GPU": pool.num_gpus} for pool in pools if pool.num_gpus for _ in range(pool.max_size)]
    if not bundles:
        return False
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=bundles)
    except Exception:  # noqa: BLE001 - best effort: the pools still run at their own pace
        return False
    return True


def release_requests() -> None:
    """Withdraw the up-front request, so idle GPU nodes go after the idle timeout."""
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[])
    except Exception:  # noqa: BLE001 - best effort
        pass


def worker_failure(exc: BaseException) -> CtgscoreError:
    """The ctgscore error a worker raised (a storage failure, say: `worker_errors.error_from_worker`
    recovers it from Ray's wrapping), else a JobError with the last line of the worker's
    error."""
    from ray_jobs.storage import worker_errors

    found = worker_errors.error_from_worker(exc)
    if found is not None:
        return found
    text = [line for line in str(exc).splitlines() if line.strip()]
    return JobError(f"scoring failed in a worker: {text[-1] if text else type(exc).__name__}")

"""Score stage, a metric's step on its own actor pool (`metrics[].pool`): `PartScorer`
scores the units that need the metric and writes their parts (`write.write_part`).

For a two-stage metric the rows come settled and tokenised from the CPU step
(`prepare.prepare_unit`): the actor only turns ids into scores (`score_prepared_rows`). For
the others it settles the rows itself (`rows.settle_rows`) and scores them with
`RowMetric.score_rows`. Either way rows are scored in the chunks `score_rows` would have seen
(`batch_size`, failing chunks bisected). On CUDA one call takes the whole unit.

An accelerator error ends the actor (`end_actor`): Ray restarts it and retries the unit.
A GPU pool runs two units per actor in threads (`cluster.actor_pool`): `device_lock` keeps the
device to one of them while the other decodes, builds, compresses and writes its part."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

import pyarrow as pa

from ray_jobs.config import S3Config
from ray_jobs.job import device_guard
from ray_jobs.job.prepare import prepared_column
from ray_jobs.job.read import PAYLOAD, READ_ERROR, REPORTS, ipc_table
from ray_jobs.job.rows import RowCaches, read_prepared, settle_rows
from ray_jobs.job.units import UNIT, unit_of, where
from ray_jobs.job.write import write_part
from scoring.console_text import console_line
from scoring.errors import CtgscoreError, first_line, is_accelerator_error

ACCELERATOR_EXIT = 70


class PreparationFailed(Exception):
    """The CPU step failed outside any row; the message is its cause."""


def end_actor(label: str, unit: dict[str, Any], exc: BaseException) -> None:
    """After an accelerator error every later CUDA call of this process fails: nothing of
    the unit is written, the process exits, Ray restarts the actor (`pool.max_restarts`) and
    retries the unit on it (`pool.max_task_retries`). Never a committed row error."""
    print(console_line(f"ctgscore: metric {label}: accelerator error while scoring {where(unit)} "
                       f"({type(exc).__name__}: {first_line(exc)}); ending this actor so Ray restarts it and retries the unit"),
          file=sys.stderr, flush=True)
    os._exit(ACCELERATOR_EXIT)


class PartScorer:
    """Ray Data callable class for one metric: scores the units that need it and writes its
    parts; passes every unit on (without the payload after the last metric)."""

    def __init__(self, metric, output: str, s3: S3Config, carried: list[str], batch_size: int, last: bool):
        from ray_jobs.job.metrics import device_of
        from ray_jobs.storage import clients

        if metric.pool.torch_threads:
            import torch

            torch.set_num_threads(metric.pool.torch_threads)
        self.metric = metric
        self.built = metric.build(s3)
        self.signature = str(self.built.signature())
        if self.signature != metric.signature:
            raise CtgscoreError(
                f"metric {metric.label}: signature on this worker differs from the driver's "
                f"(worker {self.signature!r}, driver {metric.signature!r}): different library or model versions"
            )
        device_guard.require_cuda(device_of(self.built), metric.pool.num_gpus)  # a GPU pool never scores on the CPU
        self.watchdog = device_guard.Watchdog(metric.pool.unit_timeout_s, metric.label)  # a hung call ends the actor
        self.read_columns = set(metric.read_columns)
        self.output = output
        self.carried = [c for c in carried if c != "id"]
        # on CUDA one scoring call takes the whole unit, so the engine's length sorting, token
        # budgets and source de-duplication see every row of it (batch_size caps CPU calls only)
        self.batch_size = None if str(device_of(self.built) or "cpu").startswith("cuda") else batch_size
        self.last = last
        self.out_fs = clients.fsspec_filesystem(output, s3)
        self.caches = RowCaches()
        self.device_lock = threading.Lock()
        self.cache_lock = threading.Lock()

    def __call__(self, batch: pa.Table) -> pa.Table:
        label = self.metric.label
        reports = batch.column(REPORTS).to_pylist()
        read_errors = batch.column(READ_ERROR).to_pylist()
        payloads = batch.column(PAYLOAD)
        prepared = batch.column(prepared_column(label)) if self.metric.two_stage else None
        for index, text in enumerate(batch.column(UNIT).to_pylist()):
            unit = unit_of(text)
            if label not in unit["labels"] or read_errors[index] is not None:
                continue
            try:
                report = self._score_unit(unit, payloads[index].as_py(), prepared[index].as_py() if prepared is not None else None)
            except (CtgscoreError, OSError):
                raise  # storage: retried by Ray, then fails the job with its message
            except Exception as exc:  # noqa: BLE001 - outside any row: the shard counts as bad
                if is_accelerator_error(exc):
                    end_actor(label, unit, exc)  # does not return
                cause = str(exc) if isinstance(exc, PreparationFailed) else f"{type(exc).__name__}: {first_line(exc)}"
                report = {"label": label, "rel": unit["rel"], "uri": unit["uri"], "start": unit["start"],
                          "stop": unit["stop"], "rows": 0, "failed": f"scoring failed ({cause})"}
            reports[index] = json.dumps(json.loads(reports[index]) + [report])
        columns = {UNIT: batch.column(UNIT), READ_ERROR: batch.column(READ_ERROR), REPORTS: pa.array(reports, type=pa.string())}
        if not self.last:
            columns[PAYLOAD] = payloads
            for name in batch.column_names:  # later metrics' prepared ids ride along
                if name.startswith("_prepared:") and name != prepared_column(label):
                    columns[name] = batch.column(name)
        return pa.table(columns)

    def _score_unit(self, unit: dict[str, Any], payload: bytes, prepared: bytes | None) -> dict[str, Any]:
        from scoring.schema import rows_from_table

        table = ipc_table(payload)
        if prepared is None:
            with self.cache_lock:
                cache = self.caches.get(self.out_fs, self.metric.label, self.metric.output_columns, unit)
            rows, keys, results, todo, cached, lent = settle_rows(self.built, table, self.read_columns, self.carried, cache)
            self._score_rows(rows, todo, results, where(unit))
        else:
            ids_table, meta = read_prepared(prepared)
            if "failed" in meta:
                raise PreparationFailed(meta["failed"])
            # only the id and carried columns: the rest was decoded by the CPU step
            rows, _ = rows_from_table(table.select([c for c in table.column_names if c == "id" or c in self.carried]))
            keys, cached, lent = meta["keys"], meta["cached"], meta["lent"]
            results = [None] * len(rows)
            for index, result in meta["settled"].items():
                results[int(index)] = result
            self._score_prepared(ids_table, meta["rows"], meta["positions"], results, where(unit))
        ids = [row.get("id") for row in rows]
        carried = {c: [row.get(c) for row in rows] for c in self.carried}
        return write_part(self.out_fs, self.output, self.metric, self.signature, unit, ids, carried, keys, results, cached,
                          lent)

    def _score_rows(self, rows: list[dict], todo: list[int], results: list, what: str) -> None:
        step = self.batch_size or max(len(todo), 1)
        with self.device_lock, self.watchdog.guard(what):
            for begin in range(0, len(todo), step):
                chunk = todo[begin : begin + step]
                for index, result in zip(chunk, self.built.score_rows([rows[i] for i in chunk])):
                    results[index] = result

    def _score_prepared(self, ids: pa.Table, rows: list[int], positions: list[int], results: list, what: str) -> None:
        """Score the prepared rows in the chunks `score_rows` would have seen: positions among
        the rows left to score, cut every `batch_size`."""
        step = self.batch_size
        chunk_of = [position // step for position in positions] if step else [0] * len(rows)
        with self.device_lock, self.watchdog.guard(what):  # timed once the device is ours
            begin = 0
            while begin < len(chunk_of):
                end = begin
                while end < len(chunk_of) and chunk_of[end] == chunk_of[begin]:
                    end += 1
                scored = self.built.score_prepared_rows(ids.slice(begin, end - begin))
                for index, result in zip(rows[begin:end], scored):
                    results[index] = result
                begin = end

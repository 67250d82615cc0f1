"""Score stage, the CPU step of a two-stage metric (BARTScore, CTRLEval, perplexity: those
with `RowMetric.prepare`), a stateless Ray Data task: settle each unit's rows and tokenise the
rest into `int32` id columns, handed to the metric's actor as `prepared_column(label)`."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ray_jobs.config import S3Config
from ray_jobs.job.read import PAYLOAD, READ_ERROR, ipc_table
from ray_jobs.job.rows import RowCaches, prepare_table, prepared_payload
from ray_jobs.job.units import UNIT, unit_of
from scoring.errors import CtgscoreError, first_line

_PREPARERS: dict[str, Any] = {}
_ROW_CACHES = RowCaches()  # of this worker process


def prepared_column(label: str) -> str:
    return f"_prepared:{label}"


def _preparer(metric, s3: S3Config):
    """The metric built without its model weights (tokenizer and configuration only), once
    per worker process; row keys use the driver's signature."""
    built = _PREPARERS.get(metric.digest)
    if built is None:
        from scoring.models import without_weights

        with without_weights():
            built = metric.build(s3)
        built.pin_signature(metric.signature)
        _PREPARERS.clear()  # one metric per process at a time: tokenizers can be large
        _PREPARERS[metric.digest] = built
    return built


def prepare_unit(batch: pa.Table, metric, output: str, s3: S3Config, carried: list[str]) -> pa.Table:
    """Settle each unit's rows and tokenise those left to score (`rows.prepare_table`) into
    one payload per unit (`rows.prepared_payload`), added as `prepared_column(label)`."""
    from ray_jobs.storage import clients

    built = _preparer(metric, s3)
    read_errors = batch.column(READ_ERROR).to_pylist()
    payloads = batch.column(PAYLOAD)
    prepared = []
    for index, text in enumerate(batch.column(UNIT).to_pylist()):
        unit = unit_of(text)
        if metric.label not in unit["labels"] or read_errors[index] is not None:
            prepared.append(None)
            continue
        try:
            table = ipc_table(payloads[index].as_py())
            cache = _ROW_CACHES.get(clients.fsspec_filesystem(output, s3), metric.label, metric.output_columns, unit)
            ids, meta = prepare_table(built, table, set(metric.read_columns), carried, cache)
        except (CtgscoreError, OSError):
            raise  # storage: retried by Ray, then fails the job with its message
        except Exception as exc:  # noqa: BLE001 - outside any row: the shard counts as bad
            ids, meta = pa.table({}), {"failed": f"{type(exc).__name__}: {first_line(exc)}"}
        prepared.append(prepared_payload(ids, meta))
    return batch.append_column(prepared_column(metric.label), pa.array(prepared, type=pa.binary()))

"""Score stage, step 1 (Ray Data task): read each unit's rows once.

Only the row groups the unit's range overlaps and only the columns some metric reads or
carries are read. The rows travel on as one Arrow IPC payload (`PAYLOAD`), so a unit is never
split or merged on the way. A unit whose file cannot be read carries the reason
(`READ_ERROR`): its shard then counts as bad."""

from __future__ import annotations

import io

import pyarrow as pa

from ray_jobs.config import S3Config
from ray_jobs.job.units import UNIT, columns_digest, unit_of

PAYLOAD = "_payload"
READ_ERROR = "_read_error"
REPORTS = "_reports"


def read_unit(batch: pa.Table, input_root: str, s3: S3Config) -> pa.Table:
    """The rows of each unit in `batch`, as one IPC payload per unit."""
    import pyarrow.parquet as pq

    from ray_jobs.storage import clients, failures, uris

    payloads, errors = [], []
    for text in batch.column(UNIT).to_pylist():
        unit = unit_of(text)
        try:
            fs = clients.arrow_filesystem(input_root, s3)
            with fs.open_input_file(uris.fs_path(unit["uri"])) as handle:
                parquet = pq.ParquetFile(handle)
                _check_plan(parquet, unit)
                table = _read_range(parquet, unit["start"], unit["stop"], unit["columns"])
            if table.num_rows != unit["stop"] - unit["start"]:
                raise NotAsPlanned(f"rows {unit['start']} to {unit['stop']} read as {table.num_rows} rows "
                                   "(its row groups hold fewer rows than their footer entries declare)")
            payloads.append(ipc_bytes(table))
            errors.append(None)
        except NotAsPlanned as exc:
            payloads.append(b"")
            errors.append(f"{exc} (while scoring)")
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


class NotAsPlanned(ValueError):
    """The file a unit reads is not the one the plan saw: its footer's rows or column types
    differ from the plan's (from a previous manifest's record of the file, which the plan trusts
    where the listing agrees with it, or from a footer whose row count is false)."""


def _check_plan(parquet, unit: dict) -> None:
    """Raise `NotAsPlanned` unless the footer declares the shard's planned rows, those rows are
    its row groups' rows, the columns the unit reads have their canonical types and the file's
    column types are the planned ones (`units.columns_digest`): the plan
    took these from a previous manifest where it vouched for the file, and a false record must
    neither lose rows without a word nor hand a metric a column of another type."""
    from ray_jobs.storage.shard_checks import footer_rows_problem
    from scoring.schema import wrong_type

    declared = parquet.metadata.num_rows
    if "rows" in unit and declared != unit["rows"]:
        raise NotAsPlanned(f"its footer declares {declared} rows, the plan {unit['rows']} "
                           "(the previous manifest's record of the file is false)")
    problem = footer_rows_problem(parquet.metadata)
    if problem is not None:
        raise NotAsPlanned(problem)
    wrong = wrong_type(unit["columns"], parquet.schema_arrow)
    if wrong is not None:
        raise NotAsPlanned(f"column '{wrong[0]}' has type {wrong[1]}, expected {wrong[2]}")
    schema = parquet.schema_arrow
    if "schema" in unit and columns_digest({name: str(schema.field(name).type) for name in schema.names}) != unit["schema"]:
        raise NotAsPlanned("its columns or their types differ from the plan's "
                           "(the previous manifest's record of the file is false)")


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


def ipc_bytes(table: pa.Table) -> bytes:
    """A table as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ipc_table(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(io.BytesIO(payload)).read_all()

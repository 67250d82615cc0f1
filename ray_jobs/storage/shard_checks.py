"""The footer check of one input shard, before any work starts (no rows read unless
`read_ids`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow.parquet as pq

from ray_jobs.storage.failures import is_transient, read_failure
from ray_jobs.storage.listing import ShardInfo
from ray_jobs.storage.reads import PYTHON_FILE_READS
from ray_jobs.storage.uris import fs_path
from scoring.limits import MAX_INFLATION, inflation_problem
from scoring.schema import REQUIRED_COLUMNS, carried_columns, id_problem, wrong_type


class BadShard(ValueError):
    """A shard that cannot be used: unreadable, truncated, wrong column type, bad ids.
    `transient` is True when storage failed (after retries) rather than the file itself:
    the shard may be fine on the next run, so its committed output must be kept."""

    def __init__(self, uri: str, reason: str, transient: bool = False):
        super().__init__(f"{uri}: {reason}")
        self.uri = uri
        self.reason = reason
        self.transient = transient


@dataclass
class ShardCheck:
    info: ShardInfo
    num_rows: int
    columns: dict[str, str]  # column -> arrow type string
    ids: list[str] = field(default_factory=list)


def check_shard(info: ShardInfo, fs, needed: tuple[str, ...], read_ids: bool = True,
                max_inflation: float = MAX_INFLATION) -> ShardCheck:
    """Schema check of one shard before any work starts: the footer must be readable, `id`
    and `text` present, every column the job reads or carries (`needed`, `dataset`, `system`,
    `doc_id`, `human_*`) must have its canonical type, and ids
    must be non-null and unique within the shard, and the columns it reads must not declare
    more than `max_inflation` times the file's size uncompressed (`scoring.limits`). Raises `BadShard` naming file and field
    (`transient=True` when storage, not the file, failed after retries)."""
    path = fs_path(info.uri)
    try:
        # the listed size: s3fs would look the key up in its listing cache, where a key that is
        # also a prefix of others (`a.parquet` beside `a.parquet/b.parquet`) is a folder of 0 bytes
        with fs.open(path, "rb", size=info.size) as handle:
            parquet = pq.ParquetFile(handle, pre_buffer=PYTHON_FILE_READS["pre_buffer"])
            schema = parquet.schema_arrow
            num_rows = parquet.metadata.num_rows
            twice = next((name for name in schema.names if schema.names.count(name) > 1), None)
            if twice is not None:
                raise BadShard(info.uri, f"column '{twice}' appears more than once (column names must be unique)")
            grouped = footer_rows_problem(parquet.metadata)
            if grouped is not None:
                raise BadShard(info.uri, grouped)
            columns = {name: str(schema.field(name).type) for name in schema.names}
            for column in REQUIRED_COLUMNS:
                if column not in columns:
                    raise BadShard(info.uri, f"missing required column '{column}' (has: {_names(schema.names)})")
            carried = [c for c in carried_columns(columns) if c != "id"]
            wrong = wrong_type(dict.fromkeys([*REQUIRED_COLUMNS, *needed, *carried]), schema)
            if wrong is not None:
                raise BadShard(info.uri, f"column '{wrong[0]}' has type {wrong[1]}, expected {wrong[2]}")
            inflated = inflation_problem(parquet.metadata, info.size, max_inflation, {*REQUIRED_COLUMNS, *needed, *carried})
            if inflated is not None:
                raise BadShard(info.uri, inflated)
            ids: list[str] = []
            if read_ids:
                id_column = parquet.read(columns=["id"], use_threads=PYTHON_FILE_READS["use_threads"]).column("id")
                reason = id_problem(id_column.combine_chunks())
                if reason is not None:
                    raise BadShard(info.uri, reason)
                ids = id_column.to_pylist()
    except BadShard:
        raise
    except UnicodeDecodeError as exc:  # Arrow decodes the footer's names as UTF-8
        raise BadShard(info.uri, "its footer holds a name (a column's?) that is not valid UTF-8") from exc
    except Exception as exc:  # noqa: BLE001 - any read failure names the shard
        raise BadShard(info.uri, read_failure(exc, info.uri), transient=is_transient(exc)) from exc
    return ShardCheck(info=info, num_rows=num_rows, columns=columns, ids=ids)


def footer_rows_problem(metadata) -> str | None:
    """What is false in a footer's row count, or None: the rows it declares must be the sum of
    its row groups' rows (a file whose footer says otherwise would have rows scored twice or
    never, as the job reads row ranges by row group)."""
    groups = sum(metadata.row_group(index).num_rows for index in range(metadata.num_row_groups))
    if groups != metadata.num_rows or metadata.num_rows < 0:
        return f"footer declares {metadata.num_rows} rows but its row groups hold {groups}"
    return None


def _names(names: list[str], shown: int = 20, longest: int = 80) -> str:
    """Column names for a message: the first `shown`, each cut at `longest` characters, and how
    many more (a dump of 100,000 columns or one name of a megabyte is one short line)."""
    cut = [name if len(name) <= longest else name[:longest] + "..." for name in names[:shown]]
    return ", ".join(cut) + (f" and {len(names) - shown} more" if len(names) > shown else "")

"""Incremental, resumable scoring: what can be reused from earlier runs.

Unit of commit: one *part*, the rows `[start, stop)` of one input shard for one metric,
written atomically by the worker that scored it (`ray_jobs/job/layout.py` names it). Its
Parquet footer records the input shard's path, etag and size, the metric signature and its
digest, the row range, and its error count. So:

* **resume** after a killed driver or worker: a part whose footer matches (same input
  bytes, same signature digest, as many rows as its range) is complete, because an atomic
  write is all or nothing; the next run keeps it and schedules only the row ranges no
  complete part covers;
* **nightly re-runs**: an unchanged shard (same etag and size) with the same signature is
  covered by its parts and reused without starting Ray; for a changed shard, the rows of its
  earlier parts are a cache keyed by `RowMetric.row_key(row)` = hash(signature digest, the
  columns the metric reads), looked up by the worker that scores that shard, so only new or
  changed rows are scored;
* **invalidation**: a changed metric parameter or model revision changes that metric's
  signature digest, so exactly that metric's parts and row keys stop matching.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ray_jobs.storage import reads

META_PREFIX = "ctgscore."


def part_metadata(rel: str, etag: str, size: int, signature: str, digest: str, start: int, stop: int, errors: int,
                  skipped: int = 0, retry: int = 0) -> dict[str, str]:
    """Footer key-value metadata of one part (`skipped`: rows the metric does not apply to;
    `retry`: errors that are no property of the row, such as out of memory on a single row,
    written only when there are some, so a part without them keeps the footer it always had)."""
    meta = {
        META_PREFIX + "input": rel,
        META_PREFIX + "input_etag": etag,
        META_PREFIX + "input_size": str(size),
        META_PREFIX + "signature": signature,
        META_PREFIX + "signature_digest": digest,
        META_PREFIX + "start": str(start),
        META_PREFIX + "stop": str(stop),
        META_PREFIX + "rows": str(stop - start),
        META_PREFIX + "rows_error": str(errors),
        META_PREFIX + "rows_skipped": str(skipped),
    }
    if retry:
        meta[META_PREFIX + "rows_retry"] = str(retry)
    return meta


def part_is_complete(footer: tuple[int, dict[str, str]] | None, etag: str, size: int, digest: str, start: int, stop: int) -> bool:
    """A committed part is reusable as is when it was made from the same input bytes (etag,
    size) by the same metric signature, for this row range, and holds one row per input row.
    A part written before skipped rows were counted (no `rows_skipped` in its footer) is
    scored again once, through the row cache: its rows a metric does not apply to were errors.
    A part holding rows marked for retry (`rows_retry`: out of memory on a single row) is scored
    again too: its good rows come from the row cache, the retry rows are scored anew."""
    if footer is None:
        return False
    num_rows, meta = footer
    return (
        META_PREFIX + "rows_skipped" in meta
        and meta.get(META_PREFIX + "rows_retry", "0") == "0"
        and meta.get(META_PREFIX + "input_etag") == etag
        and meta.get(META_PREFIX + "input_size") == str(size)
        and meta.get(META_PREFIX + "signature_digest") == digest
        and meta.get(META_PREFIX + "start") == str(start)
        and meta.get(META_PREFIX + "stop") == str(stop)
        and num_rows == stop - start
    )


def _footer_count(value: str | None) -> int:
    """A count from a footer; 0 unless it is ASCII digits Python reads as an int (an edited
    footer's `²` or 5,000 digits would raise)."""
    return int(value) if value and value.isascii() and value.isdigit() and len(value) <= 18 else 0


def footer_errors(footer: tuple[int, dict[str, str]]) -> int:
    return _footer_count(footer[1].get(META_PREFIX + "rows_error"))


def footer_skipped(footer: tuple[int, dict[str, str]]) -> int:
    return _footer_count(footer[1].get(META_PREFIX + "rows_skipped"))


def footer_digest(footer: tuple[int, dict[str, str]] | None) -> str | None:
    return None if footer is None else footer[1].get(META_PREFIX + "signature_digest")


def load_row_cache(fs, uris: list[str], score_columns: tuple[str, ...]) -> "RowCache":
    """Rows of earlier parts that scored without error: `row_key` -> score columns, warning
    and skipped (the scores such a row does not get), and the folder of the part each came from
    (`RowCache.source`: what a report names as the lender). Rows with an error are scored again (the cause may have been transient); an
    unreadable or vanished old part is just not reused."""
    cache = RowCache(None, score_columns)
    columns = ["row_key", *score_columns, "warning", "skipped", "error"]
    for uri in uris:
        try:
            table = reads.read_table(fs, uri, columns=columns)
        except Exception:  # noqa: BLE001 - a cache miss only costs a re-score
            continue
        cache.add(table.filter(pc.is_null(table.column("error"))), source=uri.rsplit("/", 1)[0])
    return cache


class RowCache:
    """In-worker lookup of reusable scores by row key."""

    def __init__(self, table: pa.Table | None, score_columns: tuple[str, ...]):
        self.score_columns = tuple(score_columns)
        self.rows: dict[str, dict[str, Any]] = {}
        self.sources: dict[str, str] = {}  # row key -> the folder whose part holds the row kept
        if table is not None:
            self.add(table)

    def add(self, table: pa.Table, source: str | None = None) -> None:
        """The rows of `table` (a later row of a key replaces an earlier one), from the part
        folder `source` when known."""
        keys = table.column("row_key").to_pylist()
        names = (*self.score_columns, "warning", *(["skipped"] if "skipped" in table.column_names else []))
        values = {column: table.column(column).to_pylist() for column in names}
        for index, key in enumerate(keys):
            self.rows[key] = {column: values[column][index] for column in values}
            if source is None:
                self.sources.pop(key, None)
            else:
                self.sources[key] = source

    def source(self, key: str) -> str | None:
        """The folder of the part the row of `key` was taken from (None when unknown)."""
        return self.sources.get(key)

    def get(self, key: str) -> dict | None:
        found = self.rows.get(key)
        if found is None:
            return None
        return {**found, "error": None}

    def __len__(self) -> int:
        return len(self.rows)

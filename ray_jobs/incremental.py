"""Incremental, resumable scoring: what can be reused from earlier runs.

Unit of work and of commit: one (metric, input shard) pair, written atomically to
`OUT/<label>/<shard path relative to the input>`. Its Parquet footer records the input
shard's etag and size, the metric signature and its digest, and the row count. So:

* **resume** after a killed driver: a shard whose output is committed is complete (an atomic
  write is all or nothing); the next run reuses it and scores only the rest: no duplicates
  (one file per shard, ids deduplicated within it), no gaps (a shard counts as done only when
  every input id came back);
* **nightly re-runs**: an unchanged shard (same etag and size) with the same signature digest
  is reused whole, without starting Ray; for a changed shard, the rows of its previous output
  are a cache keyed by `RowMetric.row_key(row)` = hash(signature digest, the columns the
  metric reads), so only new or changed rows are scored;
* **invalidation**: a changed metric parameter or model revision changes that metric's
  signature digest, so exactly that metric's files and row keys stop matching; other metrics'
  outputs are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ray_jobs import io as jio

META_PREFIX = "ctgscore."


def output_uri(output: str, label: str, rel: str) -> str:
    """Deterministic output file of one metric over one shard: `OUT/<label>/<rel>`."""
    return jio.join(output, label, rel)


def shard_metadata(info: jio.ShardInfo, signature: str, digest: str, rows: int) -> dict[str, str]:
    return {
        META_PREFIX + "input": info.rel,
        META_PREFIX + "input_etag": info.etag,
        META_PREFIX + "input_size": str(info.size),
        META_PREFIX + "signature": signature,
        META_PREFIX + "signature_digest": digest,
        META_PREFIX + "rows": str(rows),
    }


def is_complete(footer: tuple[int, dict[str, str]] | None, info: jio.ShardInfo, digest: str, rows: int) -> bool:
    """A committed output is reusable as is when it was made from the same bytes (etag, size)
    by the same metric signature and holds exactly one row per input row."""
    if footer is None:
        return False
    num_rows, meta = footer
    return (
        meta.get(META_PREFIX + "input_etag") == info.etag
        and meta.get(META_PREFIX + "input_size") == str(info.size)
        and meta.get(META_PREFIX + "signature_digest") == digest
        and meta.get(META_PREFIX + "rows") == str(rows)
        and num_rows == rows
    )


@dataclass
class MetricPlan:
    """What one metric has to do in this run."""

    label: str
    digest: str
    reused: list[jio.ShardCheck] = field(default_factory=list)  # complete outputs, kept as they are
    pending: list[jio.ShardCheck] = field(default_factory=list)  # to (re)score
    previous: list[str] = field(default_factory=list)  # old outputs of pending shards, same signature
    stale: list[str] = field(default_factory=list)  # outputs whose input shard is gone or bad


def plan_metric(fs, output: str, label: str, digest: str, checks: list[jio.ShardCheck]) -> MetricPlan:
    plan = MetricPlan(label=label, digest=digest)
    prefix = jio.join(output, label)
    existing = set(jio.list_outputs(fs, prefix))
    wanted = set()
    for check in checks:
        uri = output_uri(output, label, check.info.rel)
        wanted.add(uri)
        footer = jio.read_footer_metadata(fs, uri) if uri in existing else None
        if is_complete(footer, check.info, digest, check.num_rows):
            plan.reused.append(check)
        else:
            plan.pending.append(check)
            if footer is not None and footer[1].get(META_PREFIX + "signature_digest") == digest:
                plan.previous.append(uri)
    plan.stale = sorted(existing - wanted)
    return plan


def load_row_cache(fs, uris: list[str], score_columns: tuple[str, ...]) -> pa.Table | None:
    """Rows of earlier outputs that scored without error: `row_key` -> score columns and
    warning. Rows with an error are scored again (the cause may have been transient)."""
    tables = []
    columns = ["row_key", *score_columns, "warning", "error"]
    for uri in uris:
        try:
            table = jio.read_table(fs, uri, columns=columns)
        except Exception:  # noqa: BLE001 - an unreadable old output is just not reused
            continue
        mask = pc.is_null(table.column("error"))
        tables.append(table.filter(mask).drop_columns(["error"]))
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


class RowCache:
    """In-actor lookup of reusable scores by row key."""

    def __init__(self, table: pa.Table | None, score_columns: tuple[str, ...]):
        self.rows: dict[str, dict] = {}
        if table is None:
            return
        keys = table.column("row_key").to_pylist()
        values = {column: table.column(column).to_pylist() for column in (*score_columns, "warning")}
        for index, key in enumerate(keys):
            self.rows[key] = {column: values[column][index] for column in values}

    def get(self, key: str) -> dict | None:
        return self.rows.get(key)

    def __len__(self) -> int:
        return len(self.rows)

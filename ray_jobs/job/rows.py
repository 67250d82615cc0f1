"""A unit's rows for one metric: decoded once, keyed, and settled where no scoring is needed.

`settle_rows` decodes the rows (`scoring.schema.rows_from_table`: an undecodable value is that
row's error), keys them (`RowMetric.row_key`), and settles every row that needs no scoring:
skipped, undecodable, or found in the row cache of the unit's shard (`RowCaches`, its earlier
parts). `prepare_table` is the CPU stage's work on top of it: validate the rest and tokenise
them (`RowMetric.prepare_rows`). What the CPU stage hands the scoring actor is one Arrow table
with one row per unit row (`prepared_payload`): the row key, the settled result (JSON, null
where still to score), the row's position among the rows left to score, and the id columns
(null where settled)."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import pyarrow as pa

from ray_jobs.job.read import ipc_bytes, ipc_table

CACHED_SHARDS_PER_ACTOR = 2
KEY, SETTLED, POSITION = "_row_key", "_settled", "_position"
FACTS = b"ctgscore"  # per-unit facts in the schema metadata: rows from the cache, or why it failed


def settle_rows(metric, table: pa.Table, read_columns, carried,
                cache) -> tuple[list[dict], list[str], list, list[int], int, dict[str, int]]:
    """Decode a unit's rows and settle every row that needs no scoring: skipped, undecodable,
    or reused from the row cache (`cache`, or None). Returns the rows, their keys, the results
    so far (None where still to score), the rows left to score, how many came from the cache
    and, of those, how many from each folder (`RowCache.source`: the lenders that supplied rows)."""
    from scoring.schema import rows_from_table

    wanted = [c for c in table.column_names if c == "id" or c in read_columns or c in carried]
    rows, decode_errors = rows_from_table(table.select(wanted))
    keys = [metric.row_key(row) for row in rows]
    results: list[dict[str, Any] | None] = [None] * len(rows)
    todo, cached = [], 0
    lent: dict[str, int] = {}
    for index, key in enumerate(keys):
        settled = metric.precheck(rows[index], decode_errors[index])  # skipped, or undecodable
        if settled is not None:
            results[index] = settled
            continue
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            results[index] = hit
            cached += 1
            source = cache.source(key)
            if source is not None:
                lent[source] = lent.get(source, 0) + 1
        else:
            todo.append(index)
    return rows, keys, results, todo, cached, lent


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


def prepare_table(metric, table: pa.Table, read_columns, carried, cache) -> tuple[pa.Table, dict[str, Any]]:
    """The CPU stage's work on one unit's rows: settle them (`settle_rows`, then the per-cell
    caps and `validate`, `RowMetric.check_row`, as `score_rows` applies them) and prepare the
    rest (`RowMetric.prepare_rows`). Returns the id columns of the prepared rows and what the
    scoring actor needs besides them: every row's key, the settled results, and per prepared
    row its unit row and its position among the rows left to score (the `batch_size` chunks)."""
    rows, keys, results, todo, cached, lent = settle_rows(metric, table, read_columns, carried, cache)
    valid, positions = [], []
    for position, row_index in enumerate(todo):
        skip = metric.skip_reason(rows[row_index])
        reason = metric.check_row(rows[row_index]) if skip is None else None
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
    meta = {"keys": keys, "cached": cached, "lent": lent, "rows": [r for r, _ in kept], "positions": [p for _, p in kept],
            "settled": {str(i): result for i, result in enumerate(results) if result is not None}}
    return ids, meta


def prepared_payload(ids: pa.Table, meta: dict[str, Any]) -> bytes:
    """One IPC stream with one row per unit row: `KEY`, `SETTLED` (the settled result as JSON,
    null where still to score), `POSITION` (among the rows left to score, null where settled)
    and the id columns (null where settled). A unit that failed as a whole has no rows and
    says why in the schema metadata."""
    if "failed" in meta:
        return ipc_bytes(pa.table({}).replace_schema_metadata({FACTS: json.dumps({"failed": meta["failed"]}).encode()}))
    count = len(meta["keys"])
    take: list[int | None] = [None] * count
    position: list[int | None] = [None] * count
    for prepared, (row, at) in enumerate(zip(meta["rows"], meta["positions"])):
        take[row], position[row] = prepared, at
    settled = [json.dumps(meta["settled"][str(i)]) if str(i) in meta["settled"] else None for i in range(count)]
    spread = ids.take(pa.array(take, type=pa.int64())) if ids.num_columns else pa.table({})
    table = pa.table({KEY: pa.array(meta["keys"], type=pa.string()), SETTLED: pa.array(settled, type=pa.string()),
                      POSITION: pa.array(position, type=pa.int64())})
    for name in spread.column_names:
        table = table.append_column(spread.schema.field(name), spread.column(name))
    facts = {"cached": meta["cached"], "lent": meta.get("lent") or {}}
    return ipc_bytes(table.replace_schema_metadata({FACTS: json.dumps(facts).encode()}))


def read_prepared(payload: bytes) -> tuple[pa.Table, dict[str, Any]]:
    """The id columns of the rows to score (in unit order) and the per-unit facts and per-row
    columns as `prepare_table` returned them, decoded once."""
    table = ipc_table(payload)
    facts = json.loads(table.schema.metadata[FACTS])
    if "failed" in facts:
        return pa.table({}), facts
    settled = table.column(SETTLED).to_pylist()
    positions = table.column(POSITION).to_pylist()
    rows = [i for i, p in enumerate(positions) if p is not None]
    ids = table.drop_columns([KEY, SETTLED, POSITION]).replace_schema_metadata(None)
    ids = ids.take(pa.array(rows, type=pa.int64())) if rows else ids.slice(0, 0)
    meta = {"keys": table.column(KEY).to_pylist(), "cached": facts["cached"], "lent": facts.get("lent") or {}, "rows": rows,
            "positions": [positions[i] for i in rows],
            "settled": {str(i): json.loads(text) for i, text in enumerate(settled) if text is not None}}
    return ids, meta

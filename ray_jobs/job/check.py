"""Stage 2 (workers): the shard checks that need rows, and the cross-shard id check.

Per shard to check, one Ray task reads only the `id` column and returns a small result: None,
or the reason the shard is bad (a null id, an id that is not valid UTF-8, the same id twice in
the shard, an unreadable file). The same task hashes every id (8 bytes of blake2b) and returns
(hash, id) pairs split into hash buckets, held in the object store, never pulled into the
driver. Ids that occur in more than one shard are noted in the manifest
(`duplicate_ids_across_shards`: the count and up to 20 examples) and both rows are scored,
because each output row is identified by its shard and its id (`docs/job.md`).

The id index that spares reading unchanged shards' ids is `id_index.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray_jobs.config import JobConfig, S3Config
from ray_jobs.job import id_index
from ray_jobs.job.errors import JobError
from scoring.errors import one_line
from scoring.schema import id_problem

ROWS_PER_BUCKET = 1_000_000


@dataclass
class CheckResult:
    bad: dict[str, str]  # uri -> reason, for shards whose ids fail the check
    duplicates: dict[str, Any]  # the manifest's `duplicate_ids_across_shards`
    index: str  # "used" (only changed shards read), "built" (none or unusable: every shard read)
    id_columns_read: int  # shards whose `id` column was read (checked, or read to confirm a hash hit)
    index_written: bool = False
    read: list[str] = field(default_factory=list)
    unusable: str | None = None  # why an index that was there could not be used


def check_shards(shards: list, config: JobConfig, header: dict[str, Any] | None) -> CheckResult:
    """Check the ids of `shards` (the plan's `Shard`s): per shard, and across shards with the
    id index when `header` (`read_index_header`) is given and usable, else with every shard's ids."""
    unusable = None
    if header is not None:
        try:
            return _check(shards, config, header)
        except id_index.IndexUnusable as exc:
            unusable = one_line(str(exc), 200)
    result = _check(shards, config, None)
    result.unusable = unusable
    return result


def _check(shards: list, config: JobConfig, header: dict[str, Any] | None) -> CheckResult:
    import ray

    total = sum(s.num_rows for s in shards)
    buckets = int(header["buckets"]) if header else max(1, min(64, total // ROWS_PER_BUCKET))
    known: dict[int, int] = {}  # shard index -> its index in the old index
    if header:
        by_key = {(e["file"], e["etag"], int(e["size"])): (i, int(e["rows"])) for i, e in enumerate(header["shards"])}
        for index, shard in enumerate(shards):
            found = by_key.get((shard.info.uri, shard.info.etag, shard.info.size))
            if found is not None and found[1] == shard.num_rows:
                known[index] = found[0]
    changed = [index for index in range(len(shards)) if index not in known]
    task = ray.remote(num_returns=1 + buckets, num_cpus=0.25, max_retries=2)(_check_one)
    results = {index: task.remote(shards[index].info.uri, config.input, config.s3, buckets, shards[index].num_rows)
               for index in changed}
    summaries = ray.get([results[index][0] for index in changed])
    bad = {shards[index].info.uri: reason for index, reason in zip(changed, summaries) if reason is not None}
    fresh = [index for index, reason in zip(changed, summaries) if reason is None]
    good = sorted([*known, *fresh])
    position = {index: p for p, index in enumerate(good)}  # shard index -> its row in the new index
    source = None
    if header:
        source = {"uri": header["uri"], "size": header["size"], "groups": header["groups"],
                  "to_position": {old: position[index] for index, old in known.items()}}
    kept = {position[index]: shards[index].info.uri for index in known}
    merge = ray.remote(num_returns=2, num_cpus=0.25, max_retries=2)(id_index.merge_bucket)
    merged = [
        merge.remote(bucket, source, config.input, config.s3, kept, [position[i] for i in fresh],
                     *[results[i][1 + bucket] for i in fresh])
        for bucket in range(buckets)
    ]
    try:
        found = ray.get([refs[1] for refs in merged])
    except Exception as exc:  # noqa: BLE001 - an index that cannot be merged: the full check
        if header is not None:
            raise id_index.IndexUnusable(str(exc)) from exc
        raise
    files = [shards[index].info.uri for index in good]
    count = sum(item["count"] for item in found)
    examples = [example for item in found for example in item["examples"]][:id_index.MAX_EXAMPLES]
    note = {"count": count, "examples": [{"id": value, "files": [files[p] for p in where]} for value, where in examples]}
    confirmed = sorted({files[p] for item in found for p in item["read"]})
    result = CheckResult(bad, note, "used" if header else "built", len(changed) + len(confirmed),
                         read=sorted({shards[i].info.uri for i in changed} | set(confirmed)))
    entries = [{"file": shards[i].info.uri, "etag": shards[i].info.etag, "size": shards[i].info.size,
                "rows": shards[i].num_rows} for i in good]
    if header is None or entries != header["shards"]:
        write = ray.remote(num_cpus=0.25, max_retries=2)(id_index.write_index)
        try:
            ray.get(write.remote(config.output, config.s3, entries, buckets, *[refs[0] for refs in merged]))
        except Exception as exc:  # noqa: BLE001 - one line naming the cause, never a Ray traceback
            from ray_jobs.storage import worker_errors

            raise worker_errors.error_from_worker(exc) or JobError(f"cannot write the id index: {exc}") from exc
        result.index_written = True
    return result


def _check_one(uri: str, input_root: str, s3: S3Config, buckets: int, rows: int | None = None):
    """(reason or None, then one (hash, id) table per bucket). `rows`: the shard's rows as
    planned; row groups that hold another number of ids (a footer whose row group counts lie)
    make the shard bad before any row is scored."""
    import numpy as np
    import pyarrow as pa

    from ray_jobs.storage import failures

    empty = [pa.table({"hash": pa.array([], pa.int64()), "id": pa.array([], pa.string())})] * buckets
    try:
        ids = id_index.read_ids(uri, input_root, s3)
    except Exception as exc:  # noqa: BLE001 - any read failure names the shard
        return (failures.read_failure(exc, uri), *empty)
    reason = id_problem(ids)
    if reason is None and rows is not None and len(ids) != rows:
        reason = f"its 'id' column holds {len(ids)} values but its footer declares {rows} rows"
    if reason is not None:
        return (reason, *empty)
    hashes = id_index.hash_ids(ids.to_pylist())
    table = pa.table({"hash": pa.array(hashes, pa.int64()), "id": ids})
    if buckets == 1:
        return (None, table)
    where = id_index.bucket_of(hashes, buckets)
    return (None, *[table.take(pa.array(np.nonzero(where == bucket)[0])) for bucket in range(buckets)])

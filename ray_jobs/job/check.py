"""Stage 2 (workers): the shard checks that need rows, run where the data is read.

One Ray task per shard reads only the `id` column and returns a small result: None, or the
reason the shard is bad (a null id, an id that is not valid UTF-8, the same id twice in the
shard, an unreadable file). The same tasks also return the shard's ids split into
`buckets` hash buckets (owned by the driver, held in the object store, never pulled into the
driver), and one task per bucket finds ids that occur in more than one shard: the job notes
them in the manifest (`duplicate_ids_across_shards`, with up to 20 examples) and scores both
rows, because each output row is identified by its shard and its id (`docs/job.md`).
"""

from __future__ import annotations

import zlib
from typing import Any

from ray_jobs.config import S3Config

MAX_EXAMPLES = 20
ROWS_PER_BUCKET = 1_000_000


def check_shards(uris: list[str], input_root: str, s3: S3Config, total_rows: int) -> tuple[dict[str, str], dict[str, Any]]:
    """Returns ({uri: reason} for bad shards, the cross-shard duplicate note)."""
    import ray

    buckets = max(1, min(64, total_rows // ROWS_PER_BUCKET))
    task = ray.remote(num_returns=1 + buckets, num_cpus=0.25, max_retries=2)(_check_one)
    results = [task.remote(uri, input_root, s3, buckets) for uri in uris]
    summaries = ray.get([refs[0] for refs in results])
    bad = {uri: reason for uri, reason in zip(uris, summaries) if reason is not None}
    good = [index for index, reason in enumerate(summaries) if reason is None]
    find = ray.remote(num_cpus=0.25, max_retries=2)(_duplicates_in_bucket)
    found = ray.get([find.remote(good, *[results[i][1 + b] for i in good]) for b in range(buckets)])
    count = sum(item[0] for item in found)
    examples = [example for item in found for example in item[1]][:MAX_EXAMPLES]
    note = {
        "count": count,
        "examples": [{"id": value, "files": [uris[i] for i in shard_indexes]} for value, shard_indexes in examples],
    }
    return bad, note


def _check_one(uri: str, input_root: str, s3: S3Config, buckets: int):
    """(reason or None, then one id array per bucket)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ray_jobs.storage import clients, failures, uris

    empty = [pa.array([], type=pa.string())] * buckets
    try:
        fs = clients.arrow_filesystem(input_root, s3)
        ids = pq.read_table(uris.fs_path(uri), columns=["id"], filesystem=fs).column("id")
    except Exception as exc:  # noqa: BLE001 - any read failure names the shard
        return (failures.read_failure(exc, uri), *empty)
    ids = ids.combine_chunks()
    if pa.types.is_large_string(ids.type):
        ids = ids.cast(pa.string())
    reason = _id_problem(ids)
    if reason is not None:
        return (reason, *empty)
    if buckets == 1:
        return (None, ids)
    values = ids.to_pylist()
    split: list[list[str]] = [[] for _ in range(buckets)]
    for value in values:
        split[zlib.crc32(value.encode()) % buckets].append(value)
    return (None, *[pa.array(part, type=pa.string()) for part in split])


def _id_problem(ids) -> str | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    if ids.null_count:
        row = pc.index(pc.is_null(ids), True).as_py()
        return f"row {row}: null field 'id' (every row needs an id)"
    try:
        ids.validate(full=True)
    except pa.ArrowInvalid:
        for row in range(len(ids)):
            try:
                ids[row].as_py()
            except UnicodeDecodeError:
                return f"row {row}: field 'id' is not valid UTF-8"
        return "field 'id' is not valid UTF-8"
    if len(pc.unique(ids)) != len(ids):
        seen: dict[str, int] = {}
        for row, value in enumerate(ids.to_pylist()):
            if value in seen:
                return f"rows {seen[value]} and {row}: duplicate id {value!r}"
            seen[value] = row
    return None


def _duplicates_in_bucket(shard_indexes: list[int], *arrays) -> tuple[int, list[tuple[str, list[int]]]]:
    """Ids of this bucket that occur in more than one shard: (count, examples)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not arrays:
        return 0, []
    table = pa.table(
        {
            "id": pa.concat_arrays(list(arrays)),
            "shard": pa.concat_arrays([pa.array([s] * len(a), type=pa.int32()) for s, a in zip(shard_indexes, arrays)]),
        }
    )
    counts = table.group_by("id").aggregate([("shard", "count")])
    repeated = counts.filter(pc.greater(counts.column("shard_count"), 1))
    if repeated.num_rows == 0:
        return 0, []
    sample = repeated.column("id").slice(0, MAX_EXAMPLES).to_pylist()
    rows = table.filter(pc.is_in(table.column("id"), value_set=pa.array(sample, type=pa.string())))
    where: dict[str, list[int]] = {}
    for value, shard in zip(rows.column("id").to_pylist(), rows.column("shard").to_pylist()):
        where.setdefault(value, []).append(shard)
    return repeated.num_rows, [(value, sorted(where[value])) for value in sample]

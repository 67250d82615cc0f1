"""The id index (stage 2, workers).

Beside the output, one Parquet object (`OUT/_id_index.parquet`, written atomically) keeps, for every good shard of the last checked input (keyed by path, etag and
size), the 64-bit hashes of its ids: one row group per hash bucket, rows `(shard, hash,
dup_id)`, where `dup_id` holds the id itself only for rows whose hash occurs in more than one
shard (a hash hit confirmed on the ids). A run reads the `id` column only of the shards the
index does not know (new or changed). One task per bucket merges that bucket's row group (the
rows of shards still present and unchanged) with the checked shards' hashes; every hash then
found in more than one shard is confirmed on the ids themselves: the checked shards' ids, the
ids the index already carries, or, where an unchanged shard's hash is newly met, that shard's
`id` column, read for this. The note is therefore exact, the same as reading every shard's ids.
One more task writes the new index. Without an index, or with one that cannot be read or
disagrees with itself, every shard's ids are read (the full check) and the index is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ray_jobs.config import S3Config
from ray_jobs.storage import reads, uris

INDEX_NAME = "_id_index.parquet"
INDEX_KEY = "ctgscore.id_index"
INDEX_VERSION = 1
MAX_EXAMPLES = 20  # duplicate ids named in the manifest
ROW_GROUP_MAX = 1 << 20


class IndexUnusable(Exception):
    """The id index cannot be used this run (unreadable, or disagrees with itself or the input)."""


#: the most buckets an index header may claim (a run writes at most 64)
MAX_BUCKETS = 1024


def index_uri(output: str) -> str:
    return uris.join(output, INDEX_NAME)


def read_index_header(out_fs, output: str, tree: dict[str, dict] | None) -> dict[str, Any] | None:
    """The index's header (its shards, buckets and row groups) from its footer, or None when
    it is absent, unreadable or inconsistent. `tree`: a listing of the output prefix (gives
    the index's size, so one ranged GET reads the footer)."""
    uri = index_uri(output)
    listed = (tree or {}).get(uris.fs_path(uri))
    if tree is not None and listed is None:
        return None
    size = int(listed["size"]) if listed and listed.get("size") is not None else None
    footer = reads.read_footer_metadata(out_fs, uri, size)
    if footer is None:
        return None
    num_rows, metadata = footer
    try:
        header = json.loads(metadata[INDEX_KEY])
        valid = (
            header["version"] == INDEX_VERSION
            and 1 <= int(header["buckets"]) <= MAX_BUCKETS  # an edited index: numpy takes no 10**30 buckets
            and all({"file", "etag", "size", "rows"} <= entry.keys() for entry in header["shards"])
            and sum(int(entry["rows"]) for entry in header["shards"]) == num_rows
            and isinstance(header["groups"], dict)
        )
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return None
    if not valid:
        return None
    header["uri"], header["size"] = uri, size
    return header


def hash_ids(values: list[str]):
    """64-bit hashes of ids (blake2b, 8 bytes), as a numpy int64 array."""
    import numpy as np

    raw = b"".join(hashlib.blake2b(value.encode(), digest_size=8).digest() for value in values)
    return np.frombuffer(raw, dtype="<i8").astype(np.int64)


def bucket_of(hashes, buckets: int):
    import numpy as np

    return (hashes.view(np.uint64) % np.uint64(buckets)).astype(np.int64)


def read_ids(uri: str, input_root: str, s3: S3Config):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ray_jobs.storage import clients

    fs = clients.arrow_filesystem(input_root, s3)
    ids = pq.read_table(uris.fs_path(uri), columns=["id"], filesystem=fs).column("id").combine_chunks()
    if pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_decode()
    if pa.types.is_large_string(ids.type):
        ids = ids.cast(pa.string())
    return ids


def _index_schema():
    import pyarrow as pa

    return pa.schema([("shard", pa.int32()), ("hash", pa.int64()), ("dup_id", pa.string())])


def _read_group(source: dict[str, Any], s3: S3Config, bucket: int):
    """This bucket's rows of the old index (shard numbers as the old index has them)."""
    import pyarrow.parquet as pq

    from ray_jobs.storage import clients

    groups = source["groups"].get(str(bucket), [])
    if not groups:
        return _index_schema().empty_table()
    fs = clients.arrow_filesystem(source["uri"], s3)
    with fs.open_input_file(uris.fs_path(source["uri"])) as handle:
        if source["size"] is not None and handle.size() != source["size"]:
            raise ValueError(f"id index {source['uri']} changed during the run")
        table = pq.ParquetFile(handle).read_row_groups(groups)
    if table.schema.remove_metadata() != _index_schema():
        raise ValueError(f"id index {source['uri']}: unexpected columns {table.schema.names}")
    return table


def merge_bucket(bucket: int, source: dict[str, Any] | None, input_root: str, s3: S3Config, kept: dict[int, str],
                  fresh: list[int], *tables):
    """One bucket of the new index, and the cross-shard duplicates whose ids fall in it:
    (table, {"count", "examples": [(id, [positions])], "read": [positions read to confirm]})."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _index_schema()
    parts = []
    if source is not None:
        old = _read_group(source, s3, bucket)
        if old.num_rows:
            mapping = np.full(int(pc.max(old.column("shard")).as_py()) + 1, -1, dtype=np.int64)
            for before, after in source["to_position"].items():
                if before < len(mapping):
                    mapping[before] = after
            moved = mapping[old.column("shard").to_numpy()]
            keep = moved >= 0
            parts.append(pa.table({"shard": pa.array(moved[keep].astype(np.int32)),
                                   "hash": old.column("hash").filter(pa.array(keep)),
                                   "dup_id": old.column("dup_id").filter(pa.array(keep))}, schema=schema))
    for position, table in zip(fresh, tables):
        parts.append(pa.table({"shard": pa.array(np.full(table.num_rows, position, dtype=np.int32)),
                               "hash": table.column("hash"), "dup_id": table.column("id")}, schema=schema))
    table = pa.concat_tables(parts).combine_chunks() if parts else schema.empty_table()
    counts = table.group_by("hash").aggregate([("shard", "count_distinct")])
    multi = counts.filter(pc.greater(counts.column("shard_count_distinct"), 1)).column("hash")
    in_multi = pc.is_in(table.column("hash").combine_chunks(), value_set=multi.combine_chunks())
    dup = pc.if_else(in_multi, table.column("dup_id").combine_chunks(), pa.scalar(None, pa.string()))
    missing = pc.and_(in_multi, pc.is_null(dup))
    read: list[int] = []
    if pc.any(missing).as_py():
        # hashes of unchanged shards newly met elsewhere: confirm them on those shards' ids
        need = table.filter(missing)
        fills: dict[tuple[int, int], str] = {}
        for position in sorted(set(need.column("shard").to_pylist())):
            if position not in kept:
                raise ValueError(f"id index: shard {position} has unconfirmed rows but is not an unchanged shard")
            ids = read_ids(kept[position], input_root, s3)
            hashes = hash_ids(ids.to_pylist())
            wanted = need.filter(pc.equal(need.column("shard"), position)).column("hash").to_numpy()
            hit = np.nonzero(np.isin(hashes, wanted))[0]
            values = ids.take(pa.array(hit)).to_pylist()
            fills.update(((position, int(hashes[i])), value) for i, value in zip(hit, values))
            read.append(position)
        try:
            replacements = [fills[(s, h)] for s, h in zip(need.column("shard").to_pylist(), need.column("hash").to_pylist())]
        except KeyError as exc:
            raise ValueError(f"id index disagrees with the ids of {kept.get(exc.args[0][0])}") from exc
        dup = pc.replace_with_mask(dup, missing, pa.array(replacements, pa.string()))
    table = table.set_column(2, "dup_id", dup).sort_by([("shard", "ascending"), ("hash", "ascending")])
    confirmed = table.filter(pc.is_valid(table.column("dup_id")))
    groups = confirmed.group_by("dup_id").aggregate([("shard", "count_distinct"), ("shard", "distinct")])
    repeated = groups.filter(pc.greater(groups.column("shard_count_distinct"), 1)).sort_by("dup_id")
    sample = repeated.slice(0, MAX_EXAMPLES)
    examples = [(value, sorted(where)) for value, where in zip(sample.column("dup_id").to_pylist(),
                                                                 sample.column("shard_distinct").to_pylist())]
    return table, {"count": repeated.num_rows, "examples": examples, "read": read}


def write_index(output: str, s3: S3Config, entries: list[dict[str, Any]], buckets: int, *tables) -> int:
    """Write the index as one object, atomically: one or more row groups per bucket."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ray_jobs.storage import clients, writes

    groups: dict[str, list[int]] = {}
    chunks = []
    for bucket, table in enumerate(tables):
        for start in range(0, table.num_rows, ROW_GROUP_MAX):
            groups.setdefault(str(bucket), []).append(len(chunks))
            chunks.append(table.slice(start, ROW_GROUP_MAX))
    header = {"version": INDEX_VERSION, "hash": "blake2b-64", "buckets": buckets, "shards": entries, "groups": groups}
    schema = _index_schema().with_metadata({INDEX_KEY: json.dumps(header, separators=(",", ":"))})
    sink = pa.BufferOutputStream()
    # hashes sorted within each shard: their deltas bit-packed (about 7 bytes a row in all)
    with pq.ParquetWriter(sink, schema, compression="zstd", use_dictionary=["shard", "dup_id"],
                          column_encoding={"hash": "DELTA_BINARY_PACKED"}) as writer:
        for chunk in chunks:
            writer.write_table(chunk.cast(schema), row_group_size=max(1, chunk.num_rows))
    data = sink.getvalue().to_pybytes()
    uri = index_uri(output)
    writes.put_atomic(clients.fsspec_filesystem(output, s3), uri, data)
    return len(data)

"""Storage for the job: list Parquet shards (local folder or `s3://` prefix) with sizes and
etags, check each shard's schema against the canonical schema (`../shared/spec/schema.md`),
and write outputs atomically.

Paths are URIs: an absolute local path or `s3://bucket/key`. The driver uses fsspec (local or
s3fs) for listing, footers and writes; Ray Data's readers get a native `pyarrow.fs`
filesystem built from the same settings (`arrow_filesystem`). S3 settings come from the job's
`s3` section, else `$AWS_ENDPOINT_URL`; credentials from `$AWS_ACCESS_KEY_ID` /
`$AWS_SECRET_ACCESS_KEY` (or the AWS default chain), never from the config file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from ray_jobs.config import S3Config
from scoring.metric import carried_columns

STRING_COLUMNS = ("id", "dataset", "doc_id", "system", "source", "prefix", "attribute", "text", "constraint")
ALWAYS_REQUIRED = ("id", "text")


class BadShard(ValueError):
    """A shard that cannot be used: unreadable, truncated, wrong column type, bad ids."""

    def __init__(self, uri: str, reason: str):
        super().__init__(f"{uri}: {reason}")
        self.uri = uri
        self.reason = reason


@dataclass(frozen=True)
class ShardInfo:
    uri: str  # absolute local path or s3://bucket/key
    rel: str  # path relative to the input prefix: names the output file
    size: int
    etag: str  # S3 ETag, or the md5 of a local file's bytes (what S3 reports for one-part uploads)


@dataclass
class ShardCheck:
    info: ShardInfo
    num_rows: int
    columns: dict[str, str]  # column -> arrow type string
    ids: list[str] = field(default_factory=list)


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def fs_path(uri: str) -> str:
    """The path a filesystem object takes: `bucket/key` for S3, the local path otherwise."""
    return uri[len("s3://") :] if is_s3(uri) else uri


def join(uri: str, *parts: str) -> str:
    base = uri.rstrip("/")
    return "/".join([base, *[p.strip("/") for p in parts]])


def s3_settings(s3: S3Config) -> dict[str, Any]:
    endpoint = s3.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    return {
        "endpoint_url": endpoint,
        "region": s3.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        "key": os.environ.get("AWS_ACCESS_KEY_ID"),
        "secret": os.environ.get("AWS_SECRET_ACCESS_KEY"),
    }


def fsspec_filesystem(uri: str, s3: S3Config):
    """fsspec filesystem for the driver: s3fs (listing cache invalidated by callers) or local."""
    if not is_s3(uri):
        import fsspec

        return fsspec.filesystem("file")
    import s3fs

    settings = s3_settings(s3)
    kwargs: dict[str, Any] = {"skip_instance_cache": True}
    if settings["key"] and settings["secret"]:
        kwargs.update(key=settings["key"], secret=settings["secret"])
    if settings["endpoint_url"]:
        # no region_name here: with a custom endpoint it breaks bucket creation (infra.md)
        kwargs["client_kwargs"] = {"endpoint_url": settings["endpoint_url"]}
    return s3fs.S3FileSystem(**kwargs)


def arrow_filesystem(uri: str, s3: S3Config):
    """Native pyarrow filesystem for Ray Data's readers (picklable; carries its settings to
    the read tasks, so workers need no AWS environment of their own)."""
    import pyarrow.fs as pafs

    if not is_s3(uri):
        return pafs.LocalFileSystem()
    settings = s3_settings(s3)
    kwargs: dict[str, Any] = {"region": settings["region"]}
    if settings["key"] and settings["secret"]:
        kwargs.update(access_key=settings["key"], secret_key=settings["secret"])
    if settings["endpoint_url"]:
        parsed = urlparse(settings["endpoint_url"])
        kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme or "https")
    return pafs.S3FileSystem(**kwargs)


def _md5(fs, path: str) -> str:
    digest = hashlib.md5()
    with fs.open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def list_shards(uri: str, fs) -> list[ShardInfo]:
    """Every `*.parquet` under a folder/prefix (recursive, sorted), with size and etag.
    A single `.parquet` file is a one-shard dataset."""
    if is_s3(uri):
        fs.invalidate_cache()
    root = fs_path(uri).rstrip("/")
    if not fs.exists(root):
        raise FileNotFoundError(f"input {uri} does not exist")
    if fs.isfile(root):
        entries = {root: fs.info(root)}
        root = root.rsplit("/", 1)[0]
    else:
        entries = fs.find(root, detail=True)
    shards = []
    for path, info in sorted(entries.items()):
        name = path.rsplit("/", 1)[-1]
        if not name.endswith(".parquet") or name.startswith((".", "_")):
            continue
        rel = path[len(root) :].lstrip("/")
        if is_s3(uri):
            etag = str(info.get("ETag") or info.get("etag") or "").strip('"') or _md5(fs, path)
            full = "s3://" + path
        else:
            etag = _md5(fs, path)
            full = path
        shards.append(ShardInfo(uri=full, rel=rel, size=int(info.get("size") or 0), etag=etag))
    return shards


def _type_ok(column: str, dtype: pa.DataType) -> str | None:
    """None when `dtype` fits the canonical type of `column`, else the expected type."""
    if column in STRING_COLUMNS:
        return None if (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)) else "string"
    if column == "references":
        ok = (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)) and (
            pa.types.is_string(dtype.value_type) or pa.types.is_large_string(dtype.value_type)
        )
        return None if ok else "list<string>"
    if column == "attributes":
        return None if pa.types.is_map(dtype) else "map<string,string>"
    if column.startswith("human_"):
        return None if (pa.types.is_floating(dtype) or pa.types.is_integer(dtype)) else "float64"
    return None


def check_shard(info: ShardInfo, fs, needed: tuple[str, ...], read_ids: bool = True) -> ShardCheck:
    """Schema check of one shard before any work starts: the footer must be readable, `id`
    and `text` present, every column the job reads or carries (`needed`, `dataset`, `system`,
    `doc_id`, `human_*`) must have its canonical type, and ids
    must be non-null and unique within the shard. Raises `BadShard` naming file and field."""
    path = fs_path(info.uri)
    try:
        with fs.open(path, "rb") as handle:
            parquet = pq.ParquetFile(handle)
            schema = parquet.schema_arrow
            num_rows = parquet.metadata.num_rows
            columns = {name: str(schema.field(name).type) for name in schema.names}
            for column in ALWAYS_REQUIRED:
                if column not in columns:
                    raise BadShard(info.uri, f"missing required column '{column}' (has: {', '.join(schema.names)})")
            carried = [c for c in carried_columns(columns) if c != "id"]
            for column in dict.fromkeys([*needed, *carried]):
                if column in columns:
                    expected = _type_ok(column, schema.field(column).type)
                    if expected is not None:
                        raise BadShard(
                            info.uri, f"column '{column}' has type {schema.field(column).type}, expected {expected}"
                        )
            ids: list[str] = []
            if read_ids:
                id_column = parquet.read(columns=["id"]).column("id")
                if id_column.null_count:
                    row = id_column.to_pylist().index(None)
                    raise BadShard(info.uri, f"row {row}: null field 'id' (every row needs an id)")
                ids = id_column.to_pylist()
                if len(set(ids)) != len(ids):
                    seen: dict[str, int] = {}
                    for row, value in enumerate(ids):
                        if value in seen:
                            raise BadShard(info.uri, f"rows {seen[value]} and {row}: duplicate id {value!r}")
                        seen[value] = row
    except BadShard:
        raise
    except Exception as exc:  # noqa: BLE001 - any read failure names the shard
        raise BadShard(info.uri, f"unreadable Parquet ({type(exc).__name__}: {exc})") from exc
    return ShardCheck(info=info, num_rows=num_rows, columns=columns, ids=ids)


def table_bytes(table: pa.Table, metadata: dict[str, str] | None = None) -> bytes:
    if metadata:
        existing = table.schema.metadata or {}
        table = table.replace_schema_metadata({**existing, **{k.encode(): v.encode() for k, v in metadata.items()}})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def put_atomic(fs, uri: str, data: bytes) -> None:
    """Write a whole object so readers see the old file or the new one, never a part:
    local files go through a temp file + `os.replace`; an S3 PUT is atomic by itself."""
    path = fs_path(uri)
    if is_s3(uri):
        fs.pipe_file(path, data)
        return
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, target)


def put_json_atomic(fs, uri: str, value: Any) -> None:
    put_atomic(fs, uri, (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode())


def list_outputs(fs, uri: str) -> list[str]:
    """Committed output files under a prefix (temp files start with '.', so they never count)."""
    path = fs_path(uri)
    if is_s3(uri):
        fs.invalidate_cache()
    if not fs.exists(path):
        return []
    found = []
    for item in sorted(fs.find(path)):
        name = item.rsplit("/", 1)[-1]
        if name.endswith(".parquet") and not name.startswith("."):
            found.append("s3://" + item if is_s3(uri) else item)
    return found


def read_footer_metadata(fs, uri: str) -> tuple[int, dict[str, str]] | None:
    """(num_rows, key-value metadata) of a Parquet file, or None when it cannot be read."""
    try:
        with fs.open(fs_path(uri), "rb") as handle:
            meta = pq.read_metadata(handle)
    except Exception:  # noqa: BLE001 - an unreadable old output is simply not reused
        return None
    raw = meta.metadata or {}
    return meta.num_rows, {k.decode(): v.decode() for k, v in raw.items() if not k.startswith(b"ARROW")}


def read_table(fs, uri: str, columns: list[str] | None = None) -> pa.Table:
    with fs.open(fs_path(uri), "rb") as handle:
        return pq.read_table(io.BytesIO(handle.read()), columns=columns)


def remove(fs, uri: str) -> None:
    fs.rm(fs_path(uri))

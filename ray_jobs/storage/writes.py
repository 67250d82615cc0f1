"""Writes under an output prefix: whole objects atomically (readers see the old file or the
new one, never a part), the write probe before any scoring, removal of temp files that
crashed runs left, renaming a staged object into place, and removal of superseded outputs."""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ray_jobs.storage.failures import guarded, storage_error
from ray_jobs.storage.listing import list_tree, require_bucket
from ray_jobs.storage.uris import fs_path, is_s3, join, to_uri
from scoring import atomic_files
from scoring.atomic_files import is_temp_name, temp_name  # temp objects: `.<name>.tmp-<hex>`, hidden
from scoring.errors import StorageError

PROBE_NAME = ".ctgscore-probe"


def table_bytes(table: pa.Table, metadata: dict[str, str] | None = None) -> bytes:
    if metadata:
        existing = table.schema.metadata or {}
        table = table.replace_schema_metadata({**existing, **{k.encode(): v.encode() for k, v in metadata.items()}})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def put_atomic(fs, uri: str, data: bytes) -> str | None:
    """Write a whole object so readers see the old file or the new one, never a part:
    local files go through a temp file + `os.replace` (`scoring.atomic_files`: fsynced, the
    temp file removed on any failure); an S3 PUT is atomic by itself. Failures raise `StorageError` naming the path.
    Returns the ETag S3 gave the object (quotes stripped; None on local disk, or when the
    response names none): the md5 of `data` only where the bucket stores it so (docs/job.md)."""
    if is_s3(uri):
        response = guarded(uri, "write", lambda: fs.pipe_file(fs_path(uri), data))
        etag = response.get("ETag") if isinstance(response, dict) else None
        return etag.strip('"') if isinstance(etag, str) and etag.strip('"') else None
    target = pathlib.Path(fs_path(uri))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_files.write_bytes(target, data)
    except OSError as exc:
        raise storage_error(exc, uri, "write") from exc
    return None


def put_json_atomic(fs, uri: str, value: Any) -> None:
    put_atomic(fs, uri, (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode())


def probe_writable(fs, uri: str) -> None:
    """Before any scoring: create and delete a small probe object under the output prefix
    (creating the local folder if needed). Raises `StorageError` naming the path or bucket:
    missing bucket, read-only or full file system, permission denied, unreachable endpoint."""
    probe = join(uri, temp_name(PROBE_NAME.lstrip(".")))
    if is_s3(uri):
        guarded(uri, "use output", lambda: require_bucket(fs, uri))
    else:
        guarded(uri, "create output folder", lambda: pathlib.Path(fs_path(uri)).mkdir(parents=True, exist_ok=True))
    try:
        put_atomic(fs, probe, b"ctgscore write probe\n")
    except StorageError as exc:
        raise StorageError(str(exc).replace(f"cannot write {probe}", f"output {uri} is not writable")) from exc
    guarded(probe, "remove write probe", lambda: fs.rm(fs_path(probe)))


def clean_leftovers(fs, uri: str, older_than_s: float = 0.0, tree: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Remove temp files (`.<name>.tmp-<hex>`, write probes included) that crashed runs left
    under an output prefix; returns the removed URIs. `older_than_s` spares younger ones
    (for stores shared with a writer that is still running). `tree`: a listing of the prefix
    already made (`listing.list_tree`), else one is made."""
    tree = list_tree(fs, uri) if tree is None else tree

    def run() -> list[str]:
        removed = []
        now = time.time()
        for item, info in sorted(tree.items()):
            if not is_temp_name(item.rsplit("/", 1)[-1]):
                continue
            if older_than_s and now - _mtime(info, now) < older_than_s:
                continue
            fs.rm(item)
            removed.append(to_uri(item, uri))
        return removed

    return guarded(uri, "clean temp files under", run)


def _mtime(info: dict, default: float) -> float:
    value = info.get("mtime") or info.get("LastModified") or info.get("created")
    if value is None:
        return default
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


def copy_atomic(fs, source: str, target: str) -> None:
    """Copy one object under the output prefix (`put_atomic` of its bytes): a part reused
    under a renamed input's folder."""
    data = guarded(source, "read", lambda: fs.cat_file(fs_path(source)))
    put_atomic(fs, target, data)


def move_into_place(fs, source: str, target: str) -> None:
    """Give the object `source` the name `target`, replacing what `target` held; readers of
    `target` see the old object or the new one, never a part. Local: `os.replace` (one atomic
    rename). S3 has no rename: a server-side copy (one CopyObject, atomic for `target`) then the
    removal of `source`; stopped between the two, both names hold the same bytes."""
    if is_s3(source):
        guarded(target, "write", lambda: fs.copy(fs_path(source), fs_path(target)))
        remove(fs, source)
        return
    try:
        pathlib.Path(fs_path(source)).replace(fs_path(target))
    except OSError as exc:
        raise storage_error(exc, target, "write") from exc


def remove(fs, uri: str) -> None:
    guarded(uri, "remove", lambda: fs.rm(fs_path(uri)))

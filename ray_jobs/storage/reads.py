"""Reads: a Parquet file's footer in one ranged GET (its tail), a part's footer with the md5 of
its bytes, whole Parquet files, JSON."""

from __future__ import annotations

import hashlib
import io
import json
import struct
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from ray_jobs.storage.failures import guarded, is_transient, storage_error
from ray_jobs.storage.uris import fs_path
from scoring.parquet_read import read_parquet_here

# Parquet read through a Python file object (an fsspec handle, BytesIO) hands Arrow buffers
# that wrap Python bytes; releasing one takes the GIL. Decoded on Arrow's thread pool, the last
# release can happen on a pool thread after the read returned, and if the interpreter is
# already finalising (a run that fails right after a check) that thread is killed inside a C++
# destructor: `terminate called without an active exception`, exit code 134. Decoding on the
# calling thread without pre-buffering keeps every such release on the caller; `pq.read_table`
# does not (its dataset scanner decodes on Arrow's pool even then): see scoring.parquet_read.
PYTHON_FILE_READS = {"use_threads": False, "pre_buffer": False}

FOOTER_TAIL = 64 << 10  # bytes read from a file's end: a part's footer is a few KiB
# the largest footer read (parts and id index files: ctgscore's own, a few KiB); a file put in
# their place may declare up to 4 GiB, which would be read into the driver's memory whole
MAX_FOOTER_BYTES = 64 << 20
MAGIC = b"PAR1"

Footer = tuple[int, dict[str, str]]


def read_footer_metadata(fs, uri: str, size: int | None = None) -> Footer | None:
    """(num_rows, key-value metadata) of a Parquet file, or None when the file is missing or
    not valid Parquet. One ranged GET of the file's tail (a second one, of the footer alone,
    only for a footer over 64 KiB); `size` (from a listing) turns the suffix range into a plain one.
    Unreachable storage (after retries) or a denied permission raises `StorageError`: an
    output that cannot be read now is not the same as a bad one."""
    try:
        meta = _footer(fs, fs_path(uri), size)
    except Exception as exc:  # noqa: BLE001 - an unreadable old output is simply not reused
        if is_transient(exc) or isinstance(exc, PermissionError):
            raise storage_error(exc, uri, "read footer of") from exc
        return None
    text = footer_text_metadata(meta)
    return None if text is None else (meta.num_rows, text)


def footer_text_metadata(meta: pq.FileMetaData) -> dict[str, str] | None:
    """A footer's key-value metadata as text, Arrow's own schema entry left out; None when a key
    or value is not UTF-8 (an edited footer: not one this job wrote, so not reused)."""
    try:
        return {k.decode(): v.decode() for k, v in (meta.metadata or {}).items() if not k.startswith(b"ARROW")}
    except UnicodeDecodeError:
        return None


class PartRead(NamedTuple):
    footer: pq.FileMetaData | None  # None when the file is missing or not valid Parquet
    md5: str | None  # of its bytes, when hashed and readable
    missing: bool = False  # gone since the listing


def read_footer_and_md5(fs, uri: str, size: int, *, hashed: bool) -> PartRead:
    """A Parquet file's footer and the md5 of its bytes (`PartRead`). With `hashed` the whole file is read once in chunks and hashed, then its
    footer read from its tail; without, only the tail is read (one ranged GET, as
    `read_footer_metadata`) and the md5 is None: an S3 ETag is not always the md5 of the bytes
    (SSE-KMS, SSE-C, multipart uploads), so the caller decides what vouches for them
    (`ray_jobs.job.part_check`). Unreachable storage raises `StorageError`, as `read_footer_metadata`."""
    path = fs_path(uri)
    digest = None
    if hashed:
        try:
            digest = _streamed_md5(fs, path)  # in chunks: a file put in a part's place may be of any size
        except FileNotFoundError:
            return PartRead(None, None, missing=True)  # gone since the listing: its rows are simply scored again
        except Exception as exc:  # noqa: BLE001 - an unreadable old output is simply not reused
            if is_transient(exc) or isinstance(exc, PermissionError):
                raise storage_error(exc, uri, "read footer of") from exc
            return PartRead(None, None)
    try:
        return PartRead(_footer(fs, path, size), digest)
    except FileNotFoundError:
        return PartRead(None, None, missing=True)
    except Exception as exc:  # noqa: BLE001 - not Parquet: not reused
        if is_transient(exc) or isinstance(exc, PermissionError):
            raise storage_error(exc, uri, "read footer of") from exc
        return PartRead(None, digest)


HASH_CHUNK = 8 << 20  # bytes per read while hashing a part: memory stays bounded whatever its size


def _streamed_md5(fs, path: str) -> str:
    digest = hashlib.md5()
    with fs.open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _footer(fs, path: str, size: int | None):
    start = max(0, size - FOOTER_TAIL) if size is not None else -FOOTER_TAIL
    tail = fs.cat_file(path, start=start)
    if len(tail) < 12 or tail[-4:] != MAGIC:
        raise ValueError("not a Parquet file (no footer magic)")
    length = struct.unpack("<I", tail[-8:-4])[0]
    if length > MAX_FOOTER_BYTES:  # a file ctgscore wrote has a footer of a few KiB; this one would be read whole
        raise ValueError(f"a Parquet footer of {length:,} bytes (at most {MAX_FOOTER_BYTES:,} read)")
    if length + 8 > len(tail):  # a footer longer than the tail: one more ranged GET, of the footer only
        if size is not None and length + 8 > size:
            raise ValueError("truncated Parquet footer")
        tail = fs.cat_file(path, start=size - length - 8 if size is not None else -(length + 8))
        if length + 8 > len(tail):
            raise ValueError("truncated Parquet footer")
    return pq.read_metadata(pa.BufferReader(MAGIC + tail[-(length + 8) :]))


def read_table(fs, uri: str, columns: list[str] | None = None) -> pa.Table:
    """A whole Parquet file (or some columns), decoded on the calling thread."""

    def run() -> pa.Table:
        with fs.open(fs_path(uri), "rb") as handle:
            return read_parquet_here(io.BytesIO(handle.read()), columns=columns)

    return guarded(uri, "read", run)


def read_json(fs, uri: str) -> Any | None:
    """A JSON object, or None when it is missing or unreadable."""
    try:
        return json.loads(fs.cat_file(fs_path(uri)))
    except Exception:  # noqa: BLE001 - absent or unreadable: the caller falls back
        return None

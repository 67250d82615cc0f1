"""Listings: the input shards and the output files under a prefix, each with its size and
etag, from one paged LIST per prefix (no HEAD per object). A missing input raises
`MissingInput`; an unreachable or forbidden store raises `StorageError` naming the bucket."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Any

from ray_jobs.storage.failures import guarded
from ray_jobs.storage.parallel import map_bounded
from ray_jobs.storage.uris import bucket_of, fs_path, is_s3, to_uri
from scoring.errors import InputError, StorageError
from scoring.schema import is_data_file


class MissingInput(InputError, FileNotFoundError):
    """The input folder, prefix or file does not exist."""


@dataclass(frozen=True)
class ShardInfo:
    uri: str  # absolute local path or s3://bucket/key
    rel: str  # path relative to the input prefix: names the output file
    size: int
    etag: str  # S3 ETag, or the md5 of a local file's bytes (what S3 reports for one-part uploads)


@dataclass(frozen=True)
class ListedFile:
    uri: str
    size: int
    etag: str  # S3 ETag; for a local file its modification time (a rewrite changes it)


def list_tree(fs, uri: str) -> dict[str, dict[str, Any]]:
    """Every object under a prefix (path -> listing info), temp files included; {} when the
    prefix holds nothing. On S3: one LIST of the prefix's top level, then each folder under
    it (one per metric) listed in parallel, paged; a missing bucket raises `StorageError`."""
    return guarded(uri, "list", lambda: _tree(fs, uri))


def _tree(fs, uri: str) -> dict[str, dict[str, Any]]:
    path = fs_path(uri).rstrip("/")
    if not is_s3(uri):
        return dict(fs.find(path, detail=True)) if fs.exists(path) else {}
    fs.invalidate_cache()
    try:
        top = fs.ls(path, detail=True)
    except FileNotFoundError:
        require_bucket(fs, uri)
        return {}
    tree = {entry["name"]: entry for entry in top if entry.get("type") != "directory"}
    folders = [entry["name"] for entry in top if entry.get("type") == "directory"]
    for found in map_bounded(lambda folder: fs.find(folder, detail=True), folders):
        tree.update(found)
    return tree


def relist(fs, uri: str, tree: dict[str, dict[str, Any]], folders) -> dict[str, dict[str, Any]]:
    """`tree` (a listing of the prefix `uri`) with everything under `folders` listed again, the
    folders in parallel: what the prefix holds now, when every write and removal since `tree`
    was made happened in those folders."""
    paths = sorted({fs_path(folder).rstrip("/") for folder in folders})
    if not paths:
        return tree

    def run() -> dict[str, dict[str, Any]]:
        if is_s3(uri):
            fs.invalidate_cache()
        inside = tuple(path + "/" for path in paths)
        fresh = {path: info for path, info in tree.items() if not path.startswith(inside)}
        for found in map_bounded(lambda path: fs.find(path, detail=True) if fs.exists(path) or is_s3(uri) else {}, paths):
            fresh.update(found)
        return fresh

    return guarded(uri, "list", run)


def require_bucket(fs, uri: str) -> None:
    """A missing bucket is named instead of its key. A role allowed to use a prefix but not
    to look at the bucket (403 here) is not refused: the operation that follows says whether
    it may read or write."""
    bucket = bucket_of(uri)
    try:
        fs.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError as exc:
        raise StorageError(f"cannot use {uri}: bucket '{bucket}' does not exist") from exc
    except PermissionError:
        pass


def _md5(fs, path: str) -> str:
    digest = hashlib.md5()
    with fs.open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Shards(list):
    """The input shards (`ShardInfo`), and `not_read`: the files under the input named like
    Parquet that are no shard (`looks_like_parquet`, `in_hidden_folder`), so the job can say it
    left them out."""

    def __init__(self, shards=(), not_read=(), unusable=()):
        super().__init__(shards)
        self.not_read = list(not_read)
        self.unusable = list(unusable)  # (uri, rel, why): names that are no regular file (`_not_a_file`), no UTF-8 (`_not_utf8`) or no safe key (`unsafe_key`)


def looks_like_parquet(path: str) -> bool:
    """A name a person may have meant as a shard although it is none: `.PARQUET`, `.parq`,
    `.pq`, or a `*.parquet` hidden by a leading `.` or `_` (`is_data_file`)."""
    return not is_data_file(path) and path.rsplit("/", 1)[-1].lower().endswith((".parquet", ".parq", ".pq"))


def in_hidden_folder(rel: str) -> bool:
    """Whether a path under the input lies in a folder whose name starts with `.` or `_`: Parquet
    dataset readers (`pd.read_parquet`, `pyarrow.dataset`) skip such folders, in the input and in
    the output folder that would mirror it, so its files are no shards (`Shards.not_read`)."""
    return any(name.startswith((".", "_")) for name in rel.split("/")[:-1])


def not_read_note(not_read: list[str]) -> str:
    """The files `Shards.not_read` as a note for a message ('' when none)."""
    if not not_read:
        return ""
    more = f" and {len(not_read) - 3} more" if len(not_read) > 3 else ""
    return (f"{len(not_read)} file(s) named like Parquet not read, as only *.parquet names not starting with '.' "
            f"or '_', in folders whose names do not either, are shards: {', '.join(not_read[:3])}{more}")


def list_shards(uri: str, fs) -> Shards:
    """Every `*.parquet` under a folder/prefix (recursive, sorted), with size and etag.
    A single `.parquet` file is a one-shard dataset."""
    return guarded(uri, "list input", lambda: _list_shards(uri, fs))


def _list_shards(uri: str, fs) -> Shards:
    root = fs_path(uri).rstrip("/")
    entries = _tree(fs, uri)
    if not entries or root in entries:
        if is_s3(uri):
            require_bucket(fs, uri)
        if not fs.exists(root):
            raise MissingInput(f"input {uri} does not exist")
        if fs.isfile(root):
            entries = {root: fs.info(root)}
            root = root.rsplit("/", 1)[0]
    shards = Shards(not_read=[to_uri(path, uri) for path in sorted(entries) if looks_like_parquet(path)])
    for path, info in sorted(entries.items()):
        if not is_data_file(path):
            continue
        rel = path[len(root) :]
        rel = rel[1:] if rel.startswith("/") else rel  # `root//x.parquet` keeps its empty name: no other shard's rel
        why = unsafe_key(rel) if is_s3(uri) else _not_utf8(rel) or (None if info.get("type") == "file" else _not_a_file(path))
        if why is None and in_hidden_folder(rel):
            shards.not_read.append(to_uri(path, uri))
            continue
        if why is not None:
            shards.unusable.append((to_uri(path, uri), rel, why))
            continue
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"') if is_s3(uri) else ""
        shards.append(ShardInfo(uri=to_uri(path, uri), rel=rel, size=int(info.get("size") or 0), etag=etag or _md5(fs, path)))
    return shards


def unsafe_key(rel: str) -> str | None:
    """Why an S3 key (`rel`: its part under the input prefix) is no shard, or None. A key is
    any string, but Arrow's S3 reader (the workers') resolves `.` and `..` names (`in/../x`
    reads the object `x`, outside the input; `in/./a` reads `in/a`, another shard) and refuses
    an empty one (`in//a`), and s3fs and Arrow take a key ending in `/` for a folder: the check
    would read one object and the workers another, or none. Each such key is one bad shard,
    named, whatever the output is."""
    if rel.endswith("/"):
        return "its key ends in '/' (a folder marker holding bytes), which S3 readers take for a folder: not read; rename it"
    if any(name in ("", ".", "..") for name in rel.split("/")):
        return ("its key has an empty, '.' or '..' name between slashes ('a//b', './b', '../b'), which Arrow's S3 "
                "reader resolves to another key (or refuses): not read; rename it")
    return None


def _not_utf8(rel: str) -> str | None:
    """Why a local name of bytes that are not UTF-8 (held as lone surrogates) is no shard: the
    parts' footers, which record the input path, hold UTF-8 only."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not valid UTF-8 (shown with \\udcXX escapes for the bytes): not read; rename it"
    return None


def _not_a_file(path: str) -> str | None:
    """Why a local name listed as no plain file (a symlink, FIFO, socket or device) is no shard,
    or None when it is a symlink to a regular file (read as that file). Reading a FIFO would
    wait forever and a symlink in a loop or to nowhere would fail the whole listing, so each is
    one bad shard naming itself."""
    try:
        found = os.stat(path)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or type(exc).__name__} (a symbolic link that leads nowhere or in a loop)"
    if stat.S_ISREG(found.st_mode):
        return None
    if stat.S_ISDIR(found.st_mode):
        return "a symbolic link to a folder, which the listing does not follow: not read"
    return "not a regular file (a FIFO, socket or device): not read"


def output_files(uri: str, tree: dict[str, dict[str, Any]]) -> list[ListedFile]:
    """Committed output files of a listing under `uri` (temp files start with '.', so they
    never count), sorted."""
    prefix = fs_path(uri).rstrip("/") + "/"
    found = []
    for path, info in sorted(tree.items()):
        name = path.rsplit("/", 1)[-1]
        if path.startswith(prefix) and name.endswith(".parquet") and not name.startswith("."):
            found.append(ListedFile(to_uri(path, uri), int(info.get("size") or 0), _stamp(info, uri)))
    return found


def list_outputs(fs, uri: str) -> list[ListedFile]:
    """Committed output files under a prefix, from one listing."""
    return output_files(uri, list_tree(fs, uri))


def _stamp(info: dict[str, Any], uri: str) -> str:
    if is_s3(uri):
        return str(info.get("ETag") or info.get("etag") or "").strip('"')
    return f"mtime:{float(info.get('mtime') or 0):.9f}"

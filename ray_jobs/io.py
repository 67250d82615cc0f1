"""Storage for the job: list Parquet shards (local folder or `s3://` prefix) with sizes and
etags, check each shard's schema against the canonical schema (`scoring/schema.py`), write
outputs atomically, and turn storage failures into one-line `StorageError`s.

Paths are URIs: an absolute local path or `s3://bucket/key`. The driver uses fsspec (local or
s3fs) for listing, footers and writes; Ray Data's readers get a native `pyarrow.fs`
filesystem built from the same settings (`arrow_filesystem`). S3 settings come from the job's
`s3` section, else `$AWS_ENDPOINT_URL`. Credentials are never passed explicitly: every
process (driver, read task, actor) finds its own through the AWS default chain (environment,
shared config files, instance or pod role), so no credential is ever pickled into a task.

Transient S3 failures (connection resets, timeouts, throttling, 5xx) are retried with
exponential backoff by botocore (s3fs) and by the AWS SDK (pyarrow) before an operation
fails; see `docs/failures.md` for what each failure does to a run.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import pathlib
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from ray_jobs.config import S3Config
from scoring.errors import CtgscoreError, InputError, StorageError
from scoring.schema import REQUIRED_COLUMNS, STRING_COLUMNS, carried_columns, expected_input_type

ALWAYS_REQUIRED = REQUIRED_COLUMNS
__all__ = ["STRING_COLUMNS", "ALWAYS_REQUIRED"]  # re-exported for older callers

# Attempts per S3 request (first try included) with botocore's / the AWS SDK's "standard"
# retry mode: exponential backoff with jitter, on connection errors, timeouts, throttling
# and 5xx answers. `$CTGSCORE_S3_MAX_ATTEMPTS` overrides it (a job's `s3.max_attempts` too).
S3_MAX_ATTEMPTS = 6
S3_CONNECT_TIMEOUT_S = 10.0
S3_READ_TIMEOUT_S = 60.0

TEMP_MARKER = ".tmp-"  # temp objects are named `.<name>.tmp-<hex>`: hidden, never an output
PROBE_NAME = ".ctgscore-probe"
_TEMP_NAME = re.compile(r"^\..+\.tmp-[0-9a-z]+$")

T = TypeVar("T")


class BadShard(ValueError):
    """A shard that cannot be used: unreadable, truncated, wrong column type, bad ids.
    `transient` is True when storage failed (after retries) rather than the file itself:
    the shard may be fine on the next run, so its committed output must be kept."""

    def __init__(self, uri: str, reason: str, transient: bool = False):
        super().__init__(f"{uri}: {reason}")
        self.uri = uri
        self.reason = reason
        self.transient = transient


class MissingInput(InputError, FileNotFoundError):
    """The input folder, prefix or file does not exist."""


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


def bucket_of(uri: str) -> str | None:
    return fs_path(uri).split("/", 1)[0] if is_s3(uri) else None


# ---------------------------------------------------------------------------------------
# filesystems


def max_attempts(s3: S3Config | None = None) -> int:
    configured = getattr(s3, "max_attempts", None) if s3 is not None else None
    if configured:
        return int(configured)
    return int(os.environ.get("CTGSCORE_S3_MAX_ATTEMPTS") or S3_MAX_ATTEMPTS)


def s3_settings(s3: S3Config) -> dict[str, Any]:
    """Endpoint and region for S3 clients. No credentials: each process takes its own from
    the AWS default chain, so none is serialised with a filesystem object."""
    endpoint = s3.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    return {
        "endpoint_url": endpoint,
        "region": s3.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
    }


def fsspec_filesystem(uri: str, s3: S3Config):
    """fsspec filesystem for the driver: s3fs (listing cache invalidated by callers) or local.
    botocore retries each request (`standard` mode, `max_attempts(s3)` attempts)."""
    if not is_s3(uri):
        import fsspec

        return fsspec.filesystem("file")
    import s3fs

    settings = s3_settings(s3)
    attempts = max_attempts(s3)
    kwargs: dict[str, Any] = {
        "skip_instance_cache": True,
        "config_kwargs": {
            "retries": {"max_attempts": attempts, "mode": "standard"},
            "connect_timeout": S3_CONNECT_TIMEOUT_S,
            "read_timeout": S3_READ_TIMEOUT_S,
        },
    }
    if settings["endpoint_url"]:
        # no region_name here: with a custom endpoint it breaks bucket creation
        kwargs["client_kwargs"] = {"endpoint_url": settings["endpoint_url"]}
    fs = s3fs.S3FileSystem(**kwargs)
    fs.retries = 2  # s3fs's own loop around botocore's: keep the product of both bounded
    return fs


def arrow_filesystem(uri: str, s3: S3Config):
    """Native pyarrow filesystem for Ray Data's readers. It is pickled into read tasks, so it
    carries only the endpoint, region, timeouts and retry strategy, never a credential: each
    read task's AWS SDK finds credentials in its own process (node environment, instance or
    pod role)."""
    import pyarrow.fs as pafs

    if not is_s3(uri):
        return pafs.LocalFileSystem()
    settings = s3_settings(s3)
    kwargs: dict[str, Any] = {
        "region": settings["region"],
        "connect_timeout": S3_CONNECT_TIMEOUT_S,
        "request_timeout": S3_READ_TIMEOUT_S,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=max_attempts(s3)),
    }
    if settings["endpoint_url"]:
        parsed = urlparse(settings["endpoint_url"])
        kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme or "https")
    return pafs.S3FileSystem(**kwargs)


# ---------------------------------------------------------------------------------------
# classifying failures

_TRANSIENT_TEXT = (
    "NETWORK_CONNECTION",
    "curlCode",
    "SLOW_DOWN",
    "SlowDown",
    "Throttl",
    "SERVICE_UNAVAILABLE",
    "ServiceUnavailable",
    "INTERNAL_FAILURE",
    "InternalError",
    "RequestTimeout",
    "REQUEST_TIMEOUT",
    "Connection reset",
    "Connection was closed",
    "Could not connect",
    "Server disconnected",
    "timed out",
    "Timeout",
    "IncompleteRead",
    "Response payload is not completed",
)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_transient(exc: BaseException) -> bool:
    """Whether a storage failure may go away on its own (network, timeout, throttling, 5xx),
    as opposed to a missing object, a denied permission or bad bytes."""
    try:
        from botocore.exceptions import ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError
    except ImportError:  # pragma: no cover - s3fs not installed: local files only
        ClientError = BotoConnectionError = HTTPClientError = ()  # noqa: N806
    for item in _chain(exc):
        if isinstance(item, StorageError):
            return bool(getattr(item, "transient", False))
        if isinstance(item, (ConnectionError, TimeoutError, BotoConnectionError, HTTPClientError)):
            return True
        if ClientError and isinstance(item, ClientError):
            status = item.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            code = str(item.response.get("Error", {}).get("Code", ""))
            return status >= 500 or code in ("SlowDown", "Throttling", "RequestTimeout", "ServiceUnavailable")
        if type(item).__module__.startswith("aiohttp") or isinstance(item, EOFError):
            return True
        text = str(item)
        if any(marker in text for marker in _TRANSIENT_TEXT):
            return True
    return False


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reason(exc: BaseException, uri: str) -> str:
    """A short, one-line reason for a storage failure on `uri` (no traceback, no secrets)."""
    bucket = bucket_of(uri)
    text = str(exc)
    code = getattr(exc, "errno", None)
    if "bucket does not exist" in text or "NoSuchBucket" in text or "NO_SUCH_BUCKET" in text:
        return f"bucket '{bucket}' does not exist"
    if isinstance(exc, PermissionError) or code == errno.EACCES or code == errno.EPERM or "AccessDenied" in text or "ACCESS_DENIED" in text:
        return "permission denied"
    if code == errno.EROFS:
        return "read-only file system"
    if code == errno.ENOSPC:
        return "no space left on device"
    if code == errno.EDQUOT:
        return "disk quota exceeded"
    if isinstance(exc, FileNotFoundError) or code == errno.ENOENT:
        return "no such file or object"
    if is_transient(exc):
        endpoint = ""
        match = re.search(r"(https?://[^/\"' ]+)", text)
        if match:
            endpoint = f" at {match.group(1)}"
        return f"storage unreachable{endpoint} after {max_attempts()} attempts ({_one_line(type(exc).__name__ + ': ' + text, 160)})"
    if isinstance(exc, OSError) and exc.strerror:
        return _one_line(exc.strerror)
    return _one_line(f"{type(exc).__name__}: {text}")


def storage_error(exc: BaseException, uri: str, action: str) -> StorageError:
    """A one-line `StorageError` naming what was done to which path/bucket/key and why;
    `.transient` says whether retrying later may help."""
    if isinstance(exc, StorageError):
        return exc
    error = StorageError(f"cannot {action} {uri}: {_reason(exc, uri)}")
    error.transient = is_transient(exc)
    error.uri = uri
    return error


def _guarded(uri: str, action: str, operation: Callable[[], T]) -> T:
    try:
        return operation()
    except CtgscoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - every storage failure names its path
        if _is_storage_failure(exc):
            raise storage_error(exc, uri, action) from exc
        raise


def _is_storage_failure(exc: BaseException) -> bool:
    if isinstance(exc, OSError) or is_transient(exc):
        return True
    module = type(exc).__module__
    return module.startswith(("botocore", "aiobotocore", "s3fs", "aiohttp"))


# ---------------------------------------------------------------------------------------
# listing and checking inputs

# Parquet read through a Python file object (an fsspec handle, BytesIO) hands Arrow buffers
# that wrap Python bytes; releasing one takes the GIL. Decoded on Arrow's thread pool, the last
# release can happen on a pool thread after the read returned, and if the interpreter is
# already finalising (a run that fails right after a check) that thread is killed inside a C++
# destructor: `terminate called without an active exception`, exit code 134. Decoding on the
# calling thread without pre-buffering keeps every such release on the caller.
_PYTHON_FILE_READS = {"use_threads": False, "pre_buffer": False}


def _md5(fs, path: str) -> str:
    digest = hashlib.md5()
    with fs.open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def list_shards(uri: str, fs) -> list[ShardInfo]:
    """Every `*.parquet` under a folder/prefix (recursive, sorted), with size and etag.
    A single `.parquet` file is a one-shard dataset. A missing input raises `MissingInput`;
    an unreachable or forbidden store raises `StorageError` naming the bucket or path."""
    return _guarded(uri, "list input", lambda: _list_shards(uri, fs))


def _list_shards(uri: str, fs) -> list[ShardInfo]:
    if is_s3(uri):
        fs.invalidate_cache()
    root = fs_path(uri).rstrip("/")
    if is_s3(uri):
        _require_bucket(fs, uri)
    if not fs.exists(root):
        raise MissingInput(f"input {uri} does not exist")
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


def _require_bucket(fs, uri: str) -> None:
    """`exists` on a missing bucket says False; name the bucket instead of the key. A role
    allowed to use a prefix but not to look at the bucket (403 here) is not refused: the
    operation that follows says whether it may read or write."""
    bucket = bucket_of(uri)
    try:
        fs.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError as exc:
        raise StorageError(f"cannot use {uri}: bucket '{bucket}' does not exist") from exc
    except PermissionError:
        pass


def check_shard(info: ShardInfo, fs, needed: tuple[str, ...], read_ids: bool = True) -> ShardCheck:
    """Schema check of one shard before any work starts: the footer must be readable, `id`
    and `text` present, every column the job reads or carries (`needed`, `dataset`, `system`,
    `doc_id`, `human_*`) must have its canonical type, and ids
    must be non-null and unique within the shard. Raises `BadShard` naming file and field
    (`transient=True` when storage, not the file, failed after retries)."""
    path = fs_path(info.uri)
    try:
        with fs.open(path, "rb") as handle:
            parquet = pq.ParquetFile(handle, pre_buffer=_PYTHON_FILE_READS["pre_buffer"])
            schema = parquet.schema_arrow
            num_rows = parquet.metadata.num_rows
            columns = {name: str(schema.field(name).type) for name in schema.names}
            for column in ALWAYS_REQUIRED:
                if column not in columns:
                    raise BadShard(info.uri, f"missing required column '{column}' (has: {', '.join(schema.names)})")
            carried = [c for c in carried_columns(columns) if c != "id"]
            for column in dict.fromkeys([*needed, *carried]):
                if column in columns:
                    expected = expected_input_type(column, schema.field(column).type)
                    if expected is not None:
                        raise BadShard(
                            info.uri, f"column '{column}' has type {schema.field(column).type}, expected {expected}"
                        )
            ids: list[str] = []
            if read_ids:
                id_column = parquet.read(columns=["id"], use_threads=_PYTHON_FILE_READS["use_threads"]).column("id")
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
        raise BadShard(info.uri, read_failure(exc, info.uri), transient=is_transient(exc)) from exc
    return ShardCheck(info=info, num_rows=num_rows, columns=columns, ids=ids)


def read_failure(exc: BaseException, uri: str) -> str:
    """Why a shard could not be read, in one line: the storage's fault ("cannot read: storage
    unreachable ...", permission, missing object) or the file's ("unreadable Parquet ...")."""
    if is_transient(exc) or isinstance(exc, (PermissionError, FileNotFoundError)):
        return f"cannot read: {_reason(exc, uri)}"
    return f"unreadable Parquet ({type(exc).__name__}: {_one_line(str(exc))})"


# ---------------------------------------------------------------------------------------
# writing outputs


def table_bytes(table: pa.Table, metadata: dict[str, str] | None = None) -> bytes:
    if metadata:
        existing = table.schema.metadata or {}
        table = table.replace_schema_metadata({**existing, **{k.encode(): v.encode() for k, v in metadata.items()}})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def temp_name(name: str) -> str:
    """The hidden temp name a file is written under before it is renamed into place."""
    return f".{name}{TEMP_MARKER}{uuid.uuid4().hex[:8]}"


def is_temp_name(name: str) -> bool:
    return bool(_TEMP_NAME.match(name))


def put_atomic(fs, uri: str, data: bytes) -> None:
    """Write a whole object so readers see the old file or the new one, never a part:
    local files go through a temp file + `os.replace` (the temp file is removed on any
    failure); an S3 PUT is atomic by itself. Failures raise `StorageError` naming the path."""
    if is_s3(uri):
        _guarded(uri, "write", lambda: fs.pipe_file(fs_path(uri), data))
        return
    target = pathlib.Path(fs_path(uri))
    temp = target.with_name(temp_name(target.name))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException as exc:
        try:
            temp.unlink()
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise storage_error(exc, uri, "write") from exc
        raise


def put_json_atomic(fs, uri: str, value: Any) -> None:
    put_atomic(fs, uri, (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode())


def probe_writable(fs, uri: str) -> None:
    """Before any scoring: create and delete a small probe object under the output prefix
    (creating the local folder if needed). Raises `StorageError` naming the path or bucket:
    missing bucket, read-only or full file system, permission denied, unreachable endpoint."""
    probe = join(uri, temp_name(PROBE_NAME.lstrip(".")))
    if is_s3(uri):
        _guarded(uri, "use output", lambda: _require_bucket(fs, uri))
    else:
        _guarded(uri, "create output folder", lambda: pathlib.Path(fs_path(uri)).mkdir(parents=True, exist_ok=True))
    try:
        put_atomic(fs, probe, b"ctgscore write probe\n")
    except StorageError as exc:
        raise StorageError(str(exc).replace(f"cannot write {probe}", f"output {uri} is not writable")) from exc
    _guarded(probe, "remove write probe", lambda: fs.rm(fs_path(probe)))


def clean_leftovers(fs, uri: str, older_than_s: float = 0.0) -> list[str]:
    """Remove temp files (`.<name>.tmp-<hex>`, write probes included) that crashed runs left
    under an output prefix; returns the removed URIs. `older_than_s` spares younger ones
    (for stores shared with a writer that is still running)."""

    def run() -> list[str]:
        path = fs_path(uri)
        if is_s3(uri):
            fs.invalidate_cache()
        if not fs.exists(path):
            return []
        removed = []
        now = time.time()
        for item, info in sorted(fs.find(path, detail=True).items()):
            if not is_temp_name(item.rsplit("/", 1)[-1]):
                continue
            if older_than_s and now - _mtime(info, now) < older_than_s:
                continue
            fs.rm(item)
            removed.append("s3://" + item if is_s3(uri) else item)
        return removed

    return _guarded(uri, "clean temp files under", run)


def _mtime(info: dict, default: float) -> float:
    value = info.get("mtime") or info.get("LastModified") or info.get("created")
    if value is None:
        return default
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


# ---------------------------------------------------------------------------------------
# reading outputs


def list_outputs(fs, uri: str) -> list[str]:
    """Committed output files under a prefix (temp files start with '.', so they never count)."""

    def run() -> list[str]:
        path = fs_path(uri)
        if is_s3(uri):
            fs.invalidate_cache()
            _require_bucket(fs, uri)
        if not fs.exists(path):
            return []
        found = []
        for item in sorted(fs.find(path)):
            name = item.rsplit("/", 1)[-1]
            if name.endswith(".parquet") and not name.startswith("."):
                found.append("s3://" + item if is_s3(uri) else item)
        return found

    return _guarded(uri, "list outputs under", run)


def read_footer_metadata(fs, uri: str) -> tuple[int, dict[str, str]] | None:
    """(num_rows, key-value metadata) of a Parquet file, or None when the file is missing or
    not valid Parquet. Unreachable storage (after retries) or a denied permission raises
    `StorageError`: an output that cannot be read now is not the same as a bad one."""
    try:
        with fs.open(fs_path(uri), "rb") as handle:
            meta = pq.read_metadata(handle)
    except Exception as exc:  # noqa: BLE001 - an unreadable old output is simply not reused
        if is_transient(exc) or isinstance(exc, PermissionError):
            raise storage_error(exc, uri, "read footer of") from exc
        return None
    raw = meta.metadata or {}
    return meta.num_rows, {k.decode(): v.decode() for k, v in raw.items() if not k.startswith(b"ARROW")}


def read_table(fs, uri: str, columns: list[str] | None = None) -> pa.Table:
    """A whole Parquet file (or some columns), decoded on the calling thread (see
    `_PYTHON_FILE_READS`)."""

    def run() -> pa.Table:
        with fs.open(fs_path(uri), "rb") as handle:
            return pq.read_table(io.BytesIO(handle.read()), columns=columns, **_PYTHON_FILE_READS)

    return _guarded(uri, "read", run)


def remove(fs, uri: str) -> None:
    _guarded(uri, "remove", lambda: fs.rm(fs_path(uri)))


# ---------------------------------------------------------------------------------------
# errors raised inside Ray workers

_WORKER_ERROR_LINE = re.compile(r"^(?:scoring\.errors|ray_jobs(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)


def error_from_worker(exc: BaseException) -> CtgscoreError | None:
    """The ctgscore error a Ray worker raised (a `StorageError` from `put_atomic`, say), or None.

    Ray Data wraps an exception raised in a map task in its own `UserCodeException`, and the
    original is not pickled back with it (Python does not pickle `__cause__`); only the
    worker's traceback text in the driver-side error still names it. So: the exception chain
    first, then the last `scoring.errors.XError: message` line of that text."""
    from scoring import errors

    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, CtgscoreError):
            return current
        stack.extend(getattr(current, name, None) for name in ("cause", "__cause__", "__context__"))
    matches = _WORKER_ERROR_LINE.findall(str(exc))
    if not matches:
        return None
    name, message = matches[-1]
    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, CtgscoreError)):
        kind = InputError if name == "MissingInput" else CtgscoreError
    error = kind(message.strip())
    if isinstance(error, StorageError):
        error.transient = "storage unreachable" in message
    return error

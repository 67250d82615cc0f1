"""Storage failures, classified: transient (network, timeout, throttling, 5xx: may go away
on its own; botocore and the AWS SDK have already retried) or not (a missing object, a denied
permission, bad bytes), and turned into one-line `StorageError`s naming what was done to
which path or bucket (no traceback, no secret). See `docs/failures.md`."""

from __future__ import annotations

import errno
import re
from typing import Callable, TypeVar

from ray_jobs.storage.uris import bucket_of
from scoring import s3_options
from scoring.errors import CtgscoreError, StorageError, one_line

T = TypeVar("T")

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


def failure_reason(exc: BaseException, uri: str) -> str:
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
    credentials = credentials_problem(exc)
    if credentials:
        return credentials
    if is_transient(exc):
        endpoint = ""
        match = re.search(r"(https?://[^/\"' ]+)", text)
        if match:
            endpoint = f" at {match.group(1)}"
        attempts = s3_options.CONNECT_ATTEMPTS if any(s3_options.never_connected(item) for item in _chain(exc)) else s3_options.max_attempts()
        return f"storage unreachable{endpoint} after {attempts} attempts ({one_line(type(exc).__name__ + ': ' + text, 160)})"
    if isinstance(exc, OSError) and exc.strerror:
        return one_line(exc.strerror, 300)
    return one_line(f"{type(exc).__name__}: {text}", 300)


_NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError")
_BAD_CREDENTIALS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken")


def credentials_problem(exc: BaseException) -> str | None:
    """What is wrong with the AWS credentials behind a storage failure, in words a user can act
    on, or None when the failure is not about credentials."""
    for item in _chain(exc):
        name = type(item).__name__
        if name in _NO_CREDENTIALS:
            return ("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
                    f"or run where an instance role provides them ({name})")
        if any(marker in str(item) for marker in _BAD_CREDENTIALS):
            return "the AWS credentials were rejected (invalid access key, secret or expired token)"
    return None


def storage_error(exc: BaseException, uri: str, action: str) -> StorageError:
    """A one-line `StorageError` naming what was done to which path/bucket/key and why;
    `.transient` says whether retrying later may help."""
    if isinstance(exc, StorageError):
        return exc
    error = StorageError(f"cannot {action} {uri}: {failure_reason(exc, uri)}")
    error.transient = is_transient(exc)
    error.uri = uri
    return error


def guarded(uri: str, action: str, operation: Callable[[], T]) -> T:
    try:
        return operation()
    except CtgscoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - every storage failure names its path
        if is_storage_failure(exc):
            raise storage_error(exc, uri, action) from exc
        raise


def is_storage_failure(exc: BaseException) -> bool:
    if isinstance(exc, OSError) or is_transient(exc):
        return True
    module = type(exc).__module__
    return module.startswith(("botocore", "aiobotocore", "s3fs", "aiohttp"))


def read_failure(exc: BaseException, uri: str) -> str:
    """Why a shard could not be read, in one line: the storage's fault ("cannot read: storage
    unreachable ...", permission, missing object) or the file's ("unreadable Parquet ...")."""
    if is_transient(exc) or isinstance(exc, (PermissionError, FileNotFoundError)):
        return f"cannot read: {failure_reason(exc, uri)}"
    return f"unreadable Parquet ({type(exc).__name__}: {one_line(str(exc), 300)})"

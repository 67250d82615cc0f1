"""S3 client options, built in one place for data (the Ray job) and models (`scoring.models`).

Endpoint and region come from the caller, else `$AWS_ENDPOINT_URL` / `$AWS_DEFAULT_REGION`.
Retries: botocore's "standard" mode (exponential backoff with jitter on connection errors,
timeouts, throttling and 5xx), `max_attempts` attempts per request, first try included,
`$CTGSCORE_S3_MAX_ATTEMPTS` by default. A request that never reached the endpoint (connection
refused, no such host, connect timeout after `CONNECT_TIMEOUT_S`) is tried at most
`CONNECT_ATTEMPTS` times (`stop_connect_retries`, installed by `scoring.s3_filesystem`): a
closed port or a wrong endpoint fails in seconds instead of after a minute of backoff, while a
blip still gets its retry. No credentials: each process finds its own through the AWS default
chain, so none is ever serialised with a filesystem object.
"""

from __future__ import annotations

import os
from typing import Any

DEFAULT_MAX_ATTEMPTS = 6
CONNECT_TIMEOUT_S = 3.0
CONNECT_ATTEMPTS = 2
READ_TIMEOUT_S = 60.0
DEFAULT_REGION = "us-east-1"


def max_attempts(configured: int | None = None) -> int:
    """Attempts per S3 request: the caller's, else `$CTGSCORE_S3_MAX_ATTEMPTS`, else 6."""
    return int(configured or os.environ.get("CTGSCORE_S3_MAX_ATTEMPTS") or DEFAULT_MAX_ATTEMPTS)


def endpoint_and_region(endpoint_url: str | None = None, region: str | None = None) -> tuple[str | None, str]:
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    return endpoint, region or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def s3fs_options(endpoint_url: str | None = None, region: str | None = None, attempts: int | None = None) -> dict[str, Any]:
    """Keyword arguments for `s3fs.S3FileSystem`. With a custom endpoint no region name is
    passed: it breaks bucket creation there (an invalid location constraint)."""
    endpoint, region = endpoint_and_region(endpoint_url, region)
    options: dict[str, Any] = {
        "skip_instance_cache": True,
        "config_kwargs": {
            "retries": {"max_attempts": max_attempts(attempts), "mode": "standard"},
            "connect_timeout": CONNECT_TIMEOUT_S,
            "read_timeout": READ_TIMEOUT_S,
        },
        "client_kwargs": {"endpoint_url": endpoint} if endpoint else {"region_name": region},
    }
    return options


def never_connected(exc: BaseException) -> bool:
    """Whether a botocore request failed before reaching the endpoint: connection refused,
    unknown host, connect timeout (botocore's `ConnectionError` family; a connection reset or a
    read timeout after connecting is not one)."""
    try:
        from botocore.exceptions import ConnectionError as BotoConnectionError
    except ImportError:  # pragma: no cover - s3fs not installed: local files only
        return False
    return isinstance(exc, BotoConnectionError)


def stop_connect_retries(attempts: int = 0, caught_exception: BaseException | None = None, **_: Any):
    """A botocore `needs-retry` handler run before the standard one: `False` (no more retries)
    once a request that never reached the endpoint has been tried `CONNECT_ATTEMPTS` times;
    `None` (let the standard policy decide) otherwise."""
    if caught_exception is not None and attempts >= CONNECT_ATTEMPTS and never_connected(caught_exception):
        return False
    return None

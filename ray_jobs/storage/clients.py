"""Filesystems for the job, from the job's `s3` section and the one set of S3 client options
in `scoring.s3_options`: fsspec (local or s3fs) for the driver's listings, footers and writes,
a native `pyarrow.fs` filesystem for Ray Data's readers. Credentials are never passed: each
process (driver, read task, actor) finds its own through the AWS default chain."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from ray_jobs.config import S3Config
from ray_jobs.storage.metering import RequestMeter
from ray_jobs.storage.parallel import STORAGE_CONCURRENCY
from ray_jobs.storage.uris import is_s3
from scoring import s3_options


def fsspec_filesystem(uri: str, s3: S3Config, meter: RequestMeter | None = None):
    """fsspec filesystem for the driver or a worker: s3fs (listing cache invalidated by
    callers) or local. botocore retries each request (a request that never reached the endpoint
    only `s3_options.CONNECT_ATTEMPTS` times); `meter` counts the requests sent."""
    if not is_s3(uri):
        import fsspec

        return fsspec.filesystem("file")
    from scoring.s3_filesystem import S3FileSystem

    options = s3_options.s3fs_options(s3.endpoint_url, s3.region)
    options["config_kwargs"]["max_pool_connections"] = STORAGE_CONCURRENCY
    if meter is not None:
        from aiobotocore.session import AioSession

        session = AioSession()
        session.register("before-send.s3", meter.on_request)
        options["session"] = session
    fs = S3FileSystem(**options)
    fs.retries = 2  # s3fs's own loop around botocore's: keep the product of both bounded
    return fs


def arrow_filesystem(uri: str, s3: S3Config):
    """Native pyarrow filesystem for Ray Data's readers. It is pickled into read tasks, so it
    carries only the endpoint, region, timeouts and retry strategy, never a credential."""
    import pyarrow.fs as pafs

    if not is_s3(uri):
        return pafs.LocalFileSystem()
    endpoint, region = s3_options.endpoint_and_region(s3.endpoint_url, s3.region)
    kwargs: dict[str, Any] = {
        "region": region,
        "connect_timeout": s3_options.CONNECT_TIMEOUT_S,
        "request_timeout": s3_options.READ_TIMEOUT_S,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=s3_options.max_attempts()),
    }
    if endpoint:
        parsed = urlparse(endpoint)
        kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme or "https")
    return pafs.S3FileSystem(**kwargs)

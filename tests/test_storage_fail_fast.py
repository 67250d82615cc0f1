"""Storage failures a user can act on, in seconds: an S3 endpoint whose port is closed fails
after `CONNECT_ATTEMPTS` tries (not a minute of backoff over the default 6 attempts), missing
credentials are named as such, and neither is an `internal error`. Only loopback addresses
are used: a port bound and closed again, and no instance-metadata lookup."""

from __future__ import annotations

import time

import pytest

from ctgscore.testing.cli import assert_user_error
from ray_jobs.config import S3Config
from ray_jobs.storage import clients, listing, writes
from scoring import s3_options
from scoring.errors import StorageError
from tests.job_support import free_port

# botocore's standard backoff alone over 6 attempts sleeps up to 1 + 2 + 4 + 8 + 16 s
WITHIN_S = 10.0


@pytest.fixture
def closed_endpoint(monkeypatch) -> str:
    """A loopback endpoint whose port nothing listens on, with the default retry attempts and
    fake credentials (never a metadata-service lookup)."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    monkeypatch.delenv("CTGSCORE_S3_MAX_ATTEMPTS", raising=False)
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(key, value)
    return endpoint


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_the_default_policy_would_retry_six_times():
    # the bound below is only worth something if the default attempts are not already small
    assert s3_options.max_attempts() >= 5 and s3_options.CONNECT_ATTEMPTS == 2
    assert s3_options.CONNECT_TIMEOUT_S <= 5


@pytest.mark.timeout(60)
def test_a_closed_endpoint_port_fails_the_job_layer_within_seconds(closed_endpoint):
    fs = clients.fsspec_filesystem("s3://x", S3Config(endpoint_url=closed_endpoint))
    for action, call in (("use output s3://b/out", lambda: writes.probe_writable(fs, "s3://b/out")),
                         ("list input s3://b/in", lambda: listing.list_shards("s3://b/in", fs))):
        started = time.monotonic()
        with pytest.raises(StorageError) as failure:
            call()
        elapsed = time.monotonic() - started
        assert elapsed < WITHIN_S, (action, elapsed)
        message = str(failure.value)
        assert message.startswith(f"cannot {action}: storage unreachable at {closed_endpoint} after 2 attempts"), message
        assert "\n" not in message and failure.value.transient is True


@pytest.mark.timeout(60)
def test_a_closed_endpoint_port_fails_meta_within_seconds_without_internal_error(cli, closed_endpoint, tmp_path):
    started = time.monotonic()
    proc = cli(["meta", "-s", "s3://bucket/scores/", "-o", tmp_path / "report"])
    elapsed = time.monotonic() - started
    line = assert_user_error(proc, 1, "cannot access s3://bucket/scores/", f"storage unreachable at {closed_endpoint}")
    assert "internal error" not in line
    assert elapsed < WITHIN_S, elapsed


@pytest.mark.timeout(60)
def test_missing_credentials_are_named(cli, no_credentials, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # never reached: signing fails first
    proc = cli(["compare", "-s", "s3://bucket/scores/", "-o", tmp_path / "board.md"])
    line = assert_user_error(proc, 1, "cannot access s3://bucket/scores/", "no AWS credentials found",
                             "AWS_ACCESS_KEY_ID")
    assert "internal error" not in line


@pytest.mark.timeout(60)
def test_missing_credentials_in_the_job_layer_are_named(no_credentials):
    fs = clients.fsspec_filesystem("s3://x", S3Config(endpoint_url=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(StorageError, match=r"^cannot list input s3://b/in: no AWS credentials found: set AWS_ACCESS_KEY_ID"):
        listing.list_shards("s3://b/in", fs)


def test_only_requests_that_never_connected_stop_early():
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    refused = EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
    slow = ConnectTimeoutError(endpoint_url="http://127.0.0.1:9")
    read = ReadTimeoutError(endpoint_url="http://127.0.0.1:9")
    assert s3_options.stop_connect_retries(attempts=1, caught_exception=refused) is None  # a blip gets its retry
    assert s3_options.stop_connect_retries(attempts=2, caught_exception=refused) is False
    assert s3_options.stop_connect_retries(attempts=2, caught_exception=slow) is False
    # after connecting: the standard policy decides (all of max_attempts)
    assert s3_options.stop_connect_retries(attempts=5, caught_exception=read) is None
    assert s3_options.stop_connect_retries(attempts=5, caught_exception=None) is None


@pytest.mark.timeout(120)
def test_an_s3_prefix_with_nothing_there_is_one_line_not_internal(cli, moto, s3_bucket, monkeypatch, tmp_path):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": moto}.items():
        monkeypatch.setenv(key, value)
    for command in (["meta", "-s", f"s3://{s3_bucket}/scores/", "-o", tmp_path / "report"],
                    ["compare", "-s", f"s3://{s3_bucket}/scores/", "-o", tmp_path / "board.md"]):
        line = assert_user_error(cli(command), 1, f"s3://{s3_bucket}/scores/", "no such file, folder or prefix")
        assert "internal error" not in line
    line = assert_user_error(cli(["meta", "-s", "s3://no-such-bucket-i36/scores/", "-o", tmp_path / "report"]), 1,
                             "s3://no-such-bucket-i36/scores/")
    assert "internal error" not in line


def test_only_an_s3_clients_own_exception_becomes_a_storage_error():
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    from ctgscore.cli.main import _storage_failure

    assert _storage_failure(ValueError("read timed out"), ["meta", "-s", "s3://b/x"]) is None  # a bug stays internal
    refused = _storage_failure(EndpointConnectionError(endpoint_url="http://127.0.0.1:9/b"), ["meta", "-s", "s3://b/x"])
    assert isinstance(refused, StorageError) and str(refused).startswith("cannot access s3://b/x: storage unreachable")
    assert str(_storage_failure(NoCredentialsError(), ["run", "job.yaml"])).startswith("cannot access S3: no AWS credentials")

"""`user:password@host` without a scheme, where the host is one label (`minio`, a bucket).

Such a token was kept as it is unless its host had a dot or a port, so that a row id such as
`system:model@v2` stays readable in an error. But s3fs cuts the scheme off a path
(`s3://KEY:SECRET@bucket/key` becomes `KEY:SECRET@bucket/key` in its messages), and an endpoint
may be written `KEY:SECRET@minio/`: a `/` path after the host makes it a network location.
"""

from __future__ import annotations

import pytest

from ctgscore.testing.cli import run_cli_in_process
from scoring.redact import redact_text

SECRET = "t0pSecretValue"


@pytest.mark.parametrize("text", [
    f"key:{SECRET}@minio/", f"key:{SECRET}@minio/bucket/x", f"key:{SECRET}@minio:9000",
    f"endpoint key:{SECRET}@minio:9000/ refused", f"FileNotFoundError: AKIAKEY:{SECRET}@mybucket/data/x.parquet",
    f"AKIAKEY:ab/{SECRET}@minio/b", f"('AKIAKEY:{SECRET}@my_bucket.1/k',)",
])
def test_a_credential_before_a_one_label_host_with_a_path_or_port_is_masked(text):
    shown = redact_text(text)
    assert SECRET not in shown and "***@" in shown, shown


@pytest.mark.parametrize("text", [
    "row 3 (id 'sys:a@b') failed", "id=system:model@v1.5", '{"id": "gen:run@2", "ok": true}',
    "ranked team:alpha@final, team:beta@semi", "at 12:30@2x", "id system:model@v2", "system:model@v2: no score",
])
def test_ids_without_a_path_after_the_at_sign_stay_readable(text):
    assert redact_text(text) == text


def test_the_path_s3fs_prints_for_a_url_with_credentials_is_masked():
    import s3fs

    stripped = s3fs.S3FileSystem._strip_protocol(f"s3://AKIAKEY:{SECRET}@mybucket/data/x.parquet")
    assert SECRET in stripped and not stripped.startswith("s3://")  # what s3fs and botocore messages quote
    assert SECRET not in redact_text(f"[Errno 2] No such file or directory: '{stripped}'")


def test_an_s3_path_with_credentials_is_refused_before_any_request(tmp_path):
    from scoring.errors import UsageError
    from scoring.s3_filesystem import url_to_fs

    with pytest.raises(UsageError) as refused:
        url_to_fs(f"s3://AKIAKEY:{SECRET}@mybucket/data/")
    assert SECRET not in str(refused.value) and "s3://***@mybucket/data/" in str(refused.value)
    done = run_cli_in_process(["compare", "-s", f"s3://AKIAKEY:ab/{SECRET}@mybucket/x"])
    assert done.returncode == 2 and SECRET not in done.stderr + done.stdout, done.stderr
    assert "cannot carry credentials" in done.stderr

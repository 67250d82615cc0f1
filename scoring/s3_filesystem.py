"""The s3fs filesystem ctgscore reads and writes S3 with: `s3fs.S3FileSystem` with the options
of `scoring.s3_options` and its connect-retry policy installed on every client it creates."""

from __future__ import annotations

from typing import Any, Mapping

import s3fs

from scoring import s3_options

_HANDLER_ID = "ctgscore-stop-connect-retries"


class S3FileSystem(s3fs.S3FileSystem):
    """s3fs whose botocore clients stop retrying a request that never reached the endpoint
    after `s3_options.CONNECT_ATTEMPTS` tries (`s3_options.stop_connect_retries`)."""

    async def set_session(self, refresh=False, kwargs={}):  # noqa: B006 - s3fs's signature
        if self.session is None:
            from aiobotocore.session import AioSession

            self.session = AioSession(**self.kwargs)
            self._session_is_owned = True
        # on the session: every client made from it (one per bucket region included) has it,
        # ahead of the standard retry handler the client registers on itself
        self.session.register("needs-retry.s3", s3_options.stop_connect_retries, unique_id=_HANDLER_ID)
        client = await super().set_session(refresh=refresh, kwargs=kwargs)
        client.meta.events.register_first("needs-retry.s3", s3_options.stop_connect_retries, unique_id=_HANDLER_ID)
        return client


def filesystem(storage_options: Mapping[str, Any] | None = None, **overrides: Any) -> S3FileSystem:
    """An `S3FileSystem` with ctgscore's options (`s3_options.s3fs_options`: endpoint, region,
    timeouts, retries), then `storage_options` on top (a caller's own endpoint or keys)."""
    options = s3_options.s3fs_options(**overrides)
    for key, value in dict(storage_options or {}).items():
        if isinstance(value, dict) and isinstance(options.get(key), dict):
            options[key] = {**options[key], **value}
        else:
            options[key] = value
    return S3FileSystem(**options)


def refuse_credentials(path: str) -> None:
    """`UsageError` (the path shown redacted) when an `s3://` path carries credentials
    (`s3://KEY:SECRET@bucket/key`); other paths pass. For readers that open a path themselves
    (pyarrow would use the credentials of such a URL, s3fs would not)."""
    if not str(path).startswith(("s3://", "s3a://")):
        return
    from scoring.errors import UsageError
    from scoring.redact import MASK, redact_url

    scheme = str(path).split("://", 1)[0] + "://"
    shown = redact_url(str(path))
    if shown.startswith(f"{scheme}{MASK}@"):
        raise UsageError(f"{shown}: an s3:// path cannot carry credentials; give them as AWS_ACCESS_KEY_ID "
                         "and AWS_SECRET_ACCESS_KEY (or a profile) instead")


def url_to_fs(path: str, storage_options: Mapping[str, Any] | None = None):
    """`fsspec.core.url_to_fs` with ctgscore's S3 filesystem for `s3://` paths. An `s3://` path
    that carries credentials (`s3://KEY:SECRET@bucket/key`) is refused, its secret not shown:
    s3fs would not use them, and botocore would quote `KEY:SECRET@bucket` whole as an invalid
    bucket name in its error."""
    if str(path).startswith(("s3://", "s3a://")):
        refuse_credentials(path)
        fs = filesystem(storage_options)
        return fs, fs._strip_protocol(str(path))
    import fsspec

    return fsspec.core.url_to_fs(path, **dict(storage_options or {}))

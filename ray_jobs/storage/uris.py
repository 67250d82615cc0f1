"""URIs the job handles: an absolute local path or `s3://bucket/key`."""

from __future__ import annotations


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


def to_uri(path: str, like: str) -> str:
    """A filesystem path back to a URI of the same kind as `like`."""
    return "s3://" + path if is_s3(like) else path

"""Puts a Ray cluster's authentication token on a node, from the cloud's secret store.

    python -m ray_jobs.cluster_token --secret-id ctgscore/ray-auth-token --region us-east-1

`cluster.yaml` runs this on every node before `RAY_AUTH_MODE=token ray start ...`: it reads
the secret (AWS Secrets Manager, through the node's instance profile: no key anywhere) and
writes it to `~/.ray/auth_token` (or `--out`), the file Ray reads the token from, mode 0600
in a folder of this user's that no one else may write (a new one is made 0700; one that others may
write, or another user's, is refused). The token is never printed, logged or passed on a command line; a failure
names the secret and the cause, not the value. Exit 0 on success, 1 on failure.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import stat
import sys

from scoring import atomic_files

DEFAULT_OUT = "~/.ray/auth_token"  # where Ray looks for its token when none is set in the environment


def read_secret(secret_id: str, region: str | None = None, endpoint_url: str | None = None) -> str:
    """The secret's string value (AWS Secrets Manager, the default credential chain)."""
    import botocore.session

    client = botocore.session.get_session().create_client(
        "secretsmanager", region_name=region, endpoint_url=endpoint_url)
    value = client.get_secret_value(SecretId=secret_id).get("SecretString") or ""
    return value.strip()


def write_token(token: str, out: str | os.PathLike = DEFAULT_OUT) -> pathlib.Path:
    """Writes `token` to `out` (owner-only folder and file, replaced whole) and returns the path."""
    if not token:
        raise ValueError("the secret is empty")
    path = pathlib.Path(out).expanduser()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    private_folder(path.parent)
    return atomic_files.write_text(path, token, mode=0o600)  # 0600 from creation; a symlink is replaced


def private_folder(folder: pathlib.Path) -> None:
    """The token's folder must be this user's and closed to others' writes: whoever may write
    it could swap the file Ray reads the cluster's token from. Such a folder is refused, not
    changed (it may be a working directory given by `--out`); read and search bits are left
    alone, since the file itself is 0600."""
    info = folder.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(f"{folder} belongs to user id {info.st_uid}, not to this user")
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise PermissionError(f"{folder} may be written by other users (mode {stat.S_IMODE(info.st_mode):04o}), who could "
                              f"swap the token file; run `chmod go-w {folder}` or write the token elsewhere (--out)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ray_jobs.cluster_token", description=__doc__.splitlines()[0])
    parser.add_argument("--secret-id", required=True, help="name or ARN of the secret that holds the token")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    parser.add_argument("--endpoint-url", default=None, help="a Secrets Manager endpoint other than AWS's")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"token file (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    try:
        path = write_token(read_secret(args.secret_id, args.region, args.endpoint_url), args.out)
    except Exception as exc:  # noqa: BLE001 - one line naming the secret and the cause, never the value
        print(f"error: cannot put the Ray token from secret {args.secret_id!r} on this node: "
              f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 1
    print(f"Ray token from secret {args.secret_id!r} written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Ray tokens on disk: `python -m ray_jobs.cluster_token`, what cluster.yaml runs on every node
before `ray start` (the token from Secrets Manager, here moto's, into `~/.ray/auth_token`,
owner-only, never printed), and `ensure_local_token`, the embedded local Ray's token file."""

from __future__ import annotations

import os
import re
import secrets
import stat

import pytest

from ray_jobs.cluster_token import main, write_token
from ray_jobs.session import ensure_local_token
from tests.job_support import FAKE_AWS


def test_write_token_is_owner_only_and_replaces_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "home" / ".ray" / "auth_token"
    out.parent.mkdir(parents=True)
    out.symlink_to(victim)  # a link planted where the token goes is replaced, its target untouched
    path = write_token("abc123", out)
    assert path == out and out.read_text() == "abc123" and not out.is_symlink()
    assert victim.read_text() == "keep"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    with pytest.raises(ValueError, match="empty"):
        write_token("", tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_token_from_secrets_manager_to_the_node(moto, tmp_path, monkeypatch, capsys):
    import botocore.session

    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    client = botocore.session.get_session().create_client("secretsmanager", region_name="us-east-1", endpoint_url=moto)
    token, name = secrets.token_hex(32), f"ctgscore/ray-auth-token-{os.getpid()}"
    client.create_secret(Name=name, SecretString=token + "\n")
    out = tmp_path / "home" / ".ray" / "auth_token"

    assert main(["--secret-id", name, "--region", "us-east-1", "--endpoint-url", moto, "--out", str(out)]) == 0
    assert out.read_text() == token
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and stat.S_IMODE(out.parent.stat().st_mode) == 0o700
    printed = capsys.readouterr()
    assert token not in printed.out + printed.err and name in printed.out

    assert main(["--secret-id", name + "-missing", "--region", "us-east-1", "--endpoint-url", moto,
                 "--out", str(tmp_path / "none")]) == 1
    printed = capsys.readouterr()
    [line] = printed.err.splitlines()
    assert line.startswith(f"error: cannot put the Ray token from secret '{name}-missing'") and "ResourceNotFound" in line
    assert not (tmp_path / "none").exists()


def test_local_token_written_owner_only_when_the_token_mode_needs_one(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)
    token_file = tmp_path / ".ray" / "auth_token"
    for key, value in (("RAY_AUTH_MODE", "disabled"), ("RAY_AUTH_TOKEN", "given"), ("RAY_AUTH_TOKEN_PATH", "/x")):
        with monkeypatch.context() as patch:
            patch.setenv(key, value)
            assert ensure_local_token() is None and not token_file.exists(), key
    assert ensure_local_token() == token_file  # mode unset: Ray's default, token
    first = token_file.read_text()
    assert len(first) == 64 and int(first, 16) >= 0
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert ensure_local_token() is None and token_file.read_text() == first  # an existing token is kept


def test_a_token_folder_others_may_write_is_refused_and_left_as_it_is(tmp_path, monkeypatch):
    folder = tmp_path / ".ray"
    folder.mkdir(mode=0o755)
    folder.chmod(0o777)  # an open ~/.ray (made earlier with a loose umask): anyone could swap the file
    with pytest.raises(PermissionError, match=r"may be written by other users \(mode 0777\).*chmod go-w"):
        write_token("abc123", folder / "auth_token")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 and not (folder / "auth_token").exists()  # not changed behind its owner's back
    folder.chmod(0o755)  # readable by others is fine: the file itself is 0600
    write_token("abc123", folder / "auth_token")
    assert stat.S_IMODE((folder / "auth_token").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    other = tmp_path / "theirs"
    other.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: other.stat().st_uid + 1)  # the folder is another user's
    with pytest.raises(PermissionError, match="belongs to user id"):
        write_token("abc123", other / "auth_token")
    assert not (other / "auth_token").exists()


def test_the_token_is_never_an_argument(capsys):
    """Everything on the command line is visible to every user in `ps`: no option takes the
    token itself, only the secret's name and where to write it."""
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out.split("options:", 1)[1]  # argparse's list of every option
    options = set(re.findall(r"(?<![\w-])--?[a-z][\w-]*", listed))
    assert options == {"-h", "--help", "--secret-id", "--region", "--endpoint-url", "--out"}

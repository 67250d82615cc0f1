"""`python -m ray_jobs.cluster_token`, what cluster.yaml runs on every node before `ray start`:
the token from Secrets Manager (here moto's) into `~/.ray/auth_token`, owner-only, never printed."""

from __future__ import annotations

import os
import secrets
import stat

import pytest

from ray_jobs.cluster_token import main, write_token
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

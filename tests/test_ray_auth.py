"""Ray asks for a token: a head started the way `cluster.yaml` starts one (its own `ray start`
line, `RAY_AUTH_MODE=token`, the token in `~/.ray/auth_token` as `ray_jobs.cluster_token` puts
it there) refuses a client without the token (the job server's HTTP API, `ray job submit`, a
driver joining its GCS) and runs the job for one with it; and the embedded local Ray of a plain
`ctgscore run` (`RaySession` with no address) starts its own Ray with token authentication, not
joining that head although the head's address is on the machine.

The test suite otherwise runs Ray with `RAY_AUTH_MODE=disabled` (tests/conftest.py); every
process here gets its environment set explicitly. Each Ray process started here is stopped by
killing what this module started (never `ray stop`)."""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shlex
import stat
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import pytest
import yaml

from ray_jobs.cluster_token import write_token
from tests.job_support import (
    HEAD_PORTS,
    REPO_ROOT,
    VENV_BIN,
    child_env,
    free_port,
    make_corpus,
    pids_using,
    stop_group,
    wait_port,
)

pytestmark = [pytest.mark.slow, pytest.mark.system]

#: flags of cluster.yaml's head line that name cloud things (ports fixed for the security group,
#: the autoscaler's file, a head with no CPU beside GPU workers): replaced by local ones here
CLOUD_ONLY_FLAGS = ("--port", "--object-manager-port", "--autoscaling-config", "--num-cpus")


def cluster_head_command() -> tuple[dict[str, str], list[str]]:
    """cluster.yaml's `ray start --head` line: the variables it sets and the `ray start` flags."""
    config = yaml.safe_load((REPO_ROOT / "cluster.yaml").read_text())
    [line] = [c for c in config["head_start_ray_commands"] if "ray start" in c]
    words = shlex.split(line)
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[:3] == ["ray", "start", "--head"], line
    return env, words[3:]


def client_env(home: pathlib.Path, **extra: str) -> dict[str, str]:
    """A shell of someone on the machine: its own HOME (no token file unless put there), no
    token variables unless given, Ray's auth mode as given."""
    env = child_env()
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        env.pop(key, None)
    env["HOME"] = str(home)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def token_head(tmp_path_factory):
    """A head started with cluster.yaml's own settings on this machine; yields a namespace with
    its job server URL, GCS address, temp dir, the token file and the token."""
    import types

    root = tmp_path_factory.mktemp("auth")
    home = root / "head-home"
    token = secrets.token_hex(32)
    token_file = write_token(token, home / ".ray" / "auth_token")  # what cluster_token leaves on a node
    settings, flags = cluster_head_command()
    assert settings == {"RAY_AUTH_MODE": "token"}
    flags = [f for f in flags if f.split("=")[0] not in CLOUD_ONLY_FLAGS]
    temp_dir = tempfile.mkdtemp(prefix="rauth", dir="/tmp")
    ports = {name: free_port() for name in HEAD_PORTS}
    worker_low = 30000 + (os.getpid() % 200) * 100
    head = subprocess.Popen(
        [str(VENV_BIN / "ray"), "start", "--head", *flags, "--block", "--num-cpus=2", "--node-ip-address=127.0.0.1",
         "--include-dashboard=true", f"--temp-dir={temp_dir}", "--object-store-memory=300000000",
         f"--min-worker-port={worker_low}", f"--max-worker-port={worker_low + 99}",
         *[f"--{name}={port}" for name, port in ports.items()]],
        env=client_env(home, **settings), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_port(ports["dashboard-port"], timeout=90)
        # where a later `ray.init()` on the machine looks for a running Ray (what `ray start --head`
        # without --block leaves in its temp dir; the default temp dir is not touched here)
        pathlib.Path(temp_dir, "ray_current_cluster").write_text(f"127.0.0.1:{ports['port']}")
        yield types.SimpleNamespace(url=f"http://127.0.0.1:{ports['dashboard-port']}", gcs=f"127.0.0.1:{ports['port']}",
                                    temp_dir=temp_dir, token_file=token_file, token=token, root=root, flags=flags)
    finally:
        stop_group(head, marker=temp_dir)
        left = pids_using(temp_dir)
        import shutil

        shutil.rmtree(temp_dir, ignore_errors=True)
    assert left == [], f"processes of the token head outlived it: {left}"


def http_status(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=20) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


JOIN = ("import ray; ray.init(address={address!r}, log_to_driver=False, logging_level='ERROR'); "
        "print('JOINED', ray.get(ray.remote(num_cpus=0)(lambda: 'ran').remote()))")


def join_gcs(address: str, env: dict[str, str]) -> subprocess.Popen:
    """A driver joining the GCS at `address` (started, not waited for)."""
    return subprocess.Popen([sys.executable, "-c", JOIN.format(address=address)], env=env, cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.timeout(300)
def test_head_with_cluster_yaml_settings_refuses_clients_without_the_token(token_head, tmp_path):
    assert "--dashboard-host=127.0.0.1" in token_head.flags
    stranger = tmp_path / "stranger"  # a HOME with no token in it
    stranger.mkdir()
    # a driver without the token joining the GCS (takes Ray ~20 s to give up): started first, checked last
    gcs_joiner = join_gcs(token_head.gcs, client_env(stranger))

    # the job server's HTTP API: no token 401, a wrong one 403, the token 200
    jobs = token_head.url + "/api/jobs/"
    assert http_status(jobs, {}) == 401
    assert http_status(jobs, {"Authorization": "Bearer " + secrets.token_hex(32)}) == 403
    assert http_status(jobs, {"Authorization": "Bearer " + token_head.token}) == 200

    # `ray job submit` (the README's line) from a shell without the token, and with a wrong one
    marker = tmp_path / "ran"
    submit = [str(VENV_BIN / "ray"), "job", "submit", "--address", token_head.url, "--",
              "python", "-c", f"open({str(marker)!r}, 'w').write('id')"]
    for env in (client_env(stranger), client_env(stranger, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))):
        refused = subprocess.run(submit, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0, refused.stdout[-2000:]
        assert "Authentication" in refused.stdout + refused.stderr, (refused.stdout + refused.stderr)[-2000:]
    assert not marker.exists()

    out, _ = gcs_joiner.communicate(timeout=120)
    assert gcs_joiner.returncode != 0 and "JOINED" not in out, out[-2000:]
    assert "token" in out.lower(), out[-2000:]  # refused for the token, not for something else


@pytest.mark.timeout(300)
def test_head_with_cluster_yaml_settings_runs_the_job_for_a_client_with_the_token(token_head, tmp_path):
    """The token as the docs give it to a client (RAY_AUTH_MODE=token and the token file), the
    job as the README submits it; the token shows in no output of the submission or the job."""
    make_corpus(tmp_path / "in", shards=2, rows=10)
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"),
                                      "metrics": [{"name": "text_stats"}], "batch_size": 10, "progress": False,
                                      "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}}))
    env = client_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_head.token_file))
    submit = subprocess.run(
        [str(VENV_BIN / "ray"), "job", "submit", "--address", token_head.url, "--working-dir", ".", "--",
         "python", "-m", "ray_jobs.score_corpus", "--config", str(config), "--no-progress"],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert "text_stats: 20 in -> 20 out" in submit.stdout
    assert token_head.token not in submit.stdout + submit.stderr
    manifest = (tmp_path / "out" / "manifest.json").read_text()
    assert token_head.token not in manifest


EMBEDDED = """
import json, sys
from ray_jobs.session import RaySession
session = RaySession(num_cpus=1, temp_dir={temp_dir!r}).ensure()
import ray
from ray._raylet import AuthenticationMode, get_authentication_mode
print(json.dumps({{"gcs": ray.get_runtime_context().gcs_address, "local": session.local,
                  "token": get_authentication_mode() == AuthenticationMode.TOKEN}}), flush=True)
sys.stdin.readline()
session.close()
"""


@pytest.mark.timeout(300)
def test_embedded_local_ray_starts_its_own_with_a_token(token_head, tmp_path):
    """`RaySession()` with no address and no $RAY_ADDRESS (a local `ctgscore run`), Ray's auth
    mode unset as in a user's shell, in the temp dir where the head above left its address:
    a new local Ray of its own (not the head), token authentication on, the token written
    readable by its owner only, and a driver without the token refused by its GCS."""
    home = tmp_path / "home"
    home.mkdir()
    embedded = subprocess.Popen([sys.executable, "-c", EMBEDDED.format(temp_dir=token_head.temp_dir)],
                                env=client_env(home), cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        started = json.loads(embedded.stdout.readline() or "{}")
        assert started.get("gcs", ":").rsplit(":", 1)[1] != token_head.gcs.rsplit(":", 1)[1], started  # not the head
        assert started.get("local") is True and started.get("token") is True, started
        token_file = home / ".ray" / "auth_token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        assert len(token_file.read_text()) == 64

        stranger = tmp_path / "stranger"
        stranger.mkdir()
        joiner = join_gcs(started["gcs"], client_env(stranger, RAY_AUTH_MODE="disabled"))
        out, _ = joiner.communicate(timeout=120)
        assert joiner.returncode != 0 and "JOINED" not in out, out[-2000:]
    finally:
        if embedded.poll() is None:
            embedded.stdin.write("\n")
            embedded.stdin.flush()
            try:
                embedded.wait(timeout=60)
            except subprocess.TimeoutExpired:
                stop_group(embedded)

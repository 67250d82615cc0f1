"""Autoscaling, proven with Ray's fake multi-node provider: a head with 1 CPU and no GPU,
a GPU worker type from 0 to 2 nodes. A leaderboard-refresh config (a per-metric GPU pool of
up to 2 actors) makes the autoscaler add GPU workers from 0, the pool reaches its max_size
(one scoring actor on each GPU worker), the job finishes with every row once, and the
workers go away after the idle timeout. The ramp (seconds from job start until every GPU
worker hosts a scoring actor) is printed and recorded as a test property. The head is started here with its own
ports and temp dir (never `AutoscalingCluster.start()` or `ray stop`, which end every Ray on
the machine) and only the processes this test started are stopped."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.job_support import (
    REPO_ROOT,
    VENV_BIN,
    alive_gpu_nodes,
    child_env,
    fake_autoscaler_config,
    free_port,
    make_corpus,
    pids_using,
    stop_group,
    wait_port,
)


def _port_outside_worker_range() -> int:
    for _ in range(100):
        port = free_port()
        if not 10002 <= port <= 19999:
            return port
    raise RuntimeError("no free port outside Ray's worker port range")


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_fake_autoscaler_adds_gpu_workers_from_zero_and_removes_them(tmp_path, record_property):
    make_corpus(tmp_path / "in", shards=8, rows=40)
    config = tmp_path / "leaderboard.yaml"
    config.write_text(yaml.safe_dump({
        "input": str(tmp_path / "in"), "output": str(tmp_path / "out"),
        "metrics": [{"name": "slow_length", "params": {"delay": 0.08, "pid_dir": str(tmp_path / "pids")},
                     "pool": {"min_size": 1, "max_size": 2, "num_cpus": 0.5, "num_gpus": 1}}],  # the bigger pool
        "batch_size": 10, "part_rows": 20, "progress": False,
        "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.25, "num_gpus": 0},
    }))
    temp_dir = tempfile.mkdtemp(prefix="rja", dir="/tmp")
    port = _port_outside_worker_range()
    autoscaling = pathlib.Path(temp_dir) / "autoscaler.json"
    autoscaling.write_text(json.dumps(fake_autoscaler_config(port)))
    head = subprocess.Popen(
        [str(VENV_BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--num-cpus=1", "--num-gpus=0", f"--autoscaling-config={autoscaling}", f"--temp-dir={temp_dir}",
         "--include-dashboard=false", f"--ray-client-server-port={free_port()}",
         f"--dashboard-agent-listen-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
         f"--metrics-export-port={free_port()}", "--object-store-memory=200000000", "--disable-usage-stats"],
        # the autoscaler decides every second (Ray's default: every 5 s), so nodes come and go sooner
        env=child_env(RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1"), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    try:
        wait_port(port, timeout=60)
        driver = subprocess.run(
            [sys.executable, "-c", f"from tests.job_support import run_job_watching_nodes; "
                                   f"run_job_watching_nodes({str(config)!r}, {address!r})"],
            cwd=REPO_ROOT, env=child_env(RAY_FAKE_CLUSTER="1"), capture_output=True, text=True, timeout=240,
        )
        output = driver.stdout + driver.stderr
        assert driver.returncode == 0, output[-4000:]
        assert int(output.split("GPU_NODES_BEFORE ", 1)[1].split()[0]) == 0  # starts from zero GPU workers
        assert int(output.split("PEAK_GPU_NODES ", 1)[1].split()[0]) >= 1  # the autoscaler added workers
        metrics = json.loads(output.split("MANIFEST ", 1)[1].splitlines()[0])["slow_length"]
        assert metrics["rows_in"] == metrics["rows_out"] == 320 and metrics["rows_scored"] == 320
        # the GPU pool reached max_size: a scoring actor on each of the 2 GPU workers
        started = float(output.split("JOB_START ", 1)[1].split()[0])
        first_actor: dict[str, float] = {}
        for path in (tmp_path / "pids").iterdir():
            node, gpus, actor = path.read_text().split("\n")
            if actor and gpus:
                first_actor[node] = min(first_actor.get(node, float("inf")), path.stat().st_mtime)
        assert len(first_actor) == 2, first_actor
        ramp = max(first_actor.values()) - started
        record_property("gpu_pool_ramp_s", round(ramp, 1))
        print(f"GPU pool ramp: {ramp:.1f} s from job start until both GPU workers host a scoring actor")
        # idle GPU workers are removed after idle_timeout_minutes (0.2 min)
        deadline = time.time() + 120
        alive = alive_gpu_nodes(address)
        while alive and time.time() < deadline:
            time.sleep(1)
            alive = alive_gpu_nodes(address)
        assert alive == 0, "the idle GPU workers were not removed"
    finally:
        stop_group(head, marker=temp_dir)
    assert pids_using(temp_dir) == []

"""GPU actor pools without a GPU: a local cluster whose head has no GPU and a worker node
with 2 logical GPUs. A job with `pool.num_gpus: 1` describes its metrics on the GPU node,
places every scoring actor there, and finishes with the model on `device: cpu` (no CUDA
here); asking for `device: cuda` stays a clear config error. The cluster has its own temp
dir and is stopped by killing only the processes this test started."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.job_support import REPO_ROOT, child_env, make_corpus, pids_using, stop_group


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_gpu_pool_runs_only_on_the_gpu_node(tiny_models, tmp_path):
    make_corpus(tmp_path / "in", shards=4, rows=20)
    pid_dir = tmp_path / "pids"
    base = {"input": str(tmp_path / "in"), "batch_size": 10, "progress": False,
            "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.25, "num_gpus": 1}}
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({**base, "output": str(tmp_path / "out"), "metrics": [
        {"name": "slow_length", "params": {"pid_dir": str(pid_dir)}},
        {"name": "perplexity", "params": {"model": tiny_models["gpt2"], "device": "auto"}},
    ]}))
    cuda = tmp_path / "cuda.yaml"
    cuda.write_text(yaml.safe_dump({**base, "output": str(tmp_path / "out-cuda"), "metrics": [
        {"name": "perplexity", "params": {"model": tiny_models["gpt2"], "device": "cuda"}},
    ]}))
    temp_dir = tempfile.mkdtemp(prefix="rjg", dir="/tmp")
    driver = subprocess.Popen(
        [sys.executable, "-c", f"from tests.job_support import run_on_gpu_cluster; "
                               f"run_on_gpu_cluster({str(config)!r}, {str(cuda)!r}, {temp_dir!r})"],
        cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        output, _ = driver.communicate(timeout=280)
    finally:
        stop_group(driver, marker=temp_dir)
    assert pids_using(temp_dir) == []
    assert driver.returncode == 0, output[-4000:]
    nodes = json.loads(output.split("NODES ", 1)[1].splitlines()[0])
    metrics = json.loads(output.split("MANIFEST ", 1)[1].splitlines()[0])
    for label in ("slow_length", "perplexity"):
        assert metrics[label]["rows_out"] == metrics[label]["rows_in"] == 80
        assert metrics[label]["rows_error"] == 0
        described = metrics[label]["described_on"]
        assert described["node_id"] == nodes["gpu"] and len(described["gpu_ids"]) == 1
    assert metrics["perplexity"]["described_on"]["device"] == "cpu"
    # every process that built slow_length (the describe task and each scoring actor) ran on the GPU node
    recorded = {p.read_text() for p in pid_dir.iterdir()}
    assert recorded == {nodes["gpu"]}
    assert len(list(pid_dir.iterdir())) >= 2
    line = output.split("CUDA_ERROR ", 1)[1].splitlines()[0]
    assert line.startswith("ConfigError 2 ") and "device 'cuda' requested but CUDA is not available" in line

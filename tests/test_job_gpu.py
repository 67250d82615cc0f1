"""GPU actor pools without a GPU: a local cluster whose head has no GPU and a worker node
with 2 logical GPUs. Per-metric pools: the model metric and a GPU stand-in ask for
`metrics[].pool.num_gpus: 1` and are described and scored on the GPU node (the model on
`device: auto` -> cpu here, no CUDA), each actor holding one GPU; `text_stats` and a CPU
probe run in the job's CPU pool and hold no GPU. Asking for `device: cuda` stays a clear config error. The
cluster has its own temp dir and is stopped by killing only the processes this test started."""

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
    gpu_pids, cpu_pids = tmp_path / "gpu-pids", tmp_path / "cpu-pids"
    gpu_pool = {"min_size": 1, "max_size": 1, "num_cpus": 0.25, "num_gpus": 1}
    base = {"input": str(tmp_path / "in"), "batch_size": 10, "progress": False,
            "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.2, "num_gpus": 0}}
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({**base, "output": str(tmp_path / "out"), "metrics": [
        {"name": "slow_length", "params": {"pid_dir": str(gpu_pids)}, "pool": gpu_pool},
        {"name": "perplexity", "params": {"model": tiny_models["gpt2"]}, "pool": gpu_pool},  # device: auto
        {"name": "text_stats"},
        {"name": "slow_length", "label": "cpu_probe", "params": {"pid_dir": str(cpu_pids)}},
    ]}))
    cuda = tmp_path / "cuda.yaml"
    cuda.write_text(yaml.safe_dump({**base, "output": str(tmp_path / "out-cuda"), "metrics": [
        {"name": "perplexity", "params": {"model": tiny_models["gpt2"], "device": "cuda"}, "pool": gpu_pool},
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
    for label in ("slow_length", "perplexity", "text_stats", "cpu_probe"):
        assert metrics[label]["rows_out"] == metrics[label]["rows_in"] == 80
        assert metrics[label]["rows_error"] == 0
    for label in ("slow_length", "perplexity"):
        described = metrics[label]["described_on"]
        assert described["node_id"] == nodes["gpu"] and len(described["gpu_ids"]) == 1
    assert metrics["perplexity"]["described_on"]["device"] == "cpu"
    assert not metrics["text_stats"].get("described_on")  # a CPU metric is described on the driver
    # every process that built the GPU stand-in (describe task, scoring actors) ran on the GPU
    # node holding one GPU; the CPU-pool actors hold none (wherever Ray placed them)
    gpu_side = [p.read_text().split("\n") for p in gpu_pids.iterdir()]
    assert len(gpu_side) >= 2 and {node for node, _, _ in gpu_side} == {nodes["gpu"]}
    assert all(len(gpus.split(",")) == 1 and gpus for _, gpus, _ in gpu_side)
    cpu_side = [p.read_text().split("\n") for p in cpu_pids.iterdir()]
    assert len(cpu_side) >= 2 and all(gpus == "" for _, gpus, _ in cpu_side)
    line = output.split("CUDA_ERROR ", 1)[1].splitlines()[0]
    assert line.startswith("ConfigError 2 ") and "device 'cuda' requested but CUDA is not available" in line


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_accelerator_error_restarts_the_actor_and_the_unit_is_scored(ray_local, tmp_path):
    """The first scoring call raises a CUDA device-side assert: the actor exits, Ray restarts
    it and retries the unit, and every row comes out scored (no committed row error)."""
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job
    from tests.job_support import read_folder

    make_corpus(tmp_path / "in", shards=2, rows=12)
    markers = tmp_path / "markers"
    markers.mkdir()
    config = parse_config({
        "input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "progress": False, "batch_size": 4,
        "metrics": [{"name": "device_fault", "params": {"marker_dir": str(markers)}}],
        "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
    })
    manifest = run_job(config)
    assert (markers / "fired").exists()  # the fault did happen, in a scoring actor
    metric = manifest["metrics"]["device_fault"]
    assert metric["rows_in"] == metric["rows_out"] == metric["rows_scored"] == 24
    assert metric["rows_error"] == 0
    rows = read_folder(tmp_path / "out" / "device_fault")
    assert len(rows) == 24 and all(row["error"] is None for row in rows)
    failed_pid = float((markers / "fired").read_text())
    assert failed_pid not in {row["slow_pid"] for row in rows}  # scored by the restarted actor

"""Cluster and deployment files: cluster.yaml passes Ray's own autoscaler validation, the
KubeRay RayJob and nightly schedule have the shape the issue asks for, and every example job
config passes the job's strict config validation."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ray_jobs.config import load_config

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_cluster_yaml_is_a_valid_ray_autoscaler_config():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    validate_config(prepare_config(config))  # Ray fills its defaults, then checks the schema
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"] == {"CPU": 0}
    assert any("--num-cpus=0" in command for command in config["head_start_ray_commands"])
    workers = [t for name, t in config["available_node_types"].items() if name != config["head_node_type"]]
    # GPU workers for the model metrics' pools, CPU workers for the rule metrics' pools: each from 0
    assert len(workers) == 2 and all(w["min_workers"] == 0 and w["max_workers"] >= 1 for w in workers)
    assert config["docker"]["image"].startswith("rayproject/ray:2.60.0") and config["docker"]["image"].endswith("-gpu")
    assert config["idle_timeout_minutes"] > 0
    assert any("pip install" in c and "ctgscore" in c for c in config["setup_commands"])


def test_rayjob_and_nightly_schedule():
    rayjob = yaml.safe_load((ROOT / "deploy" / "rayjob.yaml").read_text())
    assert rayjob["kind"] == "RayJob" and rayjob["apiVersion"] == "ray.io/v1"
    assert rayjob["spec"]["entrypoint"].startswith("python -m ray_jobs.score_corpus --config examples/")
    cluster = rayjob["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    (gpu,) = cluster["workerGroupSpecs"]
    assert gpu["minReplicas"] == 0 and gpu["maxReplicas"] >= 1
    assert gpu["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    config_path = rayjob["spec"]["entrypoint"].split("--config ")[1].split()[0]
    load_config(ROOT / config_path)

    cron = yaml.safe_load((ROOT / "deploy" / "nightly-cronjob.yaml").read_text())
    command = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "ray job submit" in command and "--submission-id rescore-$(date +%F)" in command
    line = [text for text in (ROOT / "deploy" / "nightly.cron").read_text().splitlines() if text and not text.startswith("#")]
    assert len(line) == 1 and len(line[0].split()[:5]) == 5 and "--submission-id rescore-$(date +\\%F)" in line[0]


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_job_configs_validate(path):
    config = load_config(path)
    assert config.metrics

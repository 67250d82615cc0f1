"""`make gpu-check` in its dry mode (`--device cpu --tiny`): every step runs, everything lands
in one flat folder of at most 8 files, the end-to-end rows come out scored."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_check_dry_run_on_cpu(tmp_path):
    out = tmp_path / "gpu-check"
    # as on the GPU machine: `make gpu-check PY=<interpreter>` from the root, nothing but PYTHONPATH
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path), "PYTHONPATH": ""}
    import sys

    done = subprocess.run(["make", "-s", "gpu-check", f"PY={sys.executable}", f"OUT={out}",
                           "GPU_CHECK_FLAGS=--device cpu --tiny --no-ray"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    files = sorted(p.name for p in out.iterdir())
    assert all(p.is_file() for p in out.iterdir()) and len(files) <= 8
    assert {"summary.json", "summary.md", "bench_gpu.json", "bench_gpu.log", "pytest_gpu.log", "end_to_end.json"} <= set(files)
    summary = json.loads((out / "summary.json").read_text())
    # the benchmark first: its core cases must fit the time limit whatever the other steps do
    assert [s["step"] for s in summary["steps"]] == ["bench_gpu", "pytest -m gpu", "end to end"]
    assert all(s["ok"] for s in summary["steps"]), summary
    assert summary["time_limit_s"] == 480 and summary["seconds_total"] < 480
    bench = json.loads((out / "bench_gpu.json").read_text())
    assert bench["settings"]["time_limit_s"] == 480 - 105  # time kept back for pytest and end to end
    core = [r for r in bench["runs"] if r["tier"] == "core"]
    assert len(core) == 4 and all(len(r["seconds_runs"]) == 5 and r["host_reads_per_call"] == 1 and r["breakdown"] for r in core)
    markdown = (out / "summary.md").read_text()
    for part in ("# make gpu-check", "| bench_gpu | ok |", "## GPU benchmark:", "### Core: bfloat16, the engine", "### Where the time goes",
                 "## End to end"):
        assert part in markdown
    e2e = json.loads((out / "end_to_end.json").read_text())
    assert e2e["path"].startswith("two stages")
    assert {r["model"] for r in e2e["runs"]} == {"bart-tiny", "pegasus-tiny"}
    for run in e2e["runs"]:
        assert run["rows"] == 24 and run["errors"] < run["rows"] and run["finite_scores"] == run["scores"] > 0


def test_an_end_to_end_run_with_no_row_scored_fails_the_step(tmp_path, monkeypatch):
    """A model that scores no row (on the first H200 run, a package missing there turned all
    120 CTRLEval rows into errors) fails the step, and end_to_end.json still names the errors."""
    from benchmarks import gpu_check

    monkeypatch.setattr(gpu_check, "_models", lambda work, tiny: {"bart-tiny": ("bartscore", {})})
    monkeypatch.setattr(gpu_check, "_two_stage",
                        lambda name, params, rows: [{"error": "ModuleNotFoundError: nltk", "bartscore_s_h": None} for _ in rows])
    outcome = gpu_check._step("end to end", tmp_path / "e2e.log",
                              lambda: gpu_check.end_to_end(tmp_path, "cpu", True, 4, use_ray=False))
    assert outcome["ok"] is False and "no row scored by bart-tiny" in outcome["error"]
    written = json.loads((tmp_path / "end_to_end.json").read_text())
    assert written["runs"][0]["errors"] == written["runs"][0]["rows"] == 4
    assert written["runs"][0]["error_samples"][0] == "ModuleNotFoundError: nltk"


def test_end_to_end_past_the_time_limit_lists_its_models_as_skipped(tmp_path, monkeypatch):
    import time

    from benchmarks import gpu_check

    monkeypatch.setattr(gpu_check, "_models", lambda work, tiny: {"bart-tiny": ("bartscore", {}), "pegasus-tiny": ("ctrleval", {})})
    monkeypatch.setattr(gpu_check, "_two_stage", lambda *a: pytest.fail("a model ran past the time limit"))
    report = gpu_check.end_to_end(tmp_path, "cpu", True, 4, use_ray=False, deadline=time.monotonic() - 1)
    assert report["runs"] == [] and report["skipped"] == ["bart-tiny", "pegasus-tiny"]
    assert json.loads((tmp_path / "end_to_end.json").read_text())["skipped"] == ["bart-tiny", "pegasus-tiny"]

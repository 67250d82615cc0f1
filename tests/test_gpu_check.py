"""`make gpu-check` in its dry mode (`--device cpu --tiny`): every step runs, everything lands
in one flat folder of at most 8 files, every core case is profiled, the A/B of engine variants
runs end to end and its recommendations follow the rule, the end-to-end rows come out scored."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from benchmarks import gpu_ab, gpu_decide

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
    assert {r["case"] for r in core if r["breakdown"]["ms"]["gemm"] > 0} == {"s->h distinct", "s->h grouped", "ctrleval prefix", "ctrleval-ppl"}
    # the A/B of engine variants, end to end on CPU in float32: every variant built, measured or
    # unavailable for a stated reason, its scores equal to the default's within float32 tolerance
    ab = bench["ab"]
    assert ab["settings"]["dtype"] == "float32" and ab["settings"]["rounds"] >= 3 and ab["skipped"] == []
    assert [w["case"] for w in ab["workloads"]] == ["s->h distinct", "s->h grouped", "ctrleval prefix", "ctrleval-ppl"]
    for workload in ab["workloads"]:
        arms = {a["variant"]: a for a in workload["arms"]}
        kind = "causal" if workload["case"] == "ctrleval-ppl" else "seq2seq"
        assert list(arms) == ["default"] + [v.name for v in gpu_ab.VARIANTS if kind in v.engines]
        assert arms["compiled layers" if kind == "seq2seq" else "compiled blocks"]["status"] == "unavailable"  # CUDA only
        for name, arm in arms.items():
            assert arm["status"] in ("measured", "unavailable", "no effect"), arm
            if arm["status"] == "unavailable":  # only what the engine lacks: the packed decoder until it lands, compiling on CPU
                assert name in ("packed decoder+encoder flipped", "compiled layers", "compiled blocks"), arm
                continue
            if arm["status"] == "no effect":  # source runs where no decoder chunk mixes sources (CPU: per-batch planning)
                assert name == "source runs" and arm["engine_stats_per_call"] == arms["default"]["engine_stats_per_call"], arm
                continue
            assert arm["score_gap"]["max_rel"] <= 1e-5 and arm["agrees"], arm
            assert len(arm["seconds_runs"]) >= 3 and arm["engine_stats_per_call"]
            if name != "default":  # the decision is the rule applied to these runs
                assert arm["decision"] == gpu_decide.decide(arms["default"]["seconds_runs"], arm["seconds_runs"], True)
        best = max((a for a in arms.values() if a.get("decision", {}).get("win")), key=lambda a: a["decision"]["speedup"], default=None)
        assert workload["recommendation"]["variant"] == (best["variant"] if best else "default")
    assert summary["recommended_defaults"] == bench["recommended_defaults"]
    assert [r["case"] for r in summary["recommended_defaults"]["per_workload"]] == [w["case"] for w in ab["workloads"]]
    assert "3 %" in summary["recommended_defaults"]["rule"]
    markdown = (out / "summary.md").read_text()
    for part in ("# make gpu-check", "| bench_gpu | ok |", "## GPU benchmark:", "### Core: bfloat16, the engine", "### Where the time goes",
                 "### A/B of engine variants (one process)", "### Recommended defaults", "## End to end"):
        assert part in markdown
    for rec in summary["recommended_defaults"]["per_workload"]:
        assert f"| {rec['model']} {rec['case']} | {rec['engine']} | {rec['variant']} |" in markdown
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

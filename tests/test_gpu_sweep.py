"""`make gpu-sweep` in its dry mode: every point of the grid is measured or listed as skipped
with its reason, the engine gets the point's settings, and a time limit still writes both
files."""

from __future__ import annotations

import json

import pytest

from benchmarks import gpu_sweep


def test_the_grid_runs_the_default_budget_first_and_gives_the_causal_model_one_point_per_setting():
    points = gpu_sweep.grid()
    assert len(points) == 2 * 3 * (3 * 2 + 1)  # compile x budgets x (three seq2seq cases x cross-batch + GPT-2)
    assert [p["token_budget"] for p in points[:14]] == [32_768] * 14 and points[-1]["token_budget"] == 131_072
    assert [p["compile_layers"] for p in points[:14]] == [False] * 7 + [True] * 7
    assert {p["cross_batch"] for p in points if p["case"] == "ppl"} == {None}
    assert {(p["token_budget"], p["cross_batch"]) for p in points if p["case"] == "distinct"} == {
        (b, c) for b in (32_768, 65_536, 131_072) for c in (True, False)}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dry_sweep_measures_or_skips_every_point(tmp_path):
    report = gpu_sweep.main(["--tiny", "--device", "cpu", "--out", str(tmp_path), "--min-seconds", "0.01", "--measurements", "3",
                             "--budgets", "32768,65536", "--cases", "distinct,ppl"])
    points = report["settings"]["sweep_points"]
    assert len(points) == 2 * 2 * 3
    seen = [r["sweep"] for r in report["runs"]] + [s["sweep"] for s in report["skipped"]]
    assert sorted(map(json.dumps, seen)) == sorted(map(json.dumps, points))
    assert all(s["reason"].startswith("the engine takes no") for s in report["skipped"])  # settings an engine lacks
    for r in report["runs"]:
        point = r["sweep"]
        assert r["engine"]["token_budget"] == point["token_budget"] == r["token_budget"]
        if point["cross_batch"] is not None:
            assert r["engine"]["cross_batch"] is point["cross_batch"]
        assert len(r["seconds_runs"]) == 3 and r["pairs_per_s"] > 0
    written = json.loads((tmp_path / "sweep.json").read_text())
    assert len(written["runs"]) == len(report["runs"])
    markdown = (tmp_path / "sweep.md").read_text()
    assert markdown.count("| bart s->h distinct |") == sum(1 for r in report["runs"] if r["model"] == "bart")


def test_a_sweep_past_its_time_limit_still_writes_what_it_has(tmp_path):
    report = gpu_sweep.main(["--tiny", "--device", "cpu", "--out", str(tmp_path), "--time-limit", "0.001", "--cases", "ppl"])
    assert report["runs"] == [] and report["time_limit_hit"]
    assert all(s["reason"].startswith("time limit") for s in report["skipped"]) and len(report["skipped"]) == 6
    assert "(time limit reached)" in (tmp_path / "sweep.md").read_text()
    assert json.loads((tmp_path / "sweep.json").read_text())["skipped"]

"""`benchmarks/bench_gpu.py` in its dry mode (`--tiny --device cpu`: tiny models, short timing
floors): every core case, the A/B of engine variants and every extra runs, the JSON and the markdown summary carry what a GPU
run needs to be read (steady-state runs, held-out rows, peaks per dtype, breakdowns), and the
time limit and failures skip items without losing the others."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from benchmarks import bench_gpu, gpu_report

REPO = pathlib.Path(__file__).resolve().parents[1]
CORE_CASES = {("bart", "s->h distinct"), ("bart", "s->h grouped"), ("pegasus", "ctrleval prefix"), ("gpt2", "ctrleval-ppl")}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dry_mode_runs_standalone_and_writes_json_and_markdown(tmp_path):
    out = tmp_path / "bench_gpu.json"
    # a plain interpreter in the repository root, the repository not on PYTHONPATH: the script
    # finds the working tree's `scoring` itself, as on a GPU machine where nothing is installed
    # (other PYTHONPATH entries stay: the carried wheels' folder, `make gpu-rehearsal`)
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and pathlib.Path(p).resolve() != REPO]
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1",
           **({"PYTHONPATH": os.pathsep.join(others)} if others else {})}
    done = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--tiny", "--device", "cpu", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=230)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    machine, settings = report["machine"], report["settings"]
    assert machine["torch"] and machine["transformers"] and machine["peaks"]["bf16_tflops"] is None and machine["peaks"]["reason"]
    assert set(machine["varlen_attn"]) == {"plain", "grouped_heads", "source_runs"}
    assert settings["min_seconds"] == 0.05 and settings["measurements"] == 5 and settings["held_out_share"] == 0.7
    assert {g["dtype"] for g in report["gemm_ceiling"]} == {"bfloat16", "float32"} and all(g["tflops"] > 0 for g in report["gemm_ceiling"])
    assert report["skipped"] == [] and not report["time_limit_hit"]
    core = [r for r in report["runs"] if r["tier"] == "core"]
    assert {(r["model"], r["case"]) for r in core} == CORE_CASES
    assert all(r["dtype"] == "bfloat16" and r["mode"] == "engine" and r["ids_from"] == "arrow" for r in core)
    for r in report["runs"]:
        assert len(r["seconds_runs"]) == 5 and min(r["wall_per_run"]) >= 0.05
        assert r["seconds"] == sorted(r["seconds_runs"])[2]  # the median of the 5 runs
        assert r["first_call_seconds"] > 0 and r["pairs_per_s"] > 0 and r["useful_flops"] > 0
        assert r["mfu"] is None and r["peak_flops"] is None  # no peak for a CPU: null, never a guess
        assert 0 < r["gemm_ceiling_fraction"]
    for r in core:
        b = r["breakdown"]
        assert set(b["ms"]) == {"gemm", "attention", "head", "elementwise", "memcpy", "other", "idle"}
        assert 0 < b["busy_fraction"] <= 1 and b["ms"]["gemm"] > 0 and b["top"]
        assert r["host_reads_per_call"] == 1 and r["engine_stats_per_call"]
    assert {r["case"]: r["breakdown"]["ms"]["head"] > 0 for r in core if r["model"] == "bart"} == {"s->h distinct": True, "s->h grouped": True}
    extras = {(r["model"], r["case"], r["dtype"], r["mode"]) for r in report["runs"] if r["tier"] == "extra"}
    for model, case in CORE_CASES:
        assert {(model, case, "float32", "engine"), (model, case, "bfloat16", "plain")} <= extras
    # the A/B of engine variants in one process, between the core cases and the extras: cross-batch
    # planning the other way than the default engine's on every seq2seq workload
    workloads = {w["case"]: w for w in report["ab"]["workloads"]}
    assert set(workloads) == {case for _, case in CORE_CASES}
    for case in ("s->h distinct", "s->h grouped", "ctrleval prefix"):
        arms = {a["variant"]: a for a in workloads[case]["arms"]}
        assert arms["cross-batch flipped"]["engine"]["cross_batch"] is (not arms["default"]["engine"]["cross_batch"])
    assert [w["recommendation"] for w in report["ab"]["workloads"]] == report["recommended_defaults"]["per_workload"]
    # the engine computes the plain forwards' NLLs (random-init models: ~ln(vocabulary) nats each)
    gaps = [r["max_abs_nll_gap_to_engine"] for r in report["runs"] if "max_abs_nll_gap_to_engine" in r]
    assert len(gaps) == 3 and max(gaps) < 1e-3
    markdown = out.with_suffix(".md").read_text()
    for heading in ("# GPU benchmark:", "## Core: bfloat16, the engine", "## Where the time goes", "## Engine counters per call",
                    "## A/B of engine variants (one process)", "## Recommended defaults", "## Extras"):
        assert heading in markdown
    assert markdown.index("## A/B of engine variants") < markdown.index("## Extras")
    assert markdown.count("| bart | bfloat16 | s->h distinct | engine |") == 1
    assert "| bart s->h distinct | cross-batch flipped | measured |" in markdown and "engine / plain" in markdown
    assert "pairs/s" in done.stdout and "MFU n/a" in done.stdout


def _args(*extra):
    return bench_gpu.finish_args(bench_gpu.parser().parse_args(["--tiny", "--device", "cpu", "--min-seconds", "0.01", "--measurements", "3", *extra]))


def test_mfu_divides_each_dtype_by_its_own_peak():
    args = _args("--peak-tflops", "100", "--peak-fp32-tflops", "10")
    items = [("distinct", dtype, "engine", "core", {}, False, None) for dtype in ("bfloat16", "float32")]
    report = bench_gpu.measure(args, items=items)
    runs = {r["dtype"]: r for r in report["runs"]}
    assert runs["bfloat16"]["peak_flops"] == 100e12 and runs["float32"]["peak_flops"] == 10e12
    for r in runs.values():
        assert r["mfu"] == pytest.approx(r["useful_flops"] / r["seconds"] / r["peak_flops"])
    assert "Peak override" in gpu_report.render_markdown(report)


def test_timed_rows_are_held_out_from_the_warm_up():
    data = json.loads(bench_gpu.LENGTHS.read_text())
    sides = bench_gpu.split_rows(data)
    warm_docs = {doc for doc, _, _ in sides["warm"]["summeval"]}
    timed_docs = {doc for doc, _, _ in sides["timed"]["summeval"]}
    assert warm_docs and timed_docs and not warm_docs & timed_docs  # a timed source never warms up
    assert len(timed_docs) == 70 and len(sides["timed"]["summeval"]) + len(sides["warm"]["summeval"]) == len(data["summeval"])
    assert len(sides["timed"]["ctrleval"]) == round(0.7 * len(data["ctrleval"]))
    assert sides == bench_gpu.split_rows(data)  # seeded
    capped = bench_gpu.split_rows(data, timed_rows=12, warm_rows=6)
    assert len(capped["timed"]["summeval"]) == 12 and len(capped["warm"]["ctrleval"]) == 6


def test_engine_counters_are_read_whatever_their_names():
    class Engine:
        stats = {"decoder_tokens_padded": 150, "decoder_tokens_real": 100, "encoder_tokens_padded": 105, "encoder_tokens_real": 100,
                 "bytes_pooled": 4096, "pool": {"bytes_gathered": 8}, "flag": True, "note": "text"}

    stats = bench_gpu.engine_stats(Engine())
    assert stats == {"decoder_tokens_padded": 150, "decoder_tokens_real": 100, "encoder_tokens_padded": 105, "encoder_tokens_real": 100,
                     "bytes_pooled": 4096, "pool.bytes_gathered": 8}
    assert bench_gpu.stat_ratios(stats) == {"decoder_tokens_padded_per_real": 1.5, "encoder_tokens_padded_per_real": 1.05}
    assert bench_gpu.engine_stats(object()) is None and bench_gpu.stat_ratios(None) == {}


def test_the_time_limit_and_failures_skip_items_and_keep_the_rest(tmp_path):
    args = _args("--time-limit", "0.001")
    written = []
    report = bench_gpu.measure(args, save=lambda r: written.append(json.dumps(r)))
    assert report["runs"] == [] and report["time_limit_hit"] and written
    assert len(report["skipped"]) == len(bench_gpu.CORE) + len(bench_gpu.EXTRAS)
    assert report["ab"]["workloads"] == [] and {s["reason"] for s in report["ab"]["skipped"]} == {"its core case did not run"}
    assert all(s["reason"].startswith("time limit") for s in report["skipped"])
    assert "## Skipped" in gpu_report.render_markdown(report)
    items = [("prefix", "bfloat16", "engine", "core", {"no_such_setting": 1}, False, None),
             ("ppl", "bfloat16", "engine", "core", {}, False, None)]
    report = bench_gpu.measure(_args(), items=items)
    assert [s["reason"] for s in report["skipped"]] == ["the engine takes no no_such_setting"]
    assert [(r["model"], r["case"]) for r in report["runs"]] == [("gpt2", "ctrleval-ppl")]


def test_useful_flops_match_the_hand_count_for_bart_large():
    """BART-large, one source of 500 tokens and one target of 60 (docs/gpu.md): encoder
    linears 151.2 + encoder attention 12.3 + cross K/V 25.2 + decoder linears 21.2 + decoder
    attention 1.6 + output layer 6.2 = 217.7 GFLOP, counted by hand from d = 1,024, FFN 4,096,
    12 + 12 layers and V = 50,265; embeddings are not multiplications."""
    import torch
    import transformers

    from benchmarks.bench_gpu import SIZES, useful_flops

    with torch.device("meta"):
        model = transformers.BartForConditionalGeneration(transformers.BartConfig(**SIZES["large"]["bart"]))
    flops = useful_flops(model, [[5] * 500], [[[7] * 60]])
    assert flops == pytest.approx(217.7e9, rel=0.005)
    everything = 2 * sum(p.numel() for p in model.parameters()) * 560
    assert everything > 1.05 * flops  # the old count, with embeddings, reads high


def test_the_report_says_which_packed_calls_ran_the_varlen_kernel():
    line = gpu_report.varlen_line({"plain": True, "grouped_heads": False, "source_runs": False}, "2.11.0+cu130")
    assert line == ("Packed attention with torch 2.11.0+cu130: varlen kernel for packed self- and cross-attention; "
                    "SDPA for grouped-query heads, source runs (`seqused_k`).")
    assert gpu_report.varlen_line(dict.fromkeys(("plain", "grouped_heads", "source_runs"), False), "2.9.0").endswith(
        "varlen kernel for nothing; SDPA for packed self- and cross-attention, grouped-query heads, source runs (`seqused_k`).")

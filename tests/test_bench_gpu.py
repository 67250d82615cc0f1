"""`benchmarks/bench_gpu.py --tiny --device cpu`: the GPU benchmark's smoke run (every model,
dtype and workload, engine and plain forwards, the profiler summary) without a GPU."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_gpu_tiny_on_cpu_runs_standalone(tmp_path):
    out = tmp_path / "bench_gpu.json"
    # a plain interpreter in the repository root, without PYTHONPATH: the script finds the
    # working tree's `scoring` itself, as on a GPU machine where nothing is installed
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--tiny", "--device", "cpu", "--rows", "8", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    runs = {(r["model"], r["dtype"], r["case"], r["mode"]) for r in report["runs"]}
    for dtype in ("bfloat16", "float32"):
        for model, case in (("bart", "s->h distinct"), ("bart", "s->h grouped"), ("pegasus", "ctrleval prefix"), ("gpt2", "ctrleval-ppl")):
            assert {(model, dtype, case, "engine"), (model, dtype, case, "plain")} <= runs
    assert all(r["pairs_per_s"] > 0 for r in report["runs"])
    # the engine computes the plain forwards' NLLs (random-init models: ~ln(vocabulary) nats each)
    gaps = [r["max_abs_nll_gap_to_engine"] for r in report["runs"] if "max_abs_nll_gap_to_engine" in r]
    assert len(gaps) == 6 and max(gaps) < 1e-3
    assert "Self CPU time total" in report["profile"]
    assert "pairs/s" in done.stdout and "MFU n/a" in done.stdout  # no peak known for a CPU


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

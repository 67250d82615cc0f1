"""Decoder tokens computed per real target token, per-encoder-batch planning against planning
across encoder batches (docs/gpu.md, "Decoder chunks").

The count follows from the plan alone (lengths, token budget, layout), so it runs on CPU: the
engine scores with a tiny random BART (1+1 layers, d 32) and plans as on CUDA (`on_cuda`,
decoder chunks up to the token budget, gathered keys/values bounded), at the real token
lengths of `benchmarks/gpu_lengths.json` (1,600 SummEval pairs: distinct sources, and 16
summaries per document; 1,320 CTRLEval text -> prefix pairs) and token budgets 16,384 and
32,768. "before" is per-batch planning (`cross_batch` off), "after" cross-batch planning at
the engine's default pool (`POOL_BUDGETS` x the token budget of source tokens) and padding
cap; other pool sizes are listed beside it, and the default pool with cross-attention per
source (`source_runs`). Each run also reports the bytes copied into pools and gathered for
decoder chunks, scaled to BART-large bfloat16 sizes. Each run also gives the largest relative
difference of its scores from "before" (the same numbers, up to float32 rounding).

Run: `.venv/bin/python -m benchmarks.bench_decoder_padding [--token-budgets 16384,32768] [--pools 2,8]`
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch

from benchmarks.bench_feed import tiny_bart, write_report
from benchmarks.bench_gpu import workloads
from scoring.engine import Ragged, Seq2SeqLikelihood

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
VOCABULARY = 64
CASES = {"distinct": "SummEval s->h, distinct sources", "grouped": "SummEval s->h, 16 summaries per source",
         "prefix": "CTRLEval text -> prefix"}


def as_ragged(work: dict) -> tuple[Ragged, Ragged, list[range]]:
    groups, start = [], 0
    for targets in work["targets"]:
        groups.append(range(start, start + len(targets)))
        start += len(targets)
    return Ragged.from_lists(work["sources"]), Ragged.from_lists([t for ts in work["targets"] for t in ts]), groups


def plan_run(engine: Seq2SeqLikelihood, work, cross_batch: bool, pool_budgets: int, source_runs: bool = False) -> dict:
    """One engine call planned as on CUDA: its decoder padding, forwards and scores."""
    engine.cross_batch, engine.pool_budgets, engine.source_runs = cross_batch, pool_budgets, source_runs
    engine.stats.clear()
    start = time.perf_counter()
    scores = engine.pair_nll(*work)
    stats = engine.stats
    return {"padded_per_real": stats["decoder_tokens_padded"] / stats["decoder_tokens_real"],
            "decoder_passes": stats["decoder_passes"], "encoder_passes": stats["encoder_passes"],
            "decoder_tokens_real": stats["decoder_tokens_real"], "decoder_tokens_padded": stats["decoder_tokens_padded"],
            **memory_traffic(engine, stats), "seconds_cpu_tiny": time.perf_counter() - start, "scores": scores}


# BART-large in bfloat16: d 1,024, 12 decoder layers, 2 bytes per element
LARGE_WIDTH, LARGE_DECODER_LAYERS, LARGE_BYTES = 1024, 12, 2


def memory_traffic(engine: Seq2SeqLikelihood, stats) -> dict:
    """Bytes copied into pools and gathered for decoder chunks (the engine's stats, tiny model,
    float32), and the same counts at BART-large bfloat16 sizes: a pooled byte is part of one
    encoder state (d elements), a gathered one part of a source token's keys and values in
    every decoder layer (2 x layers x d elements)."""
    config = engine.model.config
    pooled_tokens = stats["bytes_pooled"] / (config.d_model * 4)
    gathered_tokens = stats["bytes_gathered"] / (2 * config.decoder_layers * config.d_model * 4)
    return {"bytes_pooled": stats["bytes_pooled"], "bytes_gathered": stats["bytes_gathered"],
            "bart_large_bf16_gb_pooled": pooled_tokens * LARGE_WIDTH * LARGE_BYTES / 1e9,
            "bart_large_bf16_gb_gathered": gathered_tokens * 2 * LARGE_DECODER_LAYERS * LARGE_WIDTH * LARGE_BYTES / 1e9}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--token-budgets", default="16384,32768")
    parser.add_argument("--pools", default="2,8", help="other pool sizes (x the token budget) listed beside the default")
    parser.add_argument("--out", default=str(RESULTS / "bench_decoder_padding.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = tiny_bart(VOCABULARY)
    data = workloads(1600, VOCABULARY)
    default_pool = Seq2SeqLikelihood.POOL_BUDGETS
    report: dict = {"model": "random BART, 1+1 layers, d 32 (planning only)", "default_pool_budgets": default_pool,
                    "max_decoder_padding": Seq2SeqLikelihood.MAX_DECODER_PADDING, "budgets": {}}
    for budget in (int(value) for value in args.token_budgets.split(",")):
        engine = Seq2SeqLikelihood(model, pad_id=1, decoder_start_id=2, token_budget=budget)
        engine.on_cuda, engine.decode_token_budget = True, budget  # plan as on a GPU
        cases = report["budgets"][str(budget)] = {}
        for case in CASES:
            work = as_ragged(data[case])
            before = plan_run(engine, work, False, default_pool)
            runs = {"before": before}
            for pool in [default_pool] + [int(p) for p in args.pools.split(",") if int(p) != default_pool]:
                run = plan_run(engine, work, True, pool)
                run["max_rel_score_diff"] = max(abs(a - b) / abs(b) for a, b in zip(run["scores"], before["scores"]))
                runs["after" if pool == default_pool else f"pool x{pool}"] = run
            run = plan_run(engine, work, True, default_pool, source_runs=True)
            run["max_rel_score_diff"] = max(abs(a - b) / abs(b) for a, b in zip(run["scores"], before["scores"]))
            runs["after, source runs"] = run
            for run in runs.values():
                del run["scores"]
            cases[case] = runs
            others = ", ".join(f"{name} {run['padded_per_real']:.3f}" for name, run in runs.items() if name.startswith("pool"))
            print(f"budget {budget:,} {CASES[case]}: decoder tokens per real token {before['padded_per_real']:.3f} before "
                  f"({before['decoder_passes']} decoder forwards), {runs['after']['padded_per_real']:.3f} after "
                  f"(pool x{default_pool}, {runs['after']['decoder_passes']} forwards; {others}); "
                  f"BART-large bf16 traffic after: {runs['after']['bart_large_bf16_gb_pooled']:.1f} GB pooled, "
                  f"{runs['after']['bart_large_bf16_gb_gathered']:.1f} GB gathered (before: "
                  f"{before['bart_large_bf16_gb_gathered']:.1f} GB gathered); with source runs "
                  f"{runs['after, source runs']['decoder_passes']} forwards, {runs['after, source runs']['padded_per_real']:.3f} "
                  f"per real token, {runs['after, source runs']['bart_large_bf16_gb_gathered']:.1f} GB gathered; "
                  f"scores within {runs['after']['max_rel_score_diff']:.1e} relative", flush=True)
    return write_report(args.out, report)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)

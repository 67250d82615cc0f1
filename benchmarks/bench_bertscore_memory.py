"""BERTScore peak memory (and CPU time) for one row with many long references:
`python -m benchmarks.bench_bertscore_memory [--references 1000] [--words 400]`.

One row: a text and `--references` distinct references, each cut to the model's 512 tokens,
scored by `scoring.bertscore.BERTScorer` on a random tiny RoBERTa (2 layers, 64 wide, built
here), once with the default reference chunks and similarity blocks and once with both
budgets unbounded (every reference embedded at once and one text x all-references
similarity matrix, as before the chunking). Each side runs in its own fresh process; the
measure is the growth of its peak resident memory (`ru_maxrss`) over its resident memory
just before `score_with_flags`, and the CPU seconds of that call (for information: one run on
shared cores). The two runs' P, R and F are printed with their largest
difference. Writes the Markdown table to benchmarks/results/bertscore_memory.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from benchmarks.data import publish

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "bench" / "roberta-tiny-memory"
RESULTS = REPO / "benchmarks" / "results" / "bertscore_memory.md"
UNBOUNDED = 1 << 62


def _words(count: int, seed: int) -> str:
    import random

    from ctgscore.testing.tiny_models import corpus_lines

    vocabulary = sorted({word for line in corpus_lines() for word in line.split()})
    rng = random.Random(seed)
    return " ".join(rng.choice(vocabulary) for _ in range(count))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(model: str, references: int, words: int, unbounded: bool) -> None:
    import resource

    import torch

    from scoring.bertscore import BERTScorer

    torch.set_num_threads(1)
    scorer = BERTScorer(model, layer=2)
    if unbounded:
        scorer.reference_chunk_tokens = UNBOUNDED
        scorer.similarity_cells = UNBOUNDED
    text = _words(words, 0)
    group = [_words(words, 1 + index) for index in range(references)]
    scorer.score_with_flags(["warm up"], [["warm up"]])
    before = _rss_bytes()
    start = time.process_time()
    scores, flags = scorer.score_with_flags([text], [group])
    seconds = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"growth": peak - before, "seconds": seconds, "scores": scores[0], "truncated": flags[0],
                      "chunk": getattr(scorer, "reference_chunk_tokens", None),
                      "cells": getattr(scorer, "similarity_cells", None)}))


def _run(model: str, references: int, words: int, unbounded: bool) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_bertscore_memory", "--child", model,
               "--references", str(references), "--words", str(words)] + (["--unbounded"] if unbounded else [])
    out = subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--references", type=int, default=1000)
    parser.add_argument("--words", type=int, default=400, help="words per text and reference (cut to 512 tokens)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--unbounded", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.references, args.words, args.unbounded)
        return 0
    from ctgscore.testing.tiny_models import build_roberta

    model = CACHE / "roberta"
    if not (model / "config.json").exists():
        build_roberta(model, seed=4)
    unbounded = _run(str(model), args.references, args.words, True)
    chunked = _run(str(model), args.references, args.words, False)
    difference = max(abs(a - b) for a, b in zip(unbounded["scores"], chunked["scores"]))
    mib = 1 << 20
    lines = [
        f"One row, {args.references} distinct references of {args.words} words (truncated: {chunked['truncated']}), "
        "tiny RoBERTa (2 layers, 64 wide), one torch thread, each side in a fresh process.",
        "",
        "| scoring | peak memory growth | ratio | CPU seconds | ratio |",
        "|---|---|---|---|---|",
        f"| all references at once, one similarity matrix | {unbounded['growth'] / mib:,.0f} MiB | 1 "
        f"| {unbounded['seconds']:.1f} | 1 |",
        f"| reference chunks of {chunked['chunk']:,} tokens, similarity blocks of {chunked['cells']:,} cells "
        f"| {chunked['growth'] / mib:,.0f} MiB | {chunked['growth'] / unbounded['growth']:.3f} "
        f"| {chunked['seconds']:.1f} | {chunked['seconds'] / unbounded['seconds']:.2f} |",
        "",
        f"P, R, F: {chunked['scores']}; largest difference between the two: {difference:.2e}",
    ]
    return publish(lines, RESULTS, write=not args.no_write)


if __name__ == "__main__":
    sys.exit(main())

"""What holding stderr back costs a tokenizer call: `python -m benchmarks.bench_held_stderr`.

The tiny GPT-2's tokenizer (`ctgscore.testing.tiny_models`) tokenises the BAGEL texts of the
data slice (150 rows), one text a call and 32 texts a call, with its Rust backend behind the
guard (`scoring.quiet_tokenizer`, as `load_tokenizer` returns it) and bare; the rounds alternate
and the median per call is kept. Also an empty `held_stderr()` block alone. Writes the Markdown
table to benchmarks/results/held_stderr.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import tempfile
import time

from benchmarks.data import publish, real_data_root

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

REPO = pathlib.Path(__file__).resolve().parents[1]
ROUNDS = 15
BATCH_PASSES = 10  # passes over the texts in 32-text calls, per round


def _per_call(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    from ctgscore.testing.tiny_models import build_gpt2
    from scoring.held_stderr import held_stderr
    from scoring.models import load_tokenizer, resolve_model

    texts = [t for t in pq.read_table(real_data_root() / "corpora" / "bagel.parquet", columns=["text"])["text"].to_pylist() if t]
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_tokenizer(resolve_model(str(build_gpt2(pathlib.Path(tmp) / "gpt2"))))
    guarded, bare = tokenizer._tokenizer, tokenizer._tokenizer._rust

    def one_by_one():
        for text in texts:
            tokenizer([text], add_special_tokens=False)

    def in_batches():
        for _ in range(BATCH_PASSES):
            for i in range(0, len(texts), 32):
                tokenizer(texts[i:i + 32], add_special_tokens=False)

    def empty_block():
        with held_stderr():
            pass

    one_calls, batch_calls = len(texts), BATCH_PASSES * -(-len(texts) // 32)
    times: dict[str, list[float]] = {key: [] for key in ("one guarded", "one bare", "batch guarded", "batch bare", "block")}
    for _ in range(ROUNDS):
        for backend, label in ((guarded, "guarded"), (bare, "bare")):
            tokenizer._tokenizer = backend
            times[f"one {label}"].append(_per_call(one_by_one, 1) / one_calls)
            times[f"batch {label}"].append(_per_call(in_batches, 1) / batch_calls)
        times["block"].append(_per_call(empty_block, 1_000))
    tokenizer._tokenizer = guarded
    median = {key: statistics.median(values) * 1e6 for key, values in times.items()}

    lines = [
        f"Tiny GPT-2 tokenizer, {len(texts)} BAGEL texts of the data slice, median of {ROUNDS} alternating rounds (µs per call).",
        "",
        "| call | bare backend | behind the guard | overhead | ratio |",
        "|---|---|---|---|---|",
    ]
    for key, label in (("one", "one text"), ("batch", "32 texts")):
        bare_us, guarded_us = median[f"{key} bare"], median[f"{key} guarded"]
        lines.append(f"| {label} | {bare_us:.1f} | {guarded_us:.1f} | {guarded_us - bare_us:+.1f} | {guarded_us / bare_us:.2f}× |")
    lines.append(f"| empty `held_stderr()` block | | {median['block']:.1f} | | |")
    return publish(lines, REPO / "benchmarks" / "results" / "held_stderr.md", write=not args.no_write)


if __name__ == "__main__":
    raise SystemExit(main())

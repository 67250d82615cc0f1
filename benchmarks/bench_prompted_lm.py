"""gptscore's shared-prompt path against independent prompt + continuation forwards, on the
grouped SummEval workload (docs/metrics.md, "Prompted LM likelihood"; the engine:
scoring/prompt_cache.py).

Workload: the first `--docs` SummEval documents of `benchmarks/gpu_lengths.json` with their 16
system summaries each, at their real token lengths (source 446 tokens on average, summary 70),
as random ids; each prompt is a 32-token instruction followed by the source, each continuation
a summary. Model: a random Llama-shaped decoder (hidden 1,024, 16 query heads over 4
key/value heads, feed-forward 2,816, RoPE, `--layers` layers) with a 1,000-id vocabulary, so the
output head's share of the per-token work (2 %) is what it is in a 32-layer Llama-7B (131 M of
6.6 G multiply-adds per token): with few layers and a 32k vocabulary the head, which both
paths run on every continuation token, would weigh twelve times more than in the models people
use. One process, one thread, both paths in the same run: the ratio is what is reported (of CPU
seconds on CPU, so other processes on a shared machine do not skew it; wall seconds are listed
too), the seconds only describe this machine. Also on CUDA when one is given (`--device cuda`, bf16).

Run: `.venv/bin/python -m benchmarks.bench_prompted_lm [--docs 2] [--layers 2] [--device cpu]`
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
import time

import torch

from scoring.engine import Ragged
from scoring.prompt_cache import PromptedLikelihood

REPO = pathlib.Path(__file__).resolve().parents[1]
LENGTHS = REPO / "benchmarks" / "gpu_lengths.json"
RESULTS = REPO / "benchmarks" / "results"
VOCABULARY = 1000
INSTRUCTION_TOKENS = 32


def grouped_workload(docs: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, continuations): 16 pairs per document sharing one prompt."""
    rng = random.Random(seed)
    by_doc: dict[str, tuple[int, list[int]]] = {}
    for doc, source, summary in json.loads(LENGTHS.read_text())["summeval"]:
        by_doc.setdefault(doc, (source, []))[1].append(summary)
    instruction = [rng.randrange(3, VOCABULARY) for _ in range(INSTRUCTION_TOKENS)]
    prompts, continuations = [], []
    for source, summaries in list(by_doc.values())[:docs]:
        prompt = [1] + instruction + [rng.randrange(3, VOCABULARY) for _ in range(source)]
        for length in summaries:
            prompts.append(prompt)
            continuations.append([rng.randrange(3, VOCABULARY) for _ in range(length)])
    return prompts, continuations


def llama_model(layers: int, device: str, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCABULARY, hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval().to(device=device, dtype=dtype)


def run(engine: PromptedLikelihood, prompts: Ragged, continuations: Ragged, device: str) -> tuple[float, float, list]:
    """(wall seconds, this process's CPU seconds, results)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start, cpu = time.perf_counter(), time.process_time()
    results = engine.continuation_logprobs(prompts, continuations)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, time.process_time() - cpu, results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--token-budget", type=int, default=4096)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "bench_prompted_lm.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    model = llama_model(args.layers, args.device, dtype)
    prompt_lists, continuation_lists = grouped_workload(args.docs)
    prompts, continuations = Ragged.from_lists(prompt_lists), Ragged.from_lists(continuation_lists)
    distinct = sum(len(p) for p in {tuple(p): p for p in prompt_lists}.values())
    report = {"device": args.device, "dtype": str(dtype).replace("torch.", ""), "layers": args.layers, "hidden": 1024,
              "vocabulary": VOCABULARY, "docs": args.docs, "pairs": len(prompt_lists), "token_budget": args.token_budget,
              "threads": args.threads, "mean_prompt_tokens": round(distinct / args.docs, 1),
              "mean_continuation_tokens": round(float(continuations.lengths.mean()), 1), "distinct_prompt_tokens": distinct}
    # a warm-up pass on one document's pairs, so neither path pays first-call costs
    for share in (True, False):
        PromptedLikelihood(model, pad_id=0, token_budget=args.token_budget, share_prompts=share).continuation_logprobs(
            prompts.take(range(4)), continuations.take(range(4)))
    outcome = {}
    for name, share in (("independent", False), ("shared", True)):
        engine = PromptedLikelihood(model, pad_id=0, token_budget=args.token_budget, share_prompts=share)
        seconds, cpu_seconds, results = run(engine, prompts, continuations, args.device)
        outcome[name] = results
        report[name] = {"seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds, 3), "prompt_tokens_computed": engine.stats["prompt_tokens_computed"],
                        "prompt_tokens_requested": engine.stats["prompt_tokens_requested"],
                        "forward_passes": engine.stats["prompt_passes"] + engine.stats["continuation_passes"]}
    # on CPU the ratio of CPU seconds (one thread): wall time on a shared machine counts the
    # other processes too; on CUDA the wall time (the host waits for the device)
    clock = "cpu_seconds" if args.device == "cpu" else "seconds"
    report["speedup_clock"] = clock
    report["speedup"] = round(report["independent"][clock] / report["shared"][clock], 2)
    report["prompt_tokens_computed_per_distinct"] = round(report["shared"]["prompt_tokens_computed"] / distinct, 3)
    report["max_relative_difference"] = max(abs(a / n - b / m) / abs(b / m) for (a, n), (b, m) in zip(outcome["shared"], outcome["independent"]))
    pathlib.Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)

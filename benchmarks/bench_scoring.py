"""Scoring-core speed, measured in one run on one machine.

Models: random-init BART at bart-base size (d_model 768, 6+6 layers, vocab 50,265) and
PEGASUS at the same size (vocab 96,103), both with the tiny tokenizers; the numbers say
nothing about quality, only speed. Data: real SummEval rows (s->h: source document ->
summary) and CTRLEval sentiment rows from the real corpora (benchmarks/data.py).

Rows:
1. BARTScore s->h pairs/s, ours (length-sorted, token budget, shared sources) at float32 and
   bfloat16 vs an original-style loop (input order, fixed batch 4, float32, full
   log_softmax + NLLLoss, no_grad).
2. A 70-prompt decoder-side ensemble: ours (one encoder pass per source) vs scoring each
   prompt separately with the original-style loop.
3. CTRLEval relevance on the 24 sentiment prompts x 3 verbalisers: ours (one encoder pass
   per prompt, all label words decoded together) vs one forward per (prompt, verbaliser,
   label) over batches of 8 texts, like the original.

Run: `.venv/bin/python -m benchmarks.bench_scoring [--rows 200] [--prompt-rows 8] [--rel-rows 24]`
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pyarrow.parquet as pq
import torch

from benchmarks.data import real_data_root
from scoring.bartscore import BARTScorer, decoder_prompted
from scoring.ctrleval import MASK, CTRLEval, Verbalizer
from scoring.resources import BARTSCORE_PROMPTS, ctrleval_task_paths
from scoring.text_encoding import read_lines

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORPORA = real_data_root() / "corpora"
CACHE = ROOT / ".cache" / "bench"
RESULTS = ROOT / "benchmarks" / "results" / "scoring.md"
BASE = {"d_model": 768, "layers": 6, "heads": 12, "ffn": 3072}


def bench_models() -> dict[str, str]:
    from ctgscore.testing.tiny_models import build_bart, build_pegasus

    paths = {"bart": CACHE / "bart-base-random", "pegasus": CACHE / "pegasus-base-random"}
    if not (paths["bart"] / "model.safetensors").exists():
        build_bart(paths["bart"], seed=11, sizes=BASE, vocab_size=50265)
    if not (paths["pegasus"] / "model.safetensors").exists():
        build_pegasus(paths["pegasus"], seed=12, sizes=BASE, vocab_size=96103)
    return {k: str(v) for k, v in paths.items()}


class OriginalStyleBARTScore:
    """The original loop's shape: input order, fixed batch, float32, truncate to max_length,
    full log_softmax, NLLLoss(reduction='none') over the vocabulary, torch.no_grad."""

    def __init__(self, model, tokenizer, max_length=1024):
        self.model, self.tokenizer, self.max_length = model, tokenizer, max_length
        self.loss = torch.nn.NLLLoss(reduction="none", ignore_index=model.config.pad_token_id)
        self.lsm = torch.nn.LogSoftmax(dim=1)

    def score(self, srcs, tgts, batch_size=4):
        out = []
        for i in range(0, len(srcs), batch_size):
            with torch.no_grad():
                src = self.tokenizer(srcs[i : i + batch_size], max_length=self.max_length, truncation=True, padding=True, return_tensors="pt")
                tgt = self.tokenizer(tgts[i : i + batch_size], max_length=self.max_length, truncation=True, padding=True, return_tensors="pt")
                lengths = tgt.attention_mask.sum(dim=1)
                logits = self.model(input_ids=src.input_ids, attention_mask=src.attention_mask, labels=tgt.input_ids).logits.view(-1, self.model.config.vocab_size)
                loss = self.loss(self.lsm(logits), tgt.input_ids.view(-1)).view(tgt.input_ids.shape[0], -1)
                out += [-x for x in (loss.sum(dim=1) / lengths).tolist()]
        return out


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def bartscore_rows(args, paths):
    rows = pq.read_table(CORPORA / "summeval.parquet").to_pylist()[: args.rows]
    srcs, tgts = [r["source"] for r in rows], [r["text"] for r in rows]
    ours32 = BARTScorer(paths["bart"], dtype="float32", token_budget=args.token_budget)
    original = OriginalStyleBARTScore(ours32.model, ours32.tokenizer)
    ref, t_orig = timed(lambda: original.score(srcs, tgts, batch_size=4))
    got32, t32 = timed(lambda: ours32.score(srcs, tgts))
    max_diff = max(abs(a - b) for a, b in zip(ref, got32))
    ours16 = BARTScorer(paths["bart"], dtype="bfloat16", token_budget=args.token_budget)
    _, t16 = timed(lambda: ours16.score(srcs, tgts))
    n = len(rows)
    out = [
        ("BARTScore s->h, original-style loop (input order, batch 4, fp32)", f"{n / t_orig:.2f} pairs/s", "1.00x", ""),
        ("BARTScore s->h, ours fp32", f"{n / t32:.2f} pairs/s", f"{t_orig / t32:.2f}x", f"target >= 1.3x; max abs diff vs original {max_diff:.1e}"),
        ("BARTScore s->h, ours bf16", f"{n / t16:.2f} pairs/s", f"{t_orig / t16:.2f}x", "target >= 3x (vs original fp32)"),
    ]
    # 2. decoder-side ensemble of the 70 s->h prompts
    prompts = read_lines(BARTSCORE_PROMPTS["src_hypo"], "prompt")
    assert len(prompts) == 70
    prompt_rows = rows[:: max(1, len(rows) // args.prompt_rows)][: args.prompt_rows]
    psrcs, ptgts = [r["source"] for r in prompt_rows], [r["text"] for r in prompt_rows]
    ens, t_ens = timed(lambda: ours32.score_prompted(psrcs, ptgts, prompts, side="decoder"))

    def separately():
        per_prompt = [original.score(psrcs, [decoder_prompted(t, p) for t in ptgts], batch_size=4) for p in prompts]
        return [statistics.fmean(column) for column in zip(*per_prompt)]

    sep, t_sep = timed(separately)
    diff = max(abs(a - b) for a, b in zip(ens, sep))
    out += [
        (f"70-prompt decoder-side ensemble, each prompt separately ({len(prompt_rows)} rows)", f"{len(prompt_rows) / t_sep:.3f} rows/s", "1.00x", ""),
        ("70-prompt decoder-side ensemble, ours (one encoder pass per source)", f"{len(prompt_rows) / t_ens:.3f} rows/s", f"{t_sep / t_ens:.2f}x", f"target >= 5x; max abs diff {diff:.1e}"),
    ]
    return out


def relevance_rows(args, paths):
    prompts_path, verbalizer_path = ctrleval_task_paths("sentiment")
    iwf = CACHE / "pegasus-iwf.txt"
    if not iwf.exists():
        iwf.write_text("1.0\n" * 96103)  # weights do not matter for relevance
    scorer = CTRLEval(paths["pegasus"], iwf=str(iwf), prompts=str(prompts_path), verbalizers=str(verbalizer_path), token_budget=args.token_budget, tokenization="fast")  # the baseline below tokenises with the fast tokenizer too
    rows = pq.read_table(CORPORA / "ctrleval_senti.parquet").to_pylist()[:: max(1, 360 // args.rel_rows)][: args.rel_rows]
    texts, labels = [r["text"] for r in rows], [r["attribute"] for r in rows]
    ours, t_ours = timed(lambda: scorer.relevance(texts, labels)[0])
    prompts, verbalizer = read_lines(prompts_path, "prompt"), Verbalizer.from_file(verbalizer_path)
    tok, model = scorer.tokenizer, scorer.model

    def one_forward_each():
        s = {}
        for start in range(0, len(texts), 8):
            batch = texts[start : start + 8]
            for p, prompt in enumerate(prompts):
                filled = [prompt.replace("<gen_result>", t).replace("<mask_token>", MASK) for t in batch]
                enc = tok(filled, padding=True, return_tensors="pt")
                for r, row in enumerate(verbalizer.rows):
                    for label_index, word in enumerate(row):
                        labels_ids = tok([word] * len(batch), add_special_tokens=False, return_tensors="pt").input_ids
                        with torch.no_grad():
                            out = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=labels_ids)
                        lp = torch.log_softmax(out.logits.float(), -1).gather(-1, labels_ids[..., None]).squeeze(-1).mean(-1)
                        for k, value in enumerate(lp.tolist()):
                            s[(start + k, p, r, label_index)] = math.exp(value)
        scores = []
        for i, label in enumerate(labels):
            a = verbalizer.labels.index(label)
            num = den = 0.0
            for p in range(len(prompts)):
                for r in range(len(verbalizer.rows)):
                    mass = sum(s[(i, p, r, j)] for j in range(len(verbalizer.labels)))
                    num += s[(i, p, r, a)]
                    den += mass
            scores.append(num / den)
        return scores

    ref, t_ref = timed(one_forward_each)
    diff = max(abs(a - b) for a, b in zip(ours, ref))
    return [
        (f"CTRLEval relevance, one forward per (prompt, verbaliser, label) ({len(texts)} texts)", f"{len(texts) / t_ref:.2f} texts/s", "1.00x", "144 encoder passes per text"),
        ("CTRLEval relevance, ours", f"{len(texts) / t_ours:.2f} texts/s", f"{t_ref / t_ours:.2f}x", f"target >= 4x; 24 encoder passes per text; max abs diff {diff:.1e}"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--prompt-rows", type=int, default=8)
    parser.add_argument("--rel-rows", type=int, default=24)
    parser.add_argument("--token-budget", type=int, default=8192)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 2)
    CACHE.mkdir(parents=True, exist_ok=True)
    paths = bench_models()
    table = bartscore_rows(args, paths) + relevance_rows(args, paths)
    lines = [
        f"Machine: {os.cpu_count()} CPU threads, torch {torch.__version__}; random-init bart-base-size BART and PEGASUS (tiny tokenizers); SummEval s->h ({args.rows} rows), CTRLEval sentiment.",
        "",
        "| what | throughput | ratio | note |",
        "|---|---|---|---|",
    ] + [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in table]
    text = "\n".join(lines) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""Baseline metrics' speed: `python -m benchmarks.bench_baselines [--rows N]`.

Ratios measured in one run on this machine:
* BERTScore: `scoring.bertscore.BERTScorer` against the bert-score package's `BERTScorer` on
  the same random RoBERTa (4 layers, 128 wide, built here), the same layer, no idf, over real
  SummEval rows with 1-4 references each; both load the model once and are timed on scoring
  only, each with its default batching: bert-score 64 sentences per batch, ctgscore the
  metric's length buckets (longest first, at most 16,384 padded tokens a batch, no sentence
  padded by more than 10 % of its batch's width); numbers checked equal to 1e-4; timed in
  CPU seconds of the process, alternating the two `--repeats` times, median ratio; one
  torch thread on both sides by default (`--threads`): per-core throughput, the way a CPU
  pool runs (one actor per core), and CPU time with several threads counts their spin-waits;
* BLEU, chrF and ROUGE through the scoring job (local Ray, 1 actor per metric, steady-state
  rows/s from the manifest) against a plain loop over the same rows calling sacreBLEU's
  `sentence_bleu` / `sentence_chrf` and rouge-score's `score_multi`.
Writes the Markdown table to benchmarks/results/baselines.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import tempfile
import time

from benchmarks.data import real_data_root

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

REPO = pathlib.Path(__file__).resolve().parents[1]
SIZES = {"d_model": 128, "layers": 4, "heads": 4, "ffn": 512}


def summeval_rows(n: int) -> list[dict]:
    import pyarrow.parquet as pq

    rows = pq.read_table(real_data_root() / "corpora" / "summeval.parquet").slice(0, n).to_pylist()
    for index, row in enumerate(rows):
        row["references"] = row["references"][: 1 + index % 4]
    return rows


def _cpu_timed(fn):
    """CPU seconds of this process (all its threads): steadier than wall time on a machine
    shared with other work."""
    start = time.process_time()
    value = fn()
    return value, time.process_time() - start


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def bench_bertscore(tmp: pathlib.Path, rows: list[dict], repeats: int = 3, threads: int = 1) -> list[tuple]:
    import bert_score

    from ctgscore.testing.tiny_models import build_roberta
    from scoring.bertscore import BERTScorer

    model = str(build_roberta(tmp / "roberta", seed=5, sizes=SIZES))
    cands, refs = [r["text"] for r in rows], [list(r["references"]) for r in rows]
    package = bert_score.BERTScorer(model_type=model, num_layers=SIZES["layers"], batch_size=64, nthreads=0)
    ours = BERTScorer(model, layer=SIZES["layers"])
    import torch

    torch.set_num_threads(threads)  # per-core throughput, as a CPU pool runs one actor per core
    ours.score(cands[:4], refs[:4])  # warm-up, both
    package.score(cands[:4], refs[:4])
    times_theirs, times_mine = [], []
    for _ in range(repeats):  # alternating, so both see the same load on a shared machine
        theirs, t_theirs = _cpu_timed(lambda: package.score(cands, refs))
        mine, t_mine = _cpu_timed(lambda: ours.score(cands, refs))
        times_theirs.append(t_theirs)
        times_mine.append(t_mine)
    worst = max(abs(a - float(b)) for row, p, r, f in zip(mine, *theirs) for a, b in zip(row, (p, r, f)))
    assert worst <= 1e-4, worst
    n = len(rows)
    ratios = sorted(a / b for a, b in zip(times_theirs, times_mine))
    t_theirs, t_mine = statistics.median(times_theirs), statistics.median(times_mine)
    return [
        (f"BERTScore, {n} rows, {threads} torch thread(s): bert-score package (batch 64)", f"{n / t_theirs:.1f} rows per CPU-s", "1.0x"),
        (f"BERTScore, {n} rows: ctgscore (length buckets, token budget 16,384; same numbers, max diff {worst:.1e})",
         f"{n / t_mine:.1f} rows per CPU-s",
         f"{statistics.median(ratios):.2f}x (per repeat {', '.join(f'{r:.2f}' for r in ratios)})"),
    ]


def plain_loop(name: str, rows: list[dict]) -> float:
    import sacrebleu
    from rouge_score.rouge_scorer import RougeScorer

    scorer = RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    start = time.perf_counter()
    for row in rows:
        if name == "bleu":
            sacrebleu.sentence_bleu(row["text"], list(row["references"]))
        elif name == "chrf":
            sacrebleu.sentence_chrf(row["text"], list(row["references"]))
        else:
            scorer.score_multi(list(row["references"]), row["text"])
    return len(rows) / (time.perf_counter() - start)


def bench_job(tmp: pathlib.Path, rows: list[dict], shards: int) -> list[tuple]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job

    folder = tmp / "dump"
    folder.mkdir()
    schema = pq.read_schema(real_data_root() / "corpora" / "summeval.parquet")
    for shard in range(shards):
        part = [dict(r, id=f"{r['id']}#{shard}") for r in rows]
        pq.write_table(pa.Table.from_pylist(part, schema=schema), folder / f"part-{shard:03d}.parquet")
    out = []
    for name in ("bleu", "chrf", "rouge"):
        config = parse_config({"input": str(folder), "output": str(tmp / f"out-{name}"), "metrics": [{"name": name}],
                               "progress": False, "part_rows": 2000, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 1}})
        manifest = run_job(config)
        report = manifest["metrics"][name]
        job_rate = report["steady_rows_per_s"] or report["rows_per_s"]
        loop_rate = plain_loop(name, rows * shards)
        out.append((f"{name}, {len(rows) * shards} rows: plain loop (reference package)", f"{loop_rate:.0f} rows/s", "1.0x"))
        out.append((f"{name}, {len(rows) * shards} rows: the job (1 actor, steady state)", f"{job_rate:.0f} rows/s",
                    f"{job_rate / loop_rate:.2f}x"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=160)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the BERTScore comparison")
    args = parser.parse_args()
    rows = summeval_rows(args.rows)
    table = []
    with tempfile.TemporaryDirectory() as work:
        table += bench_bertscore(pathlib.Path(work), rows, args.repeats, args.threads)
        table += bench_job(pathlib.Path(work), rows, args.shards)
    lines = ["# Baseline metrics", "", "| what | speed | ratio |", "|---|---:|---:|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in table]
    text = "\n".join(lines) + "\n"
    print(text)
    (REPO / "benchmarks" / "results").mkdir(exist_ok=True)
    (REPO / "benchmarks" / "results" / "baselines.md").write_text(text)


if __name__ == "__main__":
    main()

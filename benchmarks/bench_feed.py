"""Can the CPU keep a GPU fed? Two CPU-side quantities of the GPU path, measured on this
machine with SummEval s->h rows at their real lengths (`tests/data/corpora/summeval.parquet`).

(a) CPU-stage rows/s per core: from one unit's Arrow IPC payload (what `read_unit` hands on)
    to ready `int32` id columns. "stage" is the job's own CPU-stage function
    (`ray_jobs.job.rows.prepare_table`: decode, row keys, precheck, validate, then
    `BARTScoreMetric.prepare` with the metric built without weights); "actor (before)" is
    the same work as the scoring actor did it before the stage split (row dicts,
    `RowMetric.validate`, `row_key`, `encode_texts`). One thread (TOKENIZERS_PARALLELISM=false,
    torch 1 thread), timed in thread CPU time, so the figures are per core on a shared machine.
(b) The GPU stage's own CPU time per row outside the model's forward, on a tiny BART so that
    the forward is small, with the decoder chunked as on a GPU (decode budget = token budget),
    at two token budgets (`--token-budgets`): 16,384 padded tokens per forward (a 24 GB card)
    and 32,768 (an 80 GB H100, the card the target is set for). Part of the cost is per
    forward, not per row: on this CPU each forward evicts the caches, so the host work after
    it runs cold, and a larger budget means fewer forwards. Two definitions, both printed:
    - "all CPU": thread CPU time of the call minus the time inside the encoder, the decoder,
      the cross-attention projections and the output layer (timed by hooks): padding, index
      building, copies, layout planning, bookkeeping, and every tensor op outside the forward;
    - "host": the same minus the self CPU time of the ATen ops outside the forward (from
      `torch.profiler`): on CUDA those ops (gathers, pad copies, dtype casts) are
      asynchronous kernels, so what stays on the host is the Python and dispatch work. The
      ATen op count per row is printed beside it (each op is one launch on CUDA, a few us of
      host time there).
    Engines: "today" (`--baseline`, the engine before the GPU work) and "before" (`--before`,
    the engine before the stage split) from git, fed nested lists as their callers did; "now"
    is the thin stage fed Arrow id columns: `Seq2SeqLikelihood.pair_nll` for distinct sources
    and `BARTScoreMetric.score_prepared` (source de-duplication and result rows included) for
    rows grouped by document.

Tokenizer: a byte-level BPE trained on the corpora with BART's vocabulary size as its target
(`benchmarks/gpu_lengths.py`, no hub). Targets from the GPU note: an H100 at 40 % MFU scores
a SummEval pair in about 0.55 ms, so (a) >= 455 rows/s per core (4 cores per GPU) and (b)
<= 55 us per row (a tenth of the GPU's time per pair).

Run: `.venv/bin/python -m benchmarks.bench_feed [--baseline ab48ccb] [--before aacff7f] [--repeats 3]`
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from benchmarks.gpu_lengths import CORPORA, corpus_texts, train_bpe

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
TARGET_ROWS_PER_CORE = 455
TARGET_US_PER_ROW = 55
MAX_LENGTH = 1024


def unit_payload() -> tuple[bytes, int]:
    """SummEval rows in the canonical schema as one Arrow IPC payload (as read_unit sends)."""
    table = pq.read_table(CORPORA / "summeval.parquet")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes(), table.num_rows


def hf_tokenizer(bpe_dir: pathlib.Path):
    from transformers import BartTokenizerFast

    return BartTokenizerFast(vocab=str(bpe_dir / "vocab.json"), merges=str(bpe_dir / "merges.txt"))


def cpu_stage_today(payload: bytes, metric, tokenizer) -> int:
    """The scoring actor's CPU work before the forward, as it is done now."""
    from scoring.schema import rows_from_table
    from scoring.text_encoding import encode_texts

    table = pa.ipc.open_stream(io.BytesIO(payload)).read_all().select(["id", "source", "text"])
    rows, _ = rows_from_table(table)
    keys = [metric.row_key(row) for row in rows]
    valid = [row for row in rows if metric.validate(row) is None]
    sources = list(dict.fromkeys(row["source"] for row in valid))
    encode_texts(tokenizer, sources, MAX_LENGTH)
    encode_texts(tokenizer, [row["text"] for row in valid], MAX_LENGTH)
    return len(keys)


def tiny_metric_folder(bpe_dir: pathlib.Path, folder: pathlib.Path) -> int:
    """A tiny BART with the BPE's vocabulary, saved with its tokenizer as a model folder."""
    tokenizer = hf_tokenizer(bpe_dir)
    tokenizer.save_pretrained(str(folder))
    tiny_bart(len(tokenizer)).save_pretrained(str(folder))
    return len(tokenizer)


def cpu_stage(payload: bytes, metric) -> pa.Table:
    """The job's CPU stage on one unit (`prepare_table`, no row cache)."""
    from ray_jobs.job.rows import prepare_table

    table = pa.ipc.open_stream(io.BytesIO(payload)).read_all().select(["id", "source", "text"])
    ids, _ = prepare_table(metric, table, set(metric.read_columns()), [], None)
    return ids


def best_time(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        run()
        times.append(time.thread_time() - start)
    return min(times)


# ----- (b) the GPU stage's own CPU time ----------------------------------------------------
def load_engine(revision: str):
    """scoring.engine of a git revision (loaded under another name)."""
    text = subprocess.run(["git", "show", f"{revision}:scoring/engine.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    path = pathlib.Path(tempfile.mkdtemp()) / "engine_baseline.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"engine_{revision}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_bart(vocab: int):
    import transformers

    torch.manual_seed(0)
    config = transformers.BartConfig(vocab_size=vocab, d_model=32, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, max_position_embeddings=MAX_LENGTH + 2)
    return transformers.BartForConditionalGeneration(config).eval()


FORWARD_MARK = "bench::forward"


class ForwardClock:
    """Seconds spent inside the model's own compute (outermost timed calls only); while
    profiling, those calls are marked so their ops can be told apart."""

    def __init__(self, model, engine):
        self.seconds, self.depth, self.started, self.marking, self.mark = 0.0, 0, 0.0, False, None
        modules = [model.get_encoder(), model.get_decoder()]
        for layer in model.get_decoder().layers:
            modules += [layer.encoder_attn.k_proj, layer.encoder_attn.v_proj]
        self.handles = []
        for module in modules:
            self.handles.append(module.register_forward_pre_hook(lambda *a: self.enter()))
            self.handles.append(module.register_forward_hook(lambda *a: self.leave()))
        self.head = head = engine.head
        original = head.target_logprob_sums

        def timed(*args, **kwargs):
            self.enter()
            try:
                return original(*args, **kwargs)
            finally:
                self.leave()

        head.target_logprob_sums = timed

    def close(self):
        for handle in self.handles:
            handle.remove()
        del self.head.target_logprob_sums  # the class's method again

    def enter(self):
        if self.depth == 0:
            if self.marking:
                self.mark = torch.autograd.profiler.record_function(FORWARD_MARK)
                self.mark.__enter__()
            self.started = time.thread_time()
        self.depth += 1

    def leave(self):
        self.depth -= 1
        if self.depth == 0:
            self.seconds += time.thread_time() - self.started
            if self.mark is not None:
                self.mark.__exit__(None, None, None)
                self.mark = None


def aten_outside_forward(run, clock: ForwardClock) -> tuple[float, int]:
    """Self CPU seconds of the ATen ops outside the forward, and how many were dispatched
    from outside any other op (kernel launches on CUDA), in one profiled call of `run`."""
    clock.marking = True
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run()
    clock.marking = False

    def inside_forward(event) -> bool:
        parent = event.cpu_parent
        while parent is not None:
            if parent.name == FORWARD_MARK:
                return True
            parent = parent.cpu_parent
        return False

    outside = [e for e in profile.events() if e.name.startswith("aten::") and not inside_forward(e)]
    seconds = sum(e.self_cpu_time_total for e in outside) / 1e6
    launched = sum(1 for e in outside if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
    return seconds, launched


def gpu_stage_overhead(model, engine, run, pairs: int, repeats: int) -> dict:
    """Best of `repeats` calls of `run` (after one warm-up): thread CPU time, the forward's
    share, and the ATen self time outside the forward (profiled call)."""
    engine.decode_token_budget = engine.token_budget  # decoder chunks as on a GPU (no 2,048-token CPU cap)
    clock = ForwardClock(model, engine)
    best = None
    for _ in range(repeats + 1):
        clock.seconds = 0.0
        start = time.thread_time()
        run()
        total = time.thread_time() - start
        outside = total - clock.seconds
        if best is None or outside < best["outside"]:
            best = {"total": total, "forward": clock.seconds, "outside": outside}
    clock.seconds = 0.0
    aten, launched = aten_outside_forward(run, clock)
    clock.close()
    host = max(best["outside"] - aten, 0.0)
    return {**best, "pairs": pairs, "aten_outside": aten, "aten_ops_outside": launched,
            "us_per_row_outside": 1e6 * best["outside"] / pairs, "us_per_row_host": 1e6 * host / pairs,
            "aten_ops_per_row": launched / pairs}


def summeval_work(metric) -> dict:
    """SummEval s->h as the engines see it, from the metric's own `prepare`: the id columns
    (`list<list<int32>>`, one pair per row), and the same ids as nested lists for the engines
    before the split, with distinct sources (one per pair) and grouped by document."""
    rows = corpus_texts()["summeval"]
    table = metric.prepare([{"source": r["source"], "text": r["text"]} for r in rows])
    sources = table.column("s_h_source_ids").combine_chunks().flatten()
    targets = table.column("s_h_target_ids").combine_chunks().flatten()
    source_lists, target_lists = sources.to_pylist(), targets.to_pylist()
    by_doc: dict[str, tuple[list, list]] = {}
    doc_pairs: dict[str, list[int]] = {}
    for k, (row, source, target) in enumerate(zip(rows, source_lists, target_lists)):
        by_doc.setdefault(row["doc_id"], (source, []))[1].append(target)
        doc_pairs.setdefault(row["doc_id"], []).append(k)
    return {
        "table": table, "sources": sources, "targets": targets,
        "doc_pairs": ([group[0] for group in doc_pairs.values()], list(doc_pairs.values())),
        "distinct": (source_lists, [[t] for t in target_lists]),
        "grouped": ([s for s, _ in by_doc.values()], [t for _, t in by_doc.values()]),
    }


def gpu_stage(engine_module, model, work: dict, metric, repeats: int, token_budget: int) -> dict:
    """(b) for one engine: distinct sources and grouped by document at the engine's own entry
    point (nested lists before the split, Arrow id columns now), and now also the whole
    `score_prepared` (de-duplication of sources by their ids, result rows). The engine plans
    its decoder layout and collects results as it does on CUDA (`on_cuda`; the device is
    still this CPU, and the forward is timed apart)."""
    pairs = work["table"].num_rows
    out = {}
    if engine_module is not None:  # an engine before the split, fed nested lists
        engine = engine_module.Seq2SeqLikelihood(model, pad_id=1, decoder_start_id=2, token_budget=token_budget)
        engine.on_cuda = True
        for case in ("distinct", "grouped"):
            sources, targets = work[case]
            out[case] = gpu_stage_overhead(model, engine, lambda s=sources, t=targets: engine.mean_nll(s, t), pairs, repeats)
        return out
    from scoring.engine import Ragged

    engine = metric.scorer.engine
    engine.token_budget, engine.on_cuda = token_budget, True
    distinct = [[k] for k in range(pairs)]
    firsts, grouped = work["doc_pairs"]
    out["distinct"] = gpu_stage_overhead(
        model, engine, lambda: engine.pair_nll(Ragged.from_arrow(work["sources"]), Ragged.from_arrow(work["targets"]), distinct),
        pairs, repeats)
    out["grouped"] = gpu_stage_overhead(
        model, engine, lambda: engine.pair_nll(Ragged.from_arrow(work["sources"]).take(firsts), Ragged.from_arrow(work["targets"]), grouped),
        pairs, repeats)
    out["score_prepared"] = gpu_stage_overhead(model, engine, lambda: metric.score_prepared(work["table"]), pairs, repeats)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="ab48ccb", help="git revision of the engine before the GPU work")
    parser.add_argument("--before", default="aacff7f", help="git revision of the engine before the stage split")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--token-budgets", default="16384,32768",
                        help="padded tokens per forward: 16,384 fits a 24 GB card, 32,768 an 80 GB H100 (README sizing)")
    parser.add_argument("--out", default=str(RESULTS / "bench_feed.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from scoring.bartscore import BARTScoreMetric
    from scoring.models import without_weights

    texts = corpus_texts()
    bpe = train_bpe(texts)
    bpe_dir, folder = pathlib.Path(tempfile.mkdtemp()), pathlib.Path(tempfile.mkdtemp())
    bpe.save_model(str(bpe_dir))
    tokenizer = hf_tokenizer(bpe_dir)
    vocabulary = tiny_metric_folder(bpe_dir, folder)
    if vocabulary != bpe.get_vocab_size():  # the BPE must really be loaded (not a tokenizer of special tokens only)
        raise SystemExit(f"tokenizer has {vocabulary} tokens, the trained BPE {bpe.get_vocab_size()}")
    with without_weights():  # as the job's CPU stage builds it
        light = BARTScoreMetric(model=str(folder), directions=["s_h"], token_budget=16_384)
    light.pin_signature("bartscore-bench")
    payload, rows = unit_payload()
    report: dict = {"rows": rows, "tokenizer_vocabulary": vocabulary, "targets": {
        "cpu_stage_rows_per_s_per_core": TARGET_ROWS_PER_CORE, "gpu_stage_us_per_row": TARGET_US_PER_ROW}}

    actor = best_time(lambda: cpu_stage_today(payload, light, tokenizer), args.repeats)
    stage = best_time(lambda: cpu_stage(payload, light), args.repeats)
    report["cpu_stage"] = {"actor_before_rows_per_s": rows / actor, "stage_rows_per_s": rows / stage}
    print(f"(a) CPU stage, rows/s on one core: prepare_table {rows / stage:,.0f} "
          f"(the actor's same work before the split: {rows / actor:,.0f}; target >= {TARGET_ROWS_PER_CORE})", flush=True)

    metric = BARTScoreMetric(model=str(folder), directions=["s_h"], token_budget=16_384)
    model = metric.scorer.model
    work = summeval_work(metric)
    report["gpu_stage"] = {}
    engines = [(label, load_engine(revision) if revision else None)
               for label, revision in (("today", args.baseline), ("before", args.before), ("now", None))]
    for budget in (int(value) for value in args.token_budgets.split(",")):
        stages = report["gpu_stage"][str(budget)] = {label: gpu_stage(module, model, work, metric, args.repeats, budget)
                                                     for label, module in engines}
        for case in ("distinct", "grouped"):
            line = ", ".join(f"{label} {stages[label][case]['us_per_row_outside']:.0f} / {stages[label][case]['us_per_row_host']:.0f}"
                             for label in ("today", "before", "now"))
            now = stages["now"][case]
            print(f"(b) token budget {budget:,}: GPU stage CPU us/row outside the forward (all CPU / host), SummEval s->h "
                  f"{case}: {line} (target <= {TARGET_US_PER_ROW}); now {now['aten_ops_per_row']:.2f} ATen ops/row outside "
                  f"the forward; forward {1e6 * now['forward'] / now['pairs']:.0f} us/row on this CPU, tiny BART", flush=True)
        whole = stages["now"]["score_prepared"]
        print(f"(b) token budget {budget:,}: the whole score_prepared on SummEval rows (sources de-duplicated by id, "
              f"result rows): {whole['us_per_row_outside']:.0f} / {whole['us_per_row_host']:.0f} us/row (all CPU / host)", flush=True)
    return write_report(args.out, report)


def write_report(path, report: dict) -> dict:
    """Write a benchmark's report as JSON (its folder made if needed) and say where."""
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)

"""Can the CPU keep a GPU fed? Two CPU-side quantities of the GPU path, measured on this
machine with SummEval s->h rows at their real lengths (`tests/data/corpora/summeval.parquet`).

(a) CPU-stage rows/s per core: from one unit's Arrow IPC payload (what `read_unit` hands on)
    to ready `int32` id columns: decode the rows, validate them, compute row keys, tokenise
    source and summary. "today" is the same work as the scoring actor does it now (row dicts,
    `RowMetric.validate`, `row_key`, `encode_texts` with the transformers tokenizer);
    "stage" is the column-wise version (`tokenizers.Tokenizer.encode_batch` straight to Arrow
    `list<int32>`). One thread (TOKENIZERS_PARALLELISM=false, torch 1 thread), timed in
    thread CPU time, so the figures are per core even on a shared machine.
(b) The GPU stage's own CPU time per row outside the model: `Seq2SeqLikelihood.mean_nll`
    wall time minus the time inside the encoder, the decoder, the cross-attention projections
    and the output layer (timed by hooks), per scored pair: padding, index building, copies,
    layout planning, bookkeeping. On a tiny BART so that the forward is small, with the
    decoder chunked as on a GPU (decode budget = token budget, 16,384); "today" is the engine
    of `--baseline REV` (git), "now" the working tree's.

Tokenizer: a byte-level BPE trained on the corpora with BART's vocabulary size as its target
(`benchmarks/gpu_lengths.py`, no hub). Targets from the GPU note: an H100 at 40 % MFU scores
a SummEval pair in about 0.55 ms, so (a) >= 455 rows/s per core (4 cores per GPU) and (b)
<= 55 us per row (a tenth of the GPU's time per pair).

Run: `.venv/bin/python -m benchmarks.bench_feed [--baseline ab48ccb] [--repeats 3]`
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

import numpy as np
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

    return BartTokenizerFast(vocab_file=str(bpe_dir / "vocab.json"), merges_file=str(bpe_dir / "merges.txt"))


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


def cpu_stage_columns(payload: bytes, metric, bpe) -> pa.Table:
    """The CPU stage column-wise: validation on Arrow columns, row keys, then the fast
    tokenizer's batch encoding straight into `list<int32>` columns."""
    import pyarrow.compute as pc

    table = pa.ipc.open_stream(io.BytesIO(payload)).read_all().select(["id", "source", "text"])
    ok = pc.and_(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(table["source"])), 0),
                 pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(table["text"])), 0))
    sources, texts = table["source"].to_pylist(), table["text"].to_pylist()
    keys = [metric.row_key({"id": i, "source": s, "text": t}) for i, s, t in zip(table["id"].to_pylist(), sources, texts)]
    unique = list(dict.fromkeys(sources))

    def ids(encodings) -> pa.Array:
        pieces = [np.asarray(e.ids[:MAX_LENGTH], dtype=np.int32) for e in encodings]
        offsets = np.zeros(len(pieces) + 1, dtype=np.int32)
        np.cumsum([len(p) for p in pieces], out=offsets[1:])
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(pieces)))

    source_ids = ids(bpe.encode_batch(unique))
    text_ids = ids(bpe.encode_batch(texts))
    return pa.table({"row_key": keys, "valid": ok, "text_ids": text_ids}), source_ids


def best_time(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        run()
        times.append(time.thread_time() - start)
    return min(times)


# ----- (b) the GPU stage's own CPU time ----------------------------------------------------
def load_engine(revision: str | None):
    """scoring.engine of the working tree, or of a git revision (loaded under another name)."""
    if revision is None:
        import scoring.engine

        return scoring.engine
    text = subprocess.run(["git", "show", f"{revision}:scoring/engine.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    path = pathlib.Path(tempfile.mkdtemp()) / "engine_baseline.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("engine_baseline", path)
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


class ForwardClock:
    """Seconds spent inside the model's own compute (outermost timed calls only)."""

    def __init__(self, model, engine):
        self.seconds, self.depth, self.started = 0.0, 0, 0.0
        modules = [model.get_encoder(), model.get_decoder()]
        for layer in model.get_decoder().layers:
            modules += [layer.encoder_attn.k_proj, layer.encoder_attn.v_proj]
        for module in modules:
            module.register_forward_pre_hook(lambda *a: self.enter())
            module.register_forward_hook(lambda *a: self.leave())
        head = engine.head
        original = head.target_logprob_sums

        def timed(*args, **kwargs):
            self.enter()
            try:
                return original(*args, **kwargs)
            finally:
                self.leave()

        head.target_logprob_sums = timed

    def enter(self):
        if self.depth == 0:
            self.started = time.thread_time()
        self.depth += 1

    def leave(self):
        self.depth -= 1
        if self.depth == 0:
            self.seconds += time.thread_time() - self.started


def gpu_stage_overhead(engine_module, sources, targets, repeats: int) -> dict:
    model = tiny_bart(1000)
    engine = engine_module.Seq2SeqLikelihood(model, pad_id=1, decoder_start_id=2, token_budget=16_384)
    engine.decode_token_budget = engine.token_budget  # decoder chunks as on a GPU (no 2,048-token CPU cap)
    clock = ForwardClock(model, engine)
    pairs = sum(len(t) for t in targets)
    best = None
    for _ in range(repeats + 1):
        clock.seconds = 0.0
        start = time.thread_time()
        engine.mean_nll(sources, targets)
        total = time.thread_time() - start
        outside = total - clock.seconds
        if best is None or outside < best["outside"]:
            best = {"total": total, "forward": clock.seconds, "outside": outside}
    return {**best, "pairs": pairs, "us_per_row_outside": 1e6 * best["outside"] / pairs}


def summeval_ids(bpe) -> dict[str, tuple[list, list]]:
    """SummEval s->h as the engine sees it: distinct sources (one per pair) and grouped by
    document (16 summaries per encoded source), ids folded into the tiny vocabulary."""
    rows = corpus_texts()["summeval"]

    def fold(text: str) -> list[int]:
        return [4 + token % 996 for token in bpe.encode(text).ids[: MAX_LENGTH - 2]] or [4]

    by_doc: dict[str, tuple[list, list]] = {}
    distinct = ([], [])
    for row in rows:
        source, target = fold(row["source"]), fold(row["text"])
        distinct[0].append(source)
        distinct[1].append([target])
        by_doc.setdefault(row["doc_id"], (source, []))[1].append(target)
    grouped = ([s for s, _ in by_doc.values()], [t for _, t in by_doc.values()])
    return {"distinct": distinct, "grouped": grouped}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="ab48ccb", help="git revision of today's engine (default: the commit before the GPU path)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "bench_feed.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from scoring.bartscore import BARTScoreMetric

    texts = corpus_texts()
    bpe = train_bpe(texts)
    bpe_dir = pathlib.Path(tempfile.mkdtemp())
    bpe.save_model(str(bpe_dir))
    tokenizer = hf_tokenizer(bpe_dir)
    metric = BARTScoreMetric.__new__(BARTScoreMetric)  # row keys and validation only: no model
    metric.__dict__["_signature_string"] = "bartscore-bench"
    metric.required_columns, metric.optional_columns = ("source", "text"), ()
    payload, rows = unit_payload()
    report: dict = {"rows": rows, "tokenizer_vocabulary": bpe.get_vocab_size(), "targets": {
        "cpu_stage_rows_per_s_per_core": TARGET_ROWS_PER_CORE, "gpu_stage_us_per_row": TARGET_US_PER_ROW}}

    today = best_time(lambda: cpu_stage_today(payload, metric, tokenizer), args.repeats)
    stage = best_time(lambda: cpu_stage_columns(payload, metric, bpe._tokenizer), args.repeats)
    report["cpu_stage"] = {"today_rows_per_s": rows / today, "stage_rows_per_s": rows / stage}
    print(f"(a) CPU stage, rows/s on one core: today {rows / today:,.0f}, column-wise stage {rows / stage:,.0f} "
          f"(target >= {TARGET_ROWS_PER_CORE})", flush=True)

    work = summeval_ids(bpe)
    baseline = load_engine(args.baseline)
    current = load_engine(None)
    report["gpu_stage"] = {}
    for case, (sources, targets) in work.items():
        old = gpu_stage_overhead(baseline, sources, targets, args.repeats)
        new = gpu_stage_overhead(current, sources, targets, args.repeats)
        report["gpu_stage"][case] = {"today": old, "now": new}
        print(f"(b) GPU stage CPU time outside the forward, SummEval s->h {case}: today {old['us_per_row_outside']:.0f} us/row, "
              f"now {new['us_per_row_outside']:.0f} us/row (target <= {TARGET_US_PER_ROW}); "
              f"forward {1e6 * new['forward'] / new['pairs']:.0f} us/row on this CPU, tiny BART", flush=True)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)

"""GPU benchmark to steer by: the likelihood engine on BART-large, PEGASUS-large and
GPT-2-large at real lengths, timed at steady state, every kernel accounted for.

Runs from the working tree with torch, transformers and pyarrow (no Ray, no install, no
download): copy the checkout (a few MiB with `benchmarks/gpu_lengths.json`) and run

    python benchmarks/bench_gpu.py                      # CUDA: the core cases, then extras
    python benchmarks/bench_gpu.py --tiny --device cpu  # the dry mode of the test suite (seconds)

Models are random-init from configs at their published sizes (BART-large 12+12 layers,
d 1024, vocabulary 50,265; PEGASUS-large 16+16, d 1024, vocabulary 96,103; GPT-2-large 36
layers, d 1280): speed only, never quality. Lengths are real token counts of SummEval
(document -> summary, 16 systems per document) and CTRLEval rows (`gpu_lengths.py`).

Core cases (bfloat16, the engine as the job builds it): BART s->h with distinct sources
(every pair its own document) and grouped by document (16 summaries share one encoder
pass); PEGASUS text -> prefix (CTRLEval lengths); GPT-2 perplexity of CTRLEval texts. Then
the A/B of the engine's variants on the same four workloads, in one process (`gpu_ab.py`:
packed decoder and encoder, cross-batch planning flipped, packed causal, tiled head, source
runs, compiled layers; the recommended defaults). Extras, as far as the time limit allows:
plain `model(**batch)` forwards (length-sorted, the same token budget; the engine's NLLs are
checked against them) and float32.

How each figure is taken:
- held-out rows: the rows are split (SummEval by document, CTRLEval by row, seeded) into a
  warm-up set and a timed set, so the timed shapes were never warmed up; the first call on
  the timed set is reported apart (`first_call_seconds`: plan builds for new shapes);
- ids as the job gets them: Arrow `list<int32>` arrays built outside the timing, turned into
  `Ragged.from_arrow` inside each call as the job's actor does;
- steady state: a run repeats the call until >= `--min-seconds` (5) of wall time have passed,
  the device synchronised at its end; the figure is the median of `--measurements` (5) runs;
- MFU = useful FLOPs / time / the peak of this exact GPU model for the run's dtype
  (`gpu_peaks.py`: bfloat16 rows over the dense bf16 tensor peak, float32 rows over the IEEE
  float32 peak); an unknown model gives MFU null, never a guessed peak. Also useful TFLOP/s
  over a GEMM ceiling measured on the same GPU (a large bf16 matmul at steady state);
- a `torch.profiler` breakdown of one steady call for every core case: kernel time per
  category (GEMM, attention, head, elementwise, memcpy, other; `gpu_profile.py` documents the
  kernel-name patterns) and idle time, against the steady call time, with the GPU-busy share;
- SM clock, power, temperature (sampled during the timed runs), GPU model and SM count,
  torch / CUDA / cuDNN / driver versions; peak device memory of the timed runs; host reads
  per call; the engine's own stats for one call (whatever counters it keeps; pairs named
  `..._padded` / `..._real` also as ratios).

A time limit (`--time-limit`) skips whatever would not finish, core cases first, and the JSON
(rewritten after every case) and the markdown summary beside it always say what ran.

Useful FLOPs (per real token, a shared source counted once, no credit for padding; d =
width, V = vocabulary, L = layers):

    encoder, per source of S tokens:  2 * P_enc * S + 4 * L_enc * S^2 * d        (linears + QK^T, AV)
    cross K/V projections, per source: 2 * P_kv * S                             (once per source)
    decoder, per target of T tokens:  2 * (P_dec - P_kv) * T + 2 * L_dec * T^2 * d  (causal: half of 4 T^2 d)
                                      + 4 * L_dec * T * S * d + 2 * d * V * T   (cross-attention, output layer)
    causal LM, per text of T tokens:  2 * P_layers * T + 2 * L * T^2 * d + 2 * d * V * T

P_enc, P_dec, P_layers count the parameters of the transformer layers only (no token or
position embeddings, which are lookups, not multiplications); P_kv is the decoder's
cross-attention key/value projections.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import inspect
import json
import math
import pathlib
import pkgutil
import random
import re
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks import gpu_ab, gpu_device, gpu_profile  # noqa: E402
from benchmarks.gpu_peaks import peak_flops  # noqa: E402
from benchmarks.gpu_report import line, render_markdown  # noqa: E402
from benchmarks.gpu_timing import steady_seconds, synchronize  # noqa: E402
from ctgscore.testing.host_reads import counted_reads  # noqa: E402


def _engine_api(names=("Seq2SeqLikelihood", "CausalLikelihood", "Ragged", "budget_batches")) -> dict:
    """The engine's classes wherever `scoring` keeps them (scoring.engine, or the modules it
    is split into)."""
    import scoring

    found = {}
    modules = ["scoring.engine"] + [f"scoring.{m.name}" for m in pkgutil.iter_modules(scoring.__path__)
                                    if re.search(r"engine|ragged|batch|plan|causal|seq2seq|likelihood", m.name)]
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in names:
            if name not in found and hasattr(module, name):
                found[name] = getattr(module, name)
        if len(found) == len(names):
            break
    missing = [n for n in names if n not in found]
    if missing:
        raise ImportError(f"scoring has no {', '.join(missing)}")
    return found


_API = _engine_api()
Seq2SeqLikelihood, CausalLikelihood, Ragged, budget_batches = (_API[n] for n in ("Seq2SeqLikelihood", "CausalLikelihood", "Ragged",
                                                                                   "budget_batches"))

LENGTHS = REPO / "benchmarks" / "gpu_lengths.json"
RESULTS = REPO / "benchmarks" / "results"
SIZES = {
    "large": {
        "bart": dict(vocab_size=50_265, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                     decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024),
        "pegasus": dict(vocab_size=96_103, d_model=1024, encoder_layers=16, decoder_layers=16, encoder_attention_heads=16,
                        decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024),
        "gpt2": dict(vocab_size=50_257, n_embd=1280, n_layer=36, n_head=20, n_positions=1024),
    },
    "tiny": {
        "bart": dict(vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=1024),
        "pegasus": dict(vocab_size=1200, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=1024),
        "gpt2": dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=1024, bos_token_id=0, eos_token_id=0),
    },
}
TINY_MAX_LENGTH = 96  # --tiny cuts every length to this (a smoke run, not a measurement)


def build(name: str, size: str, dtype: torch.dtype, device: str):
    """A random-init model from its config (seeded), in eval mode on `device`."""
    import transformers

    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: seconds, not a minute of CPU init
        if name == "bart":
            model = transformers.BartForConditionalGeneration(transformers.BartConfig(**SIZES[size]["bart"]))
        elif name == "pegasus":
            model = transformers.PegasusForConditionalGeneration(transformers.PegasusConfig(**SIZES[size]["pegasus"]))
        else:
            model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**SIZES[size]["gpt2"]))
    return model.to(device=device, dtype=dtype).eval()


def parameter_split(model) -> tuple[int, int]:
    """(encoder parameters, decoder parameters incl. the output layer) of a seq2seq model;
    (0, all parameters) of a causal one. Shared embeddings count on both sides."""
    total = sum(p.numel() for p in model.parameters())
    if not hasattr(model, "get_encoder"):
        return 0, total
    encoder = sum(p.numel() for p in model.get_encoder().parameters())
    decoder = sum(p.numel() for p in model.get_decoder().parameters()) + model.get_output_embeddings().weight.numel()
    return encoder, decoder


def _layer_parameters(stack) -> int:
    return sum(p.numel() for layer in stack.layers for p in layer.parameters()) if hasattr(stack, "layers") else \
        sum(p.numel() for block in stack.h for p in block.parameters())


def useful_flops(model, sources, targets) -> float:
    """FLOPs of the formula in the module docstring for these sources (each once) and their
    targets (`targets[i]`: the targets of source i); `sources` is None for a causal model,
    whose `targets` are then the texts."""
    config = model.config
    width = getattr(config, "d_model", None) or config.n_embd
    vocabulary = model.get_output_embeddings().weight.shape[0]
    head = 2 * width * vocabulary
    if sources is None:
        layers, stack = config.n_layer, model.transformer
        params = _layer_parameters(stack)
        return float(sum(2 * params * len(t) + 2 * layers * len(t) ** 2 * width + head * len(t) for t in targets))
    encoder, decoder = model.get_encoder(), model.get_decoder()
    enc_layers, dec_layers = len(encoder.layers), len(decoder.layers)
    p_enc, p_dec = _layer_parameters(encoder), _layer_parameters(decoder)
    p_kv = sum(p.numel() for layer in decoder.layers for proj in (layer.encoder_attn.k_proj, layer.encoder_attn.v_proj)
               for p in proj.parameters())
    total = 0.0
    for source, group in zip(sources, targets):
        s = len(source)
        total += 2 * p_enc * s + 4 * enc_layers * s * s * width + 2 * p_kv * s
        for target in group:
            t = len(target)
            total += 2 * (p_dec - p_kv) * t + 2 * dec_layers * t * t * width + 4 * dec_layers * t * s * width + head * t
    return total


def workloads(rows: int, vocab: int, max_length: int = 1024, seed: int = 0) -> dict[str, dict]:
    """Random ids at real lengths: {name: {"sources": [...], "targets": [[...], ...]}} plus
    "texts" for the causal model."""
    data = json.loads(LENGTHS.read_text())
    rng = random.Random(seed)

    def ids(n: int) -> list[int]:
        return [rng.randrange(4, vocab) for _ in range(max(min(n, max_length), 2))]

    summeval = data["summeval"][:rows]
    distinct = {"sources": [ids(src) for _, src, _ in summeval], "targets": [[ids(hyp)] for _, _, hyp in summeval]}
    by_doc: dict[str, list] = {}
    for doc, src, hyp in summeval:
        by_doc.setdefault(doc, [src, []])[1].append(hyp)
    grouped = {"sources": [ids(src) for src, _ in by_doc.values()], "targets": [[ids(h) for h in hyps] for _, hyps in by_doc.values()]}
    ctrleval = data["ctrleval"][:rows]
    prefix = {"sources": [ids(text) for _, text in ctrleval], "targets": [[ids(pre)] for pre, _ in ctrleval]}
    texts = [ids(text) for _, text in ctrleval]
    return {"distinct": distinct, "grouped": grouped, "prefix": prefix, "texts": texts}

def plain_seq2seq(model, sources, targets, token_budget: int, device: str) -> list[float]:
    """Plain `model(**batch)` forwards: every (source, target) pair as one row, length-sorted
    batches under the same token budget, mean NLL from the full logits."""
    pairs = [(s, t) for s, ts in zip(sources, targets) for t in ts]
    order = sorted(range(len(pairs)), key=lambda p: -(len(pairs[p][0]) + len(pairs[p][1])))
    lengths = [max(len(s), len(t)) for s, t in pairs]
    out = [0.0] * len(pairs)
    with torch.inference_mode():
        for batch in budget_batches(lengths, order, token_budget):
            src = torch.nn.utils.rnn.pad_sequence([torch.tensor(pairs[i][0]) for i in batch], batch_first=True, padding_value=1)
            tgt = torch.nn.utils.rnn.pad_sequence([torch.tensor(pairs[i][1]) for i in batch], batch_first=True, padding_value=1)
            src, tgt = src.to(device), tgt.to(device)
            decoder_in = torch.cat([torch.full_like(tgt[:, :1], 2), tgt[:, :-1]], dim=1)
            logits = model(input_ids=src, attention_mask=(src != 1).long(), decoder_input_ids=decoder_in,
                           decoder_attention_mask=(tgt != 1).long()).logits
            mask = (tgt != 1).float()
            nll = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), tgt, reduction="none")
            values = ((nll * mask).sum(-1) / mask.sum(-1)).tolist()
            for i, value in zip(batch, values):
                out[i] = value
    return out


def plain_causal(model, texts, token_budget: int, device: str) -> None:
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    with torch.inference_mode():
        for batch in budget_batches([len(t) for t in texts], order, token_budget):
            ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(texts[i]) for i in batch], batch_first=True, padding_value=0).to(device)
            model(input_ids=ids, attention_mask=(ids != 0).long()).logits.float().log_softmax(-1)



def host_reads_per_call(run, cuda: bool) -> tuple[int, dict[str, int]]:
    """(device-to-host reads during one call, i.e. stream syncs; the sites of the reads, most
    frequent first, when there is more than one). On CUDA only reads of tensors on the GPU
    count (a read of a CPU tensor never waits): compiled layers' generated code reads the CPU
    scalars it lifts (LayerNorm eps, attention scale) on every call, and counting every tensor
    gave 1,753 reads per compiled BART call where the eager one reads once."""
    with counted_reads(cuda_only=cuda) as seen:
        run()
    sites = dict(collections.Counter(seen).most_common(5)) if len(seen) > 1 else {}
    return len(seen), sites


# case -> (model, label); the four bfloat16 engine cases are the core, the rest extras
CASES = {"distinct": ("bart", "s->h distinct"), "grouped": ("bart", "s->h grouped"),
         "prefix": ("pegasus", "ctrleval prefix"), "ppl": ("gpt2", "ctrleval-ppl")}
CORE = [("distinct", "bfloat16", "engine"), ("grouped", "bfloat16", "engine"), ("prefix", "bfloat16", "engine"),
        ("ppl", "bfloat16", "engine")]
EXTRAS = [("distinct", "bfloat16", "plain"), ("grouped", "bfloat16", "plain"), ("distinct", "float32", "engine"),
          ("grouped", "float32", "engine"), ("prefix", "float32", "engine"), ("ppl", "float32", "engine"),
          ("prefix", "bfloat16", "plain"), ("ppl", "bfloat16", "plain")]
HELD_OUT = 0.7  # share of the documents (SummEval) and rows (CTRLEval) timed; the rest warms up
SPLIT_SEED = 35
GEMM_SHAPES = {"large": [(8192, 8192, 8192), (16384, 1024, 4096)], "tiny": [(256, 256, 256)]}


def split_rows(data: dict, timed_rows: int | None = None, warm_rows: int | None = None, seed: int = SPLIT_SEED) -> dict:
    """{'warm': {...}, 'timed': {...}}, each {'summeval': rows, 'ctrleval': rows}: SummEval split
    by document (a timed document's source and summaries never warm up), CTRLEval by row;
    seeded, the first `timed_rows` / `warm_rows` of each side kept."""
    docs = sorted({doc for doc, _, _ in data["summeval"]})
    rng = random.Random(seed)
    rng.shuffle(docs)
    warm_docs = set(docs[: max(1, round(len(docs) * (1 - HELD_OUT)))])
    order = list(range(len(data["ctrleval"])))
    rng.shuffle(order)
    cut = max(1, round(len(order) * (1 - HELD_OUT)))
    sides = {"warm": {"summeval": [r for r in data["summeval"] if r[0] in warm_docs], "ctrleval": [data["ctrleval"][i] for i in order[:cut]]},
             "timed": {"summeval": [r for r in data["summeval"] if r[0] not in warm_docs], "ctrleval": [data["ctrleval"][i] for i in order[cut:]]}}
    for side, limit in (("warm", warm_rows), ("timed", timed_rows)):
        if limit:
            sides[side] = {name: rows[:limit] for name, rows in sides[side].items()}
    return sides


def case_workload(case: str, rows: dict, vocab: int, max_length: int, seed: int) -> dict:
    """Random ids at these rows' lengths: {'sources', 'targets'} (targets[i]: source i's) or
    {'texts'} for the causal case."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def ids(n: int) -> list[int]:
        return rng.integers(4, vocab, size=max(min(n, max_length), 2)).tolist()

    if case == "distinct":
        summeval = rows["summeval"]
        return {"sources": [ids(src) for _, src, _ in summeval], "targets": [[ids(hyp)] for _, _, hyp in summeval]}
    if case == "grouped":
        by_doc: dict[str, list] = {}
        for doc, src, hyp in rows["summeval"]:
            by_doc.setdefault(doc, [src, []])[1].append(hyp)
        return {"sources": [ids(src) for src, _ in by_doc.values()], "targets": [[ids(h) for h in hyps] for _, hyps in by_doc.values()]}
    if case == "prefix":
        return {"sources": [ids(text) for _, text in rows["ctrleval"]], "targets": [[ids(pre)] for pre, _ in rows["ctrleval"]]}
    return {"texts": [ids(text) for _, text in rows["ctrleval"]]}


def as_arrow(work: dict) -> dict:
    """The workload's ids as the job's prepared columns: Arrow `list<int32>` arrays (and the
    target groups of each source)."""
    import pyarrow as pa

    ids = pa.list_(pa.int32())
    if "texts" in work:
        return {"texts": pa.array(work["texts"], type=ids)}
    groups, position = [], 0
    for targets in work["targets"]:
        groups.append(range(position, position + len(targets)))
        position += len(targets)
    return {"sources": pa.array(work["sources"], type=ids), "targets": pa.array([t for ts in work["targets"] for t in ts], type=ids),
            "groups": groups}


def make_engine(model, name: str, token_budget: int, options: dict):
    """(the engine for `model`, the requested options its constructor does not take)."""
    cls = CausalLikelihood if name == "gpt2" else Seq2SeqLikelihood
    kwargs = {"pad_id": 0, "token_budget": token_budget} if name == "gpt2" else {"pad_id": 1, "decoder_start_id": 2, "token_budget": token_budget}
    accepted = inspect.signature(cls).parameters
    unsupported = [key for key, value in options.items() if value is not None and key not in accepted]
    kwargs.update({key: value for key, value in options.items() if value is not None and key in accepted})
    return cls(model, **kwargs), unsupported


def engine_call(engine, arrow: dict):
    """One scoring call as the job's actor makes it: `Ragged.from_arrow` on the prepared columns."""
    if "texts" in arrow:
        return lambda: engine.ragged_nll(Ragged.from_arrow(arrow["texts"]))
    return lambda: engine.pair_nll(Ragged.from_arrow(arrow["sources"]), Ragged.from_arrow(arrow["targets"]), arrow["groups"])


def engine_stats(engine) -> dict | None:
    """The engine's counters as they are (any names; nested dicts flattened with dots)."""
    stats = getattr(engine, "stats", None)
    if stats is None:
        return None
    out: dict = {}

    def put(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                put(f"{prefix}.{key}" if prefix else str(key), inner)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[prefix] = value

    put("", dict(stats))
    return out


def stat_ratios(stats: dict | None) -> dict:
    """Every counter named like `X_padded...` beside an `X_real...` one, as padded per real."""
    ratios = {}
    for key, value in (stats or {}).items():
        if "padded" in key:
            real = stats.get(key.replace("padded", "real"))
            if real:
                ratios[key.replace("padded", "padded_per_real")] = value / real
    return ratios


def engine_info(engine) -> dict:
    info = {}
    for key in ("cross_batch", "packed_encoder", "packed_decoder", "packed", "fused_activations", "compiled_layers",
                "token_budget", "decode_token_budget", "pool_budgets"):
        value = getattr(engine, key, None)
        if isinstance(value, (bool, int, float, str)):
            info[key] = value
    if callable(getattr(engine, "batching", None)):
        info["batching"] = engine.batching()
    return info


class Bench:
    """Runs benchmark items (case, dtype, mode) one after another into `report['runs']`."""

    def __init__(self, args, report: dict, save, deadline: float | None):
        self.args, self.report, self.save, self.deadline = args, report, save, deadline
        self.device, self.size = args.device, "tiny" if args.tiny else "large"
        self.max_length = TINY_MAX_LENGTH if args.tiny else 1024
        self.sides = split_rows(json.loads(LENGTHS.read_text()), args.rows, args.warm_rows)
        self._model_key, self._model, self._compiled = None, None, False
        self._work: dict = {}
        self.engine_nll: dict = {}
        self.call_seconds: dict = {}

    def remaining(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def model(self, name: str, dtype: str, compiled: bool = False):
        """The model for (name, dtype), rebuilt when it changes or when its layers were compiled
        in place by an earlier engine and this item runs without compiling."""
        if self._model_key != (name, dtype) or (self._compiled and not compiled):
            self._model = None
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
            self._model = build(name, self.size, getattr(torch, dtype), self.device)
            self._model_key, self._compiled = (name, dtype), False
        self._compiled = self._compiled or compiled
        return self._model

    def workload(self, case: str, vocab: int) -> dict:
        key = (case, vocab)
        if key not in self._work:
            seed = list(CASES).index(case)
            warm = case_workload(case, self.sides["warm"], vocab, self.max_length, seed)
            timed = case_workload(case, self.sides["timed"], vocab, self.max_length, seed + 100)
            self._work[key] = {"warm": warm, "timed": timed, "warm_arrow": as_arrow(warm), "timed_arrow": as_arrow(timed)}
        return self._work[key]

    def skip(self, case: str, dtype: str, mode: str, reason: str, extra: dict | None = None) -> None:
        entry = {"case": CASES[case][1], "model": CASES[case][0], "dtype": dtype, "mode": mode, "reason": reason, **(extra or {})}
        self.report["skipped"].append(entry)
        print(f"skipped {entry['model']} {dtype} {entry['case']} {mode}: {reason}", flush=True)
        self.save(self.report)

    def run(self, case: str, dtype: str, mode: str, tier: str, options: dict | None = None, profile: bool = False,
            tag: dict | None = None) -> dict | None:
        """Measure one item; its entry (also appended to the report), or None when skipped."""
        args, options = self.args, dict(options or {})
        name, label = CASES[case]
        # a call's time: measured before, else guessed from the same case's bf16 engine call
        # (on the first H200 run float32 took 8x as long, plain forwards up to 3x)
        known = self.call_seconds.get((case, dtype, mode)) or self.call_seconds.get((case, "bfloat16", "engine"), 0.0) * (
            (8 if dtype == "float32" else 1) * (3 if mode == "plain" else 1))
        need = args.measurements * max(args.min_seconds, known) + 4 * known + 2
        if options.get("compile_layers") and self.device.startswith("cuda"):
            need += 60  # compiling the layers on the warm-up calls
        if self.remaining() < need:
            self.skip(case, dtype, mode, f"time limit: {self.remaining():.0f} s left, about {need:.0f} s needed", tag)
            return None
        try:
            return self._run(case, dtype, mode, tier, options, profile, tag or {})
        except Exception as exc:  # noqa: BLE001 - one case failing (OOM, a kernel) must not lose the others
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
            self.skip(case, dtype, mode, f"error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", tag)
            return None

    def _run(self, case: str, dtype: str, mode: str, tier: str, options: dict, profile: bool, tag: dict) -> dict | None:
        args, device = self.args, self.device
        name, label = CASES[case]
        budget = options.pop("token_budget", None) or args.token_budget
        model = self.model(name, dtype, bool(options.get("compile_layers")))
        vocabularies = sorted({model.config.vocab_size, model.get_output_embeddings().weight.shape[0]})
        work = self.workload(case, model.config.vocab_size)
        timed = work["timed"]
        engine = None
        if mode == "engine":
            engine, unsupported = make_engine(model, name, budget, options)
            if unsupported:
                self.skip(case, dtype, mode, f"the engine takes no {', '.join(unsupported)}", tag)
                return None
            call, warm_call = engine_call(engine, work["timed_arrow"]), engine_call(engine, work["warm_arrow"])
        elif name == "gpt2":
            call = lambda: plain_causal(model, timed["texts"], budget, device)  # noqa: E731
            warm_call = lambda: plain_causal(model, work["warm"]["texts"], budget, device)  # noqa: E731
        else:
            call = lambda: plain_seq2seq(model, timed["sources"], timed["targets"], budget, device)  # noqa: E731
            warm_call = lambda: plain_seq2seq(model, work["warm"]["sources"], work["warm"]["targets"], budget, device)  # noqa: E731
        start = time.perf_counter()
        for _ in range(2 if options.get("compile_layers") else 1):  # compiling: a second call settles recompiles
            warm_call()
        synchronize(device)
        warm_seconds = time.perf_counter() - start
        start = time.perf_counter()
        call()  # the timed rows' shapes, first seen here
        synchronize(device)
        first_call = time.perf_counter() - start
        self.call_seconds[(case, dtype, mode)] = first_call
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        with gpu_device.Sampler(device) as sampler:
            timing = steady_seconds(call, device, args.min_seconds, args.measurements, self.deadline)
        memory = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
        seconds = timing["seconds"]
        if name == "gpt2":
            pairs, flops = len(timed["texts"]), useful_flops(model, None, timed["texts"])
            tokens = {"texts": sum(len(t) for t in timed["texts"])}
        else:
            pairs, flops = sum(len(t) for t in timed["targets"]), useful_flops(model, timed["sources"], timed["targets"])
            tokens = {"sources": sum(len(s) for s in timed["sources"]), "targets": sum(len(t) for ts in timed["targets"] for t in ts)}
        peak = self.report["peak_override"].get(dtype) or peak_flops(self.report["machine"]["peaks"], dtype)
        ceiling = max((g["tflops"] for g in self.report["gemm_ceiling"] if g["dtype"] == dtype), default=None)
        entry = {"model": name, "dtype": dtype, "case": label, "mode": mode, "tier": tier, **tag, "token_budget": budget, "pairs": pairs,
                 "timed_rows": pairs, "warm_rows": sum(len(t) for t in work["warm"]["targets"]) if "targets" in work["warm"] else len(work["warm"]["texts"]),
                 "tokens": tokens, "ids_from": "arrow" if mode == "engine" else "python lists (plain forwards)",
                 "useful_flops": flops, "seconds": seconds, "seconds_runs": timing["runs"], "calls_per_run": timing["calls"],
                 "wall_per_run": timing["wall"], "measurements_cut_short": timing["cut_short"], "warm_up_seconds": warm_seconds,
                 "first_call_seconds": first_call, "pairs_per_s": pairs / seconds,
                 "pairs_per_s_min_max": [pairs / max(timing["runs"]), pairs / min(timing["runs"])],
                 "useful_tflops": flops / seconds / 1e12, "peak_flops": peak, "mfu": flops / seconds / peak if peak else None,
                 "gemm_ceiling_fraction": flops / seconds / 1e12 / ceiling if ceiling else None,
                 "peak_memory_bytes": memory, "clocks": sampler.summary()}
        if engine is not None:
            stats = getattr(engine, "stats", None)
            if hasattr(stats, "clear"):
                stats.clear()
            entry["host_reads_per_call"], sites = host_reads_per_call(call, device.startswith("cuda"))
            if sites:
                entry["host_read_sites"] = sites
            entry["engine"] = engine_info(engine)
            entry["engine_stats_per_call"] = engine_stats(engine)
            entry["engine_stat_ratios"] = stat_ratios(entry["engine_stats_per_call"])
            if not tag:
                self.engine_nll[(case, dtype)] = list(timing["result"]) if name != "gpt2" else None
        elif name != "gpt2" and self.engine_nll.get((case, dtype)):
            engine_values = self.engine_nll[(case, dtype)]
            entry["max_abs_nll_gap_to_engine"] = max(abs(a - b) for a, b in zip(engine_values, timing["result"]))
        if profile and self.remaining() > 3 * seconds + 2:
            entry["breakdown"] = gpu_profile.profile_call(call, lambda: synchronize(device), vocabularies, device.startswith("cuda"), seconds)
        self.report["runs"].append(entry)
        self.save(self.report)
        print(line(entry), flush=True)
        del engine
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        return entry


def new_report(args) -> dict:
    machine = gpu_device.describe(args.device)
    override = {k: v * 1e12 for k, v in (("bfloat16", args.peak_tflops), ("float32", args.peak_fp32_tflops)) if v}
    settings = {"size": "tiny" if args.tiny else "large", "token_budget": args.token_budget, "min_seconds": args.min_seconds,
                "measurements": args.measurements, "timed_rows_cap": args.rows, "warm_rows_cap": args.warm_rows,
                "held_out_share": HELD_OUT, "split_seed": SPLIT_SEED, "time_limit_s": args.time_limit}
    return {"schema": 2, "machine": machine, "settings": settings, "peak_override": override, "gemm_ceiling": [], "runs": [],
            "skipped": [], "time_limit_hit": False}


def measure(args, save=lambda report: None, items=None, report: dict | None = None) -> dict:
    """The GEMM ceiling, then `items` ((case, dtype, mode, tier, options, profile, tag) tuples;
    default: the core cases profiled, the A/B of engine variants (`gpu_ab.py`), then the
    extras) until the time limit."""
    started = time.monotonic()
    deadline = started + args.time_limit if args.time_limit else None
    report = report or new_report(args)
    peaks = report["machine"]["peaks"]
    print(f"device {report['machine']['name']}; models {report['settings']['size']}; peaks bf16 {peaks.get('bf16_tflops')} / fp32 "
          f"{peaks.get('fp32_tflops')} TFLOP/s{'' if peaks.get('bf16_tflops') else ' (' + str(peaks.get('reason')) + ')'}; "
          f"token budget {args.token_budget:,}; runs >= {args.min_seconds:g} s, median of {args.measurements}", flush=True)
    shapes = GEMM_SHAPES["tiny" if args.tiny else "large"]
    ceiling_seconds = max(args.min_seconds / 5, 0.01)
    for dtype, dtype_shapes in ((torch.bfloat16, shapes), (torch.float32, shapes[:1])):
        for found in gpu_device.gemm_ceiling(args.device, dtype, dtype_shapes, ceiling_seconds, 3):
            report["gemm_ceiling"].append(found)
            print(f"GEMM ceiling {found['m']}x{found['k']}x{found['n']} {found['dtype']}: {found['tflops']:.4g} TFLOP/s", flush=True)
    save(report)
    bench = Bench(args, report, save, deadline)
    defaults = items is None
    if defaults:
        items = [(case, dtype, mode, "core", {}, True, None) for case, dtype, mode in CORE]
    for case, dtype, mode, tier, options, profile, tag in items:
        bench.run(case, dtype, mode, tier, options, profile, tag)
    if defaults and not args.core_only:
        gpu_ab.run(bench)
        for case, dtype, mode in EXTRAS:
            bench.run(case, dtype, mode, "extra", {}, False, None)
    report["time_limit_hit"] = any(s["reason"].startswith("time limit") for s in report["skipped"]) or any(
        r["measurements_cut_short"] for r in report["runs"])
    report["seconds_total"] = time.monotonic() - started
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="tiny models, few rows, short timing floors (the dry mode)")
    p.add_argument("--rows", type=int, default=None, help="timed rows per workload (default: all held-out rows; 12 with --tiny)")
    p.add_argument("--warm-rows", type=int, default=None, help="warm-up rows per workload (default: all; 6 with --tiny)")
    p.add_argument("--token-budget", type=int, default=32_768)
    p.add_argument("--min-seconds", type=float, default=None, help="wall time of one timed run (default 5; 0.05 with --tiny)")
    p.add_argument("--measurements", type=int, default=5, help="timed runs per figure; the median is reported")
    p.add_argument("--time-limit", type=float, default=None, help="seconds for everything; what would not finish is skipped")
    p.add_argument("--core-only", action="store_true", help="the four bfloat16 engine cases only")
    p.add_argument("--peak-tflops", type=float, default=None, help="bf16 dense peak of this device, TFLOP/s (overrides the table)")
    p.add_argument("--peak-fp32-tflops", type=float, default=None, help="IEEE fp32 peak of this device, TFLOP/s")
    p.add_argument("--out", default=None, help="result JSON (default benchmarks/results/bench_gpu-<device>.json)")
    p.add_argument("--markdown", default=None, help="summary markdown (default: the JSON's path with .md)")
    return p


def finish_args(args):
    if args.tiny:
        args.rows = args.rows or 12
        args.warm_rows = args.warm_rows or 6
    args.min_seconds = args.min_seconds if args.min_seconds is not None else (0.05 if args.tiny else 5.0)
    args.measurements = max(args.measurements, 1)
    return args


def main(argv: list[str] | None = None) -> dict:
    args = finish_args(parser().parse_args(argv))
    out = pathlib.Path(args.out) if args.out else RESULTS / f"bench_gpu-{'tiny-' if args.tiny else ''}{args.device.replace(':', '')}.json"
    markdown = pathlib.Path(args.markdown) if args.markdown else out.with_suffix(".md")
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(report: dict) -> None:  # after every case: a run cut short keeps its numbers
        out.write_text(json.dumps(report, indent=1) + "\n")
        markdown.write_text(render_markdown(report))

    report = measure(args, save)
    save(report)
    print(f"wrote {out} and {markdown}")
    return report


if __name__ == "__main__":
    main()

"""GPU benchmark, ready for the first GPU machine: the likelihood engine against plain
`model(**batch)` forwards, at real sizes and real lengths.

Runs from the working tree with torch and transformers only (no Ray, no install, no
download): copy the checkout (a few MiB with `benchmarks/gpu_lengths.json`) and run

    python benchmarks/bench_gpu.py                      # CUDA, BART-large / PEGASUS-large / GPT-2-large
    python benchmarks/bench_gpu.py --tiny --device cpu  # the smoke run of the test suite

Models are random-init from configs at their published sizes (BART-large 12+12 layers,
d 1024, vocabulary 50,265; PEGASUS-large 16+16, d 1024, vocabulary 96,103; GPT-2-large 36
layers, d 1280): speed only, never quality. Lengths are real token counts of SummEval
(document -> summary, 16 systems per document) and CTRLEval rows (`gpu_lengths.py`).

Workloads: BART s->h with distinct sources (every pair its own document) and grouped by
document (16 summaries share one encoder pass); PEGASUS text -> prefix (CTRLEval lengths);
GPT-2 perplexity of CTRLEval texts. Each runs through the engine and through plain forwards
(length-sorted, the same token budget), in bfloat16 and float32, and reports pairs/s (the
median of `--repeats` >= 3 timed runs after a warm-up, min and max beside it), peak device
memory, host reads per engine call (`ctgscore.testing.host_reads`: each is a stream sync on
CUDA) and MFU = useful FLOPs / time / the device's bf16 dense peak, where (per real token,
a shared source counted once, no credit for padding; d = width, V = vocabulary, L = layers):

    encoder, per source of S tokens:  2 * P_enc * S + 4 * L_enc * S^2 * d        (linears + QK^T, AV)
    cross K/V projections, per source: 2 * P_kv * S                             (once per source)
    decoder, per target of T tokens:  2 * (P_dec - P_kv) * T + 2 * L_dec * T^2 * d  (causal: half of 4 T^2 d)
                                      + 4 * L_dec * T * S * d + 2 * d * V * T   (cross-attention, output layer)
    causal LM, per text of T tokens:  2 * P_layers * T + 2 * L * T^2 * d + 2 * d * V * T

P_enc, P_dec, P_layers count the parameters of the transformer layers only (no token or
position embeddings, which are lookups, not multiplications); P_kv is the decoder's
cross-attention key/value projections. The pre-issue-29 figure (2 x all parameters x tokens:
embeddings counted, the output layer twice, K/V per target token) is kept as `mfu_old`.
A `torch.profiler` summary of one engine call follows. Results go to
`benchmarks/results/bench_gpu-<device>.json`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import random
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from ctgscore.testing.host_reads import counted_reads  # noqa: E402
from scoring.engine import CausalLikelihood, Seq2SeqLikelihood, budget_batches  # noqa: E402

LENGTHS = REPO / "benchmarks" / "gpu_lengths.json"
RESULTS = REPO / "benchmarks" / "results"
# dense bf16 tensor-core peaks, FLOP/s (vendor data sheets); --peak-tflops overrides
PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "L4": 121e12}

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


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


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


def timed(run, device: str, repeats: int = 3) -> tuple[list[float], object, int | None]:
    """(seconds of each of `repeats` timed runs after one warm-up, the last result, peak
    device memory in bytes over the timed runs or None on CPU)."""
    run()  # warm-up (allocator, kernels, autotuning, compiling)
    synchronize(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
    return seconds, result, peak


def host_reads_per_call(run) -> int:
    """Device-to-host reads (stream syncs on CUDA) during one call."""
    with counted_reads() as seen:
        run()
    return len(seen)


def measure(args, save=lambda report: None) -> dict:
    device = args.device
    size = "tiny" if args.tiny else "large"
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    name = platform.processor() or "cpu"
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
        peak = peak or next((v for k, v in PEAKS.items() if k in name), None)
    report = {"device": name, "size": size, "peak_bf16_flops": peak, "token_budget": args.token_budget, "rows": args.rows, "runs": []}
    print(f"device {name}; models {size}; peak bf16 {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s; "
          f"token budget {args.token_budget}; {args.rows} rows per workload")
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for model_name in ("bart", "pegasus", "gpt2"):
            model = build(model_name, size, dtype, device)
            vocab = model.config.vocab_size
            work = workloads(args.rows, vocab, TINY_MAX_LENGTH if args.tiny else 1024)
            encoder_params, decoder_params = parameter_split(model)
            if model_name == "gpt2":
                engine = CausalLikelihood(model, pad_id=0, token_budget=args.token_budget)
                tokens = sum(len(t) for t in work["texts"])
                cases = [("ctrleval-ppl", len(work["texts"]), (2 * decoder_params * tokens, useful_flops(model, None, work["texts"])),
                          lambda e=engine, w=work: e.sequence_nll(w["texts"]),
                          lambda m=model, w=work: plain_causal(m, w["texts"], args.token_budget, device))]
            else:
                engine = Seq2SeqLikelihood(model, pad_id=1, decoder_start_id=2, token_budget=args.token_budget)
                names = ("distinct", "grouped") if model_name == "bart" else ("prefix",)
                cases = []
                for case in names:
                    sources, targets = work[case]["sources"], work[case]["targets"]
                    pairs = sum(len(t) for t in targets)
                    flops = (2 * (encoder_params * sum(len(s) for s in sources)
                                  + decoder_params * sum(len(t) for ts in targets for t in ts)),
                             useful_flops(model, sources, targets))
                    cases.append((f"{'s->h ' + case if model_name == 'bart' else 'ctrleval ' + case}", pairs, flops,
                                  lambda s=sources, t=targets, e=engine: e.mean_nll(s, t),
                                  lambda s=sources, t=targets, m=model: plain_seq2seq(m, s, t, args.token_budget, device)))
            for case, pairs, (flops_old, flops), run_engine, run_plain in cases:
                results = {}
                for mode, run in (("engine", run_engine), ("plain", run_plain)):
                    runs, results[mode], memory = timed(run, device, args.repeats)
                    seconds = sorted(runs)[len(runs) // 2]
                    mfu = flops / seconds / peak if peak else None
                    entry = {"model": model_name, "dtype": dtype_name, "case": case, "mode": mode, "pairs": pairs,
                             "seconds": seconds, "seconds_runs": runs, "pairs_per_s": pairs / seconds,
                             "pairs_per_s_min_max": [pairs / max(runs), pairs / min(runs)], "useful_flops": flops,
                             "mfu": mfu, "mfu_old": flops_old / seconds / peak if peak else None, "peak_memory_bytes": memory}
                    if mode == "engine":
                        entry["host_reads_per_call"] = host_reads_per_call(run)
                        entry["cross_batch"] = getattr(engine, "cross_batch", None)  # decoder chunks across encoder batches
                        stats = getattr(engine, "stats", {})
                        if stats.get("decoder_tokens_real"):  # decoder tokens computed per real one (1.0: no padding)
                            entry["decoder_padding"] = stats["decoder_tokens_padded"] / stats["decoder_tokens_real"]
                        stats.clear()
                    report["runs"].append(entry)
                    save(report)
                    reads = f"  host reads/call {entry['host_reads_per_call']}" if mode == "engine" else ""
                    if "decoder_padding" in entry:
                        reads += f"  decoder tokens/real {entry['decoder_padding']:.2f}"
                    memory_text = f"  peak {memory / 2**30:.1f} GiB" if memory is not None else ""
                    print(f"{model_name:8s} {dtype_name:9s} {case:22s} {mode:6s} {pairs / seconds:10.1f} pairs/s"
                          f" (median of {len(runs)})  MFU {'%.1f%%' % (100 * mfu) if mfu is not None else 'n/a'}"
                          f"{memory_text}{reads}", flush=True)
                if model_name != "gpt2":  # the engine's NLLs are the plain forwards' NLLs
                    engine_nll = [v for row in results["engine"] for v in row]
                    gap = max(abs(a - b) for a, b in zip(engine_nll, results["plain"]))
                    report["runs"][-1]["max_abs_nll_gap_to_engine"] = gap
                    print(f"{'':8s} {dtype_name:9s} {case:22s} max |engine - plain| mean NLL {gap:.2e}")
            if model_name == "bart" and dtype_name == args.dtypes[0]:
                report["profile"] = profile(engine, work["distinct"], device)
            del model, engine, cases
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    return report


def profile(engine, work, device: str) -> str:
    """`torch.profiler` summary (top operators by self time) of one engine scoring call."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with torch.profiler.profile(activities=activities) as prof:
        engine.mean_nll(work["sources"], work["targets"])
        synchronize(device)
    sort = "self_cuda_time_total" if device.startswith("cuda") else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=15)
    print("profile of one BART s->h engine call (distinct sources):")
    print(table)
    return table


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny models (smoke run)")
    parser.add_argument("--rows", type=int, default=None, help="rows per workload (default 1,600; 16 with --tiny)")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--token-budget", type=int, default=16_384)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per case (the median is reported; >= 3)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="bf16 dense peak of this device, TFLOP/s")
    parser.add_argument("--out", default=None, help="result JSON (default benchmarks/results/bench_gpu-<device>.json)")
    args = parser.parse_args(argv)
    args.rows = args.rows or (16 if args.tiny else 1600)
    args.repeats = max(args.repeats, 3)
    out = pathlib.Path(args.out) if args.out else RESULTS / f"bench_gpu-{'tiny-' if args.tiny else ''}{args.device.replace(':', '')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(report: dict) -> None:  # after every case: a run cut short keeps its numbers
        out.write_text(json.dumps(report, indent=1) + "\n")

    report = measure(args, save)
    save(report)
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    main()

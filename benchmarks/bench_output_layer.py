"""The output layer before and after the real-positions head (docs/gpu.md, "The output
layer"), on CPU, same model and same rows: µs per target token of
`OutputHead.target_logprob_sums` (BART-base-sized head: d 768, V 50,265) and of a whole
perplexity call (GPT-2-small-sized, 4 layers: there the head is most of the work).

Before: the bias added to every chunk whether or not it is zero, then max / subtract / exp /
sum as separate passes; perplexity from the model's full [batch, length, vocabulary] logits
(padded positions included) with a float32 copy and a log-sum-exp temporary. After: no pass
for a zero bias, the same in-place normaliser on CPU (one fused reduction on CUDA), perplexity
from real positions only, in chunks.

    python -m benchmarks.bench_output_layer [--rows 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from scoring.engine import CausalLikelihood, OutputHead, Ragged, _token_logprobs, real_positions  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "bench_output_layer.json"


def old_target_logprob_sums(head: OutputHead, hidden, labels, lengths) -> torch.Tensor:
    """The earlier `OutputHead.target_logprob_sums`, as it was (the same real positions)."""
    owners, columns, total = real_positions(lengths, hidden.device)
    states, targets = hidden[owners, columns], labels[owners, columns]
    token_logprobs = torch.empty(total, dtype=torch.float32, device=hidden.device)
    weight = head.vocabulary_major_weight()
    bias = getattr(head.model, "final_logits_bias", None)
    bias = bias.reshape(-1).float() if bias is not None else None
    for start in range(0, total, head.positions_per_chunk):
        stop = start + head.positions_per_chunk
        logits = (states[start:stop] @ weight).float()
        if bias is not None:
            logits += bias
        picked = logits.gather(-1, targets[start:stop, None]).squeeze(-1)
        peak = logits.amax(dim=-1, keepdim=True)
        log_normaliser = logits.sub_(peak).exp_().sum(dim=-1).log_() + peak.squeeze(-1)
        token_logprobs[start:stop] = picked - log_normaliser
    sums = torch.zeros(labels.shape[0], dtype=torch.float32, device=hidden.device)
    return sums.index_add_(0, owners, token_logprobs)


def old_causal_batch(model, ragged: Ragged, batch, pad_id: int = 0) -> torch.Tensor:
    """The earlier perplexity forward: full logits over every padded position."""
    input_ids, mask = ragged.padded(batch, pad_id, "cpu")
    logits = model(input_ids=input_ids, attention_mask=mask).logits
    return -(_token_logprobs(logits[:, :-1], input_ids[:, 1:]) * mask[:, 1:]).sum(-1)


def _median_seconds(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> dict:
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    report = {"threads": torch.get_num_threads(), "rows": args.rows}
    bart = transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=50_265, d_model=768, encoder_layers=1, decoder_layers=1, encoder_attention_heads=12,
        decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072)).eval()
    head = OutputHead(bart)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50_257, n_embd=768, n_layer=4, n_head=12)).eval()
    engine = CausalLikelihood(gpt2, pad_id=0, token_budget=4096)
    with torch.inference_mode():
        lengths = rng.integers(20, 100, size=args.rows).tolist()  # summary-like targets, mean ~60
        hidden = torch.randn(args.rows, max(lengths), 768)
        labels = torch.randint(0, 50_265, (args.rows, max(lengths)))
        tokens = sum(lengths)
        before = _median_seconds(lambda: old_target_logprob_sums(head, hidden, labels, lengths), args.repeats)
        after = _median_seconds(lambda: head.target_logprob_sums(hidden, labels, lengths), args.repeats)
        gap = (old_target_logprob_sums(head, hidden, labels, lengths) - head.target_logprob_sums(hidden, labels, lengths)).abs().max().item()
        report["seq2seq_head"] = {"target_tokens": tokens, "us_per_token_before": 1e6 * before / tokens,
                                  "us_per_token_after": 1e6 * after / tokens, "speedup": before / after, "max_abs_gap": gap}

        texts = [rng.integers(1, 50_257, size=n).tolist() for n in rng.integers(20, 200, size=args.rows)]
        ragged = Ragged.from_lists(texts)
        predicted = sum(len(t) - 1 for t in texts)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        from scoring.engine import budget_batches

        batches = budget_batches(ragged.lengths, order, 4096)
        before = _median_seconds(lambda: [old_causal_batch(gpt2, ragged, b) for b in batches], args.repeats)
        after = _median_seconds(lambda: engine.ragged_nll(ragged), args.repeats)
        report["perplexity"] = {"predicted_tokens": predicted, "us_per_token_before": 1e6 * before / predicted,
                                "us_per_token_after": 1e6 * after / predicted, "speedup": before / after}
    for name, entry in report.items():
        if isinstance(entry, dict):
            print(f"{name:14s} before {entry['us_per_token_before']:7.2f} µs/token  after {entry['us_per_token_after']:7.2f} µs/token"
                  f"  ({entry['speedup']:.2f}x)")
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()

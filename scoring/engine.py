"""The likelihood engine shared by every model metric: per-target mean token NLL (docs/metrics.md,
L1).

Seq2seq: `mean_nll(sources, targets_per_source)` encodes each source once and decodes all of
its targets against the cached encoder states (prompt ensembles, multi-reference, CTRLEval
label words). Causal: `sequence_nll(sequences)` for perplexity.

Speed and safety, in one place:
- rows sorted by length, batched by a token budget (padded tokens per forward), input order
  restored on return;
- `torch.inference_mode`; log-softmax in float32 whatever the model dtype;
- on out-of-memory a batch is split in half and retried; a single item that still does not
  fit raises (never a silent exit, unlike the original BARTScore);
- `stats` counts forward passes, so tests and benchmarks can check the sharing;
- decoder chunks planned across encoder batches (`cross_batch`, on CUDA by default): the
  encoded sources of a few batches stay alive and their targets are cut into chunks by length
  with a padding cap (docs/gpu.md, "Decoder chunks");
- on CUDA: pinned host buffers copied with `non_blocking`, no host syncs inside the decoder
  and output-layer loops (index tensors are built on the host from known lengths), results
  kept on the device until the end of a call, the decode layout with the fewest forwards,
  device-sized output-layer chunks with float32 accumulation. float32 means float32: TF32 is
  never switched on (it rounded tiny-BART scores by 0.025 nats against the CPU on an H200).
  On CPU the numbers and the work are those of the CPU-tuned path.
- an accelerator error (device-side assert, illegal address: the CUDA context is lost) is
  never caught here: it ends the process (`scoring.errors.is_accelerator_error`).

Token ids in and out: tokenisation conventions (special tokens, truncation flags) belong to
the metrics.

One job per module; this module keeps the names the metrics import:
- scoring/ragged.py: token ids in Arrow's list layout, padded batches, the one host read;
- scoring/planning.py: token-budget batches and out-of-memory halving;
- scoring/engine_setup.py: dtype checks and regional compilation of the layers;
- scoring/output_head.py: log p(label) on real positions, float32, chunked;
- scoring/seq2seq_engine.py and scoring/causal_engine.py: the two engines.
"""

from __future__ import annotations

from scoring.causal_engine import CausalLikelihood
from scoring.engine_setup import (
    compile_model_layers,
    layer_stacks,
    refuse_float16_for,
    require_cache_keyword,
    require_causal_attention,
    require_ieee_float32,
    rope_switch_length,
    split_at_rope_switch,
)
from scoring.output_head import OutputHead, fused_logsumexp, token_logprobs
from scoring.planning import CPU_DECODE_TOKEN_BUDGET, DEFAULT_TOKEN_BUDGET, budget_batches, run_splitting_on_oom
from scoring.ragged import Ragged, collect, is_cuda, real_positions, to_device
from scoring.seq2seq_engine import Seq2SeqLikelihood

# the names these helpers had before the engine was split into modules
_token_logprobs = token_logprobs
_collect = collect
_on_cuda = is_cuda
_to_device = to_device

__all__ = [
    "CPU_DECODE_TOKEN_BUDGET", "DEFAULT_TOKEN_BUDGET", "CausalLikelihood", "OutputHead", "Ragged", "Seq2SeqLikelihood",
    "budget_batches", "collect", "compile_model_layers", "fused_logsumexp", "layer_stacks", "real_positions", "refuse_float16_for",
    "require_cache_keyword", "require_causal_attention", "require_ieee_float32", "rope_switch_length", "run_splitting_on_oom",
    "split_at_rope_switch", "to_device", "token_logprobs",
]

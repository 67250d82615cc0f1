"""The causal likelihood engine: summed token NLL of whole sequences (perplexity).

Two layouts of a batch (docs/gpu.md, "Packed tokens"):
- padded (the default): rows right-padded to the batch's longest, SDPA with a padding mask;
- packed (`packed = True`; `PACKABLE_ARCHITECTURES` with no sliding window, the engine's
  attention function and output head): the batch's sequences end to end in one row,
  positions restarting at 0 for each, attention block-diagonal and causal from cumulative
  sequence lengths built on the host (scoring/varlen_attention.py), so no padded token enters
  a GEMM; batches are cut by real tokens. The same scores within float32 rounding.

Rotary frequencies that switch with the batch's longest sequence (LongRoPE) never see a batch
or packed row straddling their switch (`engine_setup.split_at_rope_switch`).

`stats` counts forward passes and the tokens each forward computed (`tokens_padded`) against
the real ones (`tokens_real`); packed, the two are equal."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import torch

from scoring import shared_source_attention
from scoring.compile_shapes import generic_shapes
from scoring.engine_setup import (
    compile_model_layers,
    layer_stacks,
    require_causal_attention,
    require_ieee_float32,
    rope_switch_length,
    split_at_rope_switch,
)
from scoring.fused_activations import fuse_tanh_gelu, one_kernel_gelus
from scoring.output_head import OutputHead, token_logprobs
from scoring.planning import DEFAULT_TOKEN_BUDGET, budget_batches, packed_batches, run_splitting_on_oom
from scoring.ragged import Ragged, collect, is_cuda, packed_causal
from scoring.varlen_attention import PackedSegments


class CausalLikelihood:
    """Summed token NLL under a causal LM, every token after the first predicted."""

    def __init__(self, model, pad_id: int, token_budget: int = DEFAULT_TOKEN_BUDGET, max_batch_items: int | None = None,
                 compile_layers: bool = False, fuse_activations: bool | None = None):
        self.model = model
        self.pad_id = pad_id
        self.token_budget = int(token_budget)
        self.max_batch_items = max_batch_items
        self.device = next(model.parameters()).device
        self.on_cuda = is_cuda(self.device)
        require_ieee_float32(model)
        require_causal_attention(model)
        self.stats: Counter = Counter()
        self._pending: list[tuple[list, torch.Tensor]] = []
        # real positions only, float32 chunks: never the [batch, length, vocabulary] logits
        self.head = OutputHead.for_causal_model(model)
        # its mask function never reads the mask back (no sync); it also runs packed attention
        self.attention_enabled = shared_source_attention.enable(model)
        # sequences packed into one row, no padded token in any GEMM: on CUDA wherever the model
        # can pack (`can_pack`; 1.22x for GPT-2 on an H200, benchmarks/results/gpu-check-h200-2026-11-28),
        # off on CPU so its scores and signatures stay as they were; set it to override
        self.packed = self.on_cuda and self.can_pack()
        # rotary frequencies that change past this length with the batch's longest: no batch straddles it
        self.rope_switch = rope_switch_length(model.config)
        # Python-built tanh GELUs replaced by the one-kernel GELU: on CUDA unless set (a CPU keeps
        # its scores bit for bit; scoring/fused_activations.py); `fused_activations`: how many the
        # model runs (derived from the model, so an engine on a model fused before says so too)
        self.fuse_activations = self.on_cuda if fuse_activations is None else bool(fuse_activations)
        if self.fuse_activations:
            fuse_tanh_gelu(model)
        self.fused_activations = one_kernel_gelus(model)
        # regional torch.compile of every block (GPT-2's `.h` too): CUDA only, off by default
        self.compiled_layers = compile_model_layers(model) if compile_layers and self.on_cuda else 0

    # families whose forward, given one packed row, its `position_ids` and the engine's
    # attention function, gives each sequence its own scores (tests/test_causal_families.py);
    # only ever with no sliding window (`can_pack`). Not listed, though their head is fast:
    # Falcon (its attention bypasses transformers' attention functions; ALiBi variants add
    # position biases), GPT-OSS and BLOOM (eager attention only: sinks and sliding layers,
    # ALiBi), DeepSeek-V2/V3 (multi-head latent attention: value heads narrower than query/key
    # heads), Nemotron (its decoder layers drop the keywords that carry the packed segments)
    PACKABLE_ARCHITECTURES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma", "phi3", "olmo2",
                              "granite", "cohere", "smollm3", "starcoder2", "glm4", "mixtral", "qwen2_moe", "olmoe",
                              "granitemoe", "gpt_neox", "opt", "phi", "glm4_moe", "seed_oss", "ernie4_5", "apertus",
                              "hunyuan_v1_dense", "gptj", "gpt_bigcode", "phimoe", "ernie4_5_moe")
    # families whose layers take `sliding_window` only where `layer_types` says
    # "sliding_attention" (Qwen2-MoE: its config writes sliding_window = 0 when
    # use_sliding_window is off, and its attention hands no window to the attention function,
    # so only `layer_types` tells whether a window applies)
    WINDOW_BY_LAYER_TYPE = ("qwen2_moe",)

    def can_pack(self) -> bool:
        """Packing needs the engine's attention function (SDPA models), its output head, and an
        architecture whose positions come from `position_ids` with no sliding window in any
        layer (packed attention is full causal per sequence: a window would be ignored)."""
        config = self.model.config
        model_type = getattr(config, "model_type", None)
        window = None if model_type in self.WINDOW_BY_LAYER_TYPE else getattr(config, "sliding_window", None)
        return (self.attention_enabled and self.head is not None
                and model_type in self.PACKABLE_ARCHITECTURES
                and window is None
                and "sliding_attention" not in (getattr(config, "layer_types", None) or ()))

    def batching(self) -> str:
        """How sequences are batched and computed, for the metrics' signatures (packing and the
        fused GELU named only when on: CUDA defaults)."""
        return (f"length-sorted,token_budget={self.token_budget}" + (",packed" if self.packed else "")
                + (",tanh_gelu_one_kernel" if self.fused_activations else ""))

    @torch.inference_mode()
    def sequence_nll(self, sequences: Sequence[Sequence[int]]) -> list[tuple[float, int]]:
        """(sum of -log p(x_t | x_<t) over t >= 1, number of predicted tokens) per sequence."""
        return self.ragged_nll(Ragged.from_lists(sequences))

    @torch.inference_mode()
    def ragged_nll(self, ragged: Ragged) -> list[tuple[float, int]]:
        """`sequence_nll` for ids in Arrow's list layout."""
        lengths = ragged.lengths.tolist()
        for i, length in enumerate(lengths):
            if length < 2:
                raise ValueError(f"sequence {i} needs at least 2 tokens (BOS + one token)")
        results: list[tuple[float, int]] = [(float("nan"), 0)] * len(lengths)
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        self._pending = []

        def store(i, total):
            results[i] = (total, lengths[i] - 1)

        if self.packed and not self.can_pack():
            raise ValueError(f"packed sequences are not supported for model type {getattr(self.model.config, 'model_type', None)!r} "
                             f"with attention {getattr(self.model.config, '_attn_implementation', None)!r}")
        plan, score = (packed_batches, self._score_packed) if self.packed else (budget_batches, self._score_batch)
        batches = [batch for run in split_at_rope_switch(order, lengths, self.rope_switch)
                   for batch in plan(lengths, run, self.token_budget, self.max_batch_items)]
        for batch in batches:
            run_splitting_on_oom(batch, lambda b: score(b, ragged), lambda: self.stats.update(["oom_splits"]))
            if not self.on_cuda:
                collect(self._pending, store)
        collect(self._pending, store)
        return results

    def _count_tokens(self, batch: list[int], sequences: Ragged, padded: int) -> None:
        self.stats["forward_passes"] += 1
        self.stats["tokens_real"] += int(sequences.lengths[batch].sum())
        self.stats["tokens_padded"] += padded

    def _score_packed(self, batch: list[int], sequences: Ragged) -> None:
        """One forward over the batch packed into one row: no padded token anywhere."""
        packed = packed_causal(sequences, batch, self.device)
        lengths = tuple(sequences.lengths[batch].tolist())  # numpy on the host, no device read
        segments = PackedSegments(lengths, packed["cu_seqlens"], max(lengths))
        # a 4-D mask is passed through untouched by transformers (no mask is built); the
        # attention function reads the segments instead, and refuses this mask without them
        with generic_shapes(layer_stacks(self.model)[0]):  # compiled blocks traced for any chunk layout, a single sequence included
            hidden = self.model.base_model(
                input_ids=packed["ids"][None], position_ids=packed["positions"][None],
                attention_mask=shared_source_attention.packed_mask(self.device),
                use_cache=False, **{shared_source_attention.PACKING_KWARG: segments},
            ).last_hidden_state[0]
        self._count_tokens(batch, sequences, segments.total)
        predicting = packed["predicting"]
        sums = self.head.logprob_sums_at(hidden.index_select(0, predicting), packed["ids"].index_select(0, predicting + 1),
                                         packed["owners"], len(batch))
        self._pending.append((list(batch), -sums))

    def _score_batch(self, batch: list[int], sequences: Ragged) -> None:
        input_ids, mask = sequences.padded(batch, self.pad_id, self.device)
        self._count_tokens(batch, sequences, input_ids.numel())
        if self.head is not None:
            hidden = self.model.base_model(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state
            # position t predicts token t + 1: a sequence of n tokens has n - 1 predictions
            sums = self.head.target_logprob_sums(hidden[:, :-1], input_ids[:, 1:], sequences.lengths[batch] - 1)
            self._pending.append((list(batch), -sums))
            return
        logits = self.model(input_ids=input_ids, attention_mask=mask).logits
        logprobs = token_logprobs(logits[:, :-1], input_ids[:, 1:]) * mask[:, 1:]
        self._pending.append((list(batch), -logprobs.sum(-1)))

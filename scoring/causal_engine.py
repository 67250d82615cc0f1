"""The causal likelihood engine: summed token NLL of whole sequences (perplexity)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import torch

from scoring import shared_source_attention
from scoring.engine_setup import require_ieee_float32
from scoring.output_head import OutputHead, token_logprobs
from scoring.planning import DEFAULT_TOKEN_BUDGET, budget_batches, run_splitting_on_oom
from scoring.ragged import Ragged, collect, is_cuda


class CausalLikelihood:
    """Summed token NLL under a causal LM, every token after the first predicted."""

    def __init__(self, model, pad_id: int, token_budget: int = DEFAULT_TOKEN_BUDGET, max_batch_items: int | None = None):
        self.model = model
        self.pad_id = pad_id
        self.token_budget = int(token_budget)
        self.max_batch_items = max_batch_items
        self.device = next(model.parameters()).device
        self.on_cuda = is_cuda(self.device)
        require_ieee_float32(model)
        self.stats: Counter = Counter()
        self._pending: list[tuple[list, torch.Tensor]] = []
        # real positions only, float32 chunks: never the [batch, length, vocabulary] logits
        self.head = OutputHead.for_causal_model(model)
        shared_source_attention.enable(model)  # its mask function never reads the mask back (no sync)

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

        for batch in budget_batches(lengths, order, self.token_budget, self.max_batch_items):
            run_splitting_on_oom(batch, lambda b: self._score_batch(b, ragged), lambda: self.stats.update(["oom_splits"]))
            if not self.on_cuda:
                collect(self._pending, store)
        collect(self._pending, store)
        return results

    def _score_batch(self, batch: list[int], sequences: Ragged) -> None:
        input_ids, mask = sequences.padded(batch, self.pad_id, self.device)
        if self.head is not None:
            hidden = self.model.base_model(input_ids=input_ids, attention_mask=mask).last_hidden_state
            self.stats["forward_passes"] += 1
            # position t predicts token t + 1: a sequence of n tokens has n - 1 predictions
            sums = self.head.target_logprob_sums(hidden[:, :-1], input_ids[:, 1:], sequences.lengths[batch] - 1)
            self._pending.append((list(batch), -sums))
            return
        logits = self.model(input_ids=input_ids, attention_mask=mask).logits
        self.stats["forward_passes"] += 1
        logprobs = token_logprobs(logits[:, :-1], input_ids[:, 1:]) * mask[:, 1:]
        self._pending.append((list(batch), -logprobs.sum(-1)))

"""Continuation log-likelihoods under a causal LM, each shared prompt computed once
(docs/metrics.md, "Prompted LM likelihood", G1-G2).

For a pair (prompt ids p_1..p_m, continuation ids c_1..c_n) the engine returns
sum_{t=1..n} log p(c_t | p, c_<t) and n: only the continuation's tokens are predicted; the
prompt is context. Pairs arrive in any order; results come back in input order.

Sharing (`share_prompts`, on by default):
- pairs with equal prompt ids form a group; the prompt runs forward once (batch 1, no padding)
  into a `DynamicCache`, and the group's continuations are scored against it in batches: the
  cached keys/values are broadcast (`expand`, no copy) over the batch's rows, each row's
  continuation right-padded, the attention mask all ones over the prompt. Position j of a
  continuation sits at position m + j, as in the independent forward;
- distinct prompts whose ids share a prefix of at least `min_shared_prefix` tokens (two
  aspects' templates that open the same way, say) form a prefix tree: each shared part runs
  once, on top of its parent's cache, and each prompt's own remaining tokens on top of that
  (the whole prompt is never re-run: prompt tokens computed <= distinct prompt tokens);
- a prompt with a single continuation that shares nothing runs with its continuation as one
  sequence, batched with the others (the independent path): caching it would save nothing.
`stats` counts prompt tokens requested (sum over pairs of the prompt length: what independent
forwards compute) and computed, continuation tokens, passes and out-of-memory splits.

With `share_prompts=False` every pair runs as one sequence prompt + continuation (right-padded
batches): the reference the shared path is checked against (equal within 1e-6 in float32).

Safety, as the other engines: the token budget counts prompt plus continuation tokens of every
row of a batch (a batch of k continuations of an m-token prompt, longest n: k * (m + n) <=
budget, at least one row); an out-of-memory splits the batch (`run_splitting_on_oom`); ids and
lengths are the metric's to settle on the host before they get here; log-probabilities are
float32 whatever the model dtype; the output head runs on real positions only where the
logits are `lm_head(h)` through the family's own transform (`OutputHead.for_causal_model`),
the model's own forward otherwise. A model whose rotary frequencies switch past a length T
(LongRoPE: `engine_setup.rope_switch_length`) runs the pairs longer than T whole, batched only
with each other, and shares prompts among the others only.
"""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import torch

from scoring.engine import (
    DEFAULT_TOKEN_BUDGET,
    OutputHead,
    Ragged,
    budget_batches,
    require_cache_keyword,
    require_causal_attention,
    require_ieee_float32,
    rope_switch_length,
    run_splitting_on_oom,
)

MIN_SHARED_PREFIX = 8


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two id arrays."""
    width = min(len(a), len(b))
    differ = np.flatnonzero(a[:width] != b[:width])
    return int(differ[0]) if len(differ) else width


def prefix_runs(prompts: list[np.ndarray], members: list[int], start: int, min_shared: int) -> list[tuple[list[int], int]]:
    """One level of the prefix tree: `members` (distinct prompts sorted by their ids, all
    sharing their first `start` tokens, already computed) split into runs of neighbours that
    share at least `min_shared` more tokens. Returns (run, shared) with `shared` the run's common
    prefix length, stopping at least one token short of its shortest member (each member runs
    at least one token of its own: that position predicts the continuation's first token);
    a lone prompt has shared = `start`."""
    def shared_with(a: int, b: int) -> int:
        return min(common_prefix(prompts[a], prompts[b]), len(prompts[a]) - 1, len(prompts[b]) - 1)

    runs: list[tuple[list[int], int]] = []
    for u in members:
        if runs and shared_with(runs[-1][0][-1], u) >= start + min_shared:
            run, shared = runs[-1]
            runs[-1] = (run + [u], min(shared, shared_with(run[-1], u)) if len(run) > 1 else shared_with(run[-1], u))
        else:
            runs.append(([u], start))
    return runs


def expand_cache(cache, rows: int):
    """A new cache whose every layer holds `cache`'s keys/values broadcast over `rows` rows (a
    view: `expand`, no copy). The layers' own state (a sliding window's running length) is
    copied, so updating the new cache leaves `cache` as it was (layers replace their tensors,
    never write into them)."""
    expanded = copy.copy(cache)
    expanded.layers = []
    for layer in cache.layers:
        clone = copy.copy(layer)
        if getattr(layer, "is_initialized", True) and getattr(layer, "keys", None) is not None:
            clone.keys = layer.keys.expand(rows, *layer.keys.shape[1:])
            clone.values = layer.values.expand(rows, *layer.values.shape[1:])
        expanded.layers.append(clone)
    return expanded


class PromptedLikelihood:
    """Sum of continuation-token log-probabilities given a prompt, shared prompts computed once
    (module docstring)."""

    def __init__(self, model, pad_id: int, token_budget: int = DEFAULT_TOKEN_BUDGET, max_batch_items: int | None = None,
                 share_prompts: bool = True, min_shared_prefix: int = MIN_SHARED_PREFIX):
        require_cache_keyword(type(model))  # shared prompts reach the model (or its base model) as `cache=`
        self.model = model
        self.pad_id = int(pad_id)
        self.token_budget = int(token_budget)
        self.max_batch_items = max_batch_items
        self.share_prompts = bool(share_prompts)
        self.min_shared_prefix = int(min_shared_prefix)
        self.device = next(model.parameters()).device
        require_ieee_float32(model)
        require_causal_attention(model)
        self.head = OutputHead.for_causal_model(model)
        self.rope_switch = rope_switch_length(model.config)  # engine_setup.rope_switch_length
        self.stats: Counter = Counter()
        self._results: list = []

    # ----- public -------------------------------------------------------------------------
    @torch.inference_mode()
    def continuation_logprobs(self, prompts: Ragged, continuations: Ragged) -> list[tuple[float, int]]:
        """(sum_t log p(c_t | prompt, c_<t), n) per pair k = (prompts[k], continuations[k]).
        Every prompt and continuation needs at least one token."""
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        for what, ragged in (("prompt", prompts), ("continuation", continuations)):
            empty = np.flatnonzero(ragged.lengths < 1)
            if len(empty):
                raise ValueError(f"pair {int(empty[0])}: the {what} has no tokens")
        count = len(prompts)
        self._sums = np.zeros(count, dtype=np.float64)
        self._results = []
        self.stats["pairs"] += count
        self.stats["prompt_tokens_requested"] += int(prompts.lengths.sum())
        self.stats["continuation_tokens"] += int(continuations.lengths.sum())
        if not count:
            return []
        pairs = list(range(count))
        if self.rope_switch is not None:
            # past the switch a pair's positions depend on its whole length: such pairs run whole,
            # batched only with each other (a cached prompt shorter than the switch would differ)
            past = set(np.flatnonzero(prompts.lengths + continuations.lengths > self.rope_switch).tolist())
            if past:
                self._independent(sorted(past), prompts, continuations)
                pairs = [k for k in pairs if k not in past]
        if pairs and self.share_prompts:
            self._shared(prompts, continuations, pairs)
        elif pairs:
            self._independent(pairs, prompts, continuations)
        self._collect()
        return [(float(total), int(n)) for total, n in zip(self._sums, continuations.lengths.tolist())]

    # ----- the two paths ------------------------------------------------------------------
    def _shared(self, prompts: Ragged, continuations: Ragged, pairs: list[int]) -> None:
        unique: dict[bytes, int] = {}
        groups: list[list[int]] = []
        firsts: list[int] = []
        for k in pairs:
            u = unique.setdefault(prompts.key(k), len(groups))
            if u == len(groups):
                groups.append([])
                firsts.append(k)
            groups[u].append(k)
        arrays = [prompts.values[prompts.offsets[k] : prompts.offsets[k + 1]] for k in firsts]
        order = sorted(range(len(arrays)), key=lambda u: arrays[u].tolist())  # shared prefixes: neighbours
        alone: list[int] = []
        self._prefix_tree(order, 0, None, arrays, groups, continuations, alone)
        if alone:
            self._independent(alone, prompts, continuations)

    def _prefix_tree(self, members: list[int], start: int, cache, arrays, groups, continuations: Ragged, alone: list[int]) -> None:
        """Distinct prompts `members` whose first `start` tokens are in `cache`: each run of
        prompts sharing at least `min_shared_prefix` more tokens runs that common part once on
        top of `cache` and recurses; a prompt alone runs the rest of its tokens and scores its
        continuations (or, with one continuation and nothing cached, joins the independent path)."""
        for run, shared in prefix_runs(arrays, members, start, self.min_shared_prefix):
            if len(run) > 1:
                child, _ = self._run_prompt(arrays[run[0]][start:shared], cache)
                self._prefix_tree(run, shared, child, arrays, groups, continuations, alone)
                del child
                continue
            u = run[0]
            if cache is None and len(groups[u]) == 1:
                alone.append(groups[u][0])
                continue
            prompt_cache, last = self._run_prompt(arrays[u][start:], cache)
            self._score_group(groups[u], len(arrays[u]), prompt_cache, last, continuations)
            del prompt_cache, last

    def _run_prompt(self, ids: np.ndarray, prefix_cache):
        """Forward `ids` (one prompt, or its part after a cached prefix) once; returns its cache
        and the state (hidden or logits) of its last position."""
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache(config=self.model.config) if prefix_cache is None else expand_cache(prefix_cache, 1)
        input_ids = torch.as_tensor(np.asarray(ids, dtype=np.int64)[None, :]).to(self.device)
        states = self._forward(input_ids, None, cache, last_only=True)
        self.stats["prompt_passes"] += 1
        self.stats["prompt_tokens_computed"] += len(ids)
        return cache, states[:, -1:]

    def _score_group(self, pairs: list[int], prompt_length: int, cache, last, continuations: Ragged) -> None:
        """Every continuation of one prompt against its cache, batched by the token budget."""
        lengths = continuations.lengths
        order = sorted(pairs, key=lambda k: -int(lengths[k]))
        # the budget counts each row's prompt positions too: they are attended and cached per row
        totals = np.zeros(int(max(pairs)) + 1, dtype=np.int64)
        totals[pairs] = lengths[pairs] + prompt_length
        for batch in budget_batches(totals, order, self.token_budget, self.max_batch_items):
            run_splitting_on_oom(batch, lambda b: self._continuation_batch(b, prompt_length, cache, last, continuations),
                                 lambda: self.stats.update(["oom_splits"]))

    def _continuation_batch(self, batch: list[int], prompt_length: int, cache, last, continuations: Ragged) -> None:
        ids, mask = continuations.padded(batch, self.pad_id, self.device)
        rows = len(batch)
        attention = torch.cat([mask.new_ones((rows, prompt_length)), mask], dim=1)
        states = self._forward(ids, attention, expand_cache(cache, rows), last_only=False)
        # continuation token t is predicted at the position before it: the prompt's last for t = 0
        predicting = torch.cat([last.expand(rows, 1, last.shape[-1]), states[:, :-1]], dim=1)
        self._pending(batch, self._sums_of(predicting, ids, mask, continuations.lengths[batch]))
        self.stats["continuation_passes"] += 1

    def _independent(self, pairs: list[int], prompts: Ragged, continuations: Ragged) -> None:
        """Each pair as one sequence prompt + continuation, batched by total length."""
        whole = _concatenate(prompts.take(pairs), continuations.take(pairs))
        lengths = whole.lengths
        order = sorted(range(len(pairs)), key=lambda i: -int(lengths[i]))
        starts = prompts.lengths[pairs]
        for batch in budget_batches(lengths, order, self.token_budget, self.max_batch_items):
            run_splitting_on_oom(batch, lambda b: self._sequence_batch(b, pairs, whole, starts, continuations),
                                 lambda: self.stats.update(["oom_splits"]))

    def _sequence_batch(self, batch: list[int], pairs: list[int], whole: Ragged, starts: np.ndarray, continuations: Ragged) -> None:
        ids, mask = whole.padded(batch, self.pad_id, self.device)
        states = self._forward(ids, mask, None, last_only=False)
        keys = [pairs[i] for i in batch]
        counts = continuations.lengths[keys]
        # the continuation of row i starts at starts[i]: its token t is predicted at starts[i] + t - 1
        columns = starts[batch][:, None] - 1 + np.arange(int(counts.max()))[None, :]
        columns = np.minimum(columns, ids.shape[1] - 2)
        index = torch.as_tensor(columns).to(self.device)
        rows = torch.arange(len(batch), device=self.device)[:, None]
        predicting = states[rows, index]
        labels = ids[rows, index + 1]
        label_mask = torch.as_tensor(np.arange(int(counts.max()))[None, :] < counts[:, None]).to(self.device)
        self._pending(keys, self._sums_of(predicting, labels, label_mask, counts))
        self.stats["prompt_passes"] += 1
        self.stats["prompt_tokens_computed"] += int(starts[batch].sum())

    # ----- model and head -----------------------------------------------------------------
    def _forward(self, input_ids, attention_mask, cache, last_only: bool) -> torch.Tensor:
        """Hidden states (with the output head) or float logits (the model's own forward)."""
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "cache": cache, "use_cache": cache is not None}
        if self.head is not None:
            return self.model.base_model(**kwargs).last_hidden_state
        if last_only:
            kwargs["logits_to_keep"] = 1
        return self.model(**kwargs).logits

    def _sums_of(self, predicting: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, lengths) -> torch.Tensor:
        """Per row: sum of log p(label) over its first `lengths[row]` positions (float32)."""
        if self.head is not None:
            return self.head.target_logprob_sums(predicting, labels, [int(n) for n in lengths])
        logits = predicting.float()
        picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        return ((picked - torch.logsumexp(logits, dim=-1)) * mask).sum(-1)

    def _pending(self, keys: list[int], sums: torch.Tensor) -> None:
        self._results.append((keys, sums))
        if self.device.type == "cpu":
            self._collect()

    def _collect(self) -> None:
        """Results to the host (on CUDA once per call: one device-to-host read)."""
        if not self._results:
            return
        values = torch.cat([sums.double() for _, sums in self._results]).cpu().numpy()
        keys = [k for chunk, _ in self._results for k in chunk]
        self._sums[keys] = values
        self._results = []


def _concatenate(first: Ragged, second: Ragged) -> Ragged:
    """Sequence k = first[k] followed by second[k]."""
    lengths = first.lengths + second.lengths
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.empty(int(offsets[-1]), dtype=np.int64)
    for k in range(len(lengths)):
        a = first.values[first.offsets[k] : first.offsets[k + 1]]
        b = second.values[second.offsets[k] : second.offsets[k + 1]]
        values[offsets[k] : offsets[k] + len(a)] = a
        values[offsets[k] + len(a) : offsets[k + 1]] = b
    return Ragged(values, offsets)

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
- `stats` counts forward passes, so tests and benchmarks can check the sharing.

Token ids in and out: tokenisation conventions (special tokens, truncation flags) belong to
the metrics.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence, TypeVar

import torch

from scoring import shared_source_attention

T = TypeVar("T")

DEFAULT_TOKEN_BUDGET = 4096
# On CPU, decoder chunks of at most this many target tokens keep the per-layer temporaries
# (e.g. 2,048 x 3,072 floats for a bart-base feed-forward layer) under glibc's largest mmap
# threshold, so they reuse heap pages instead of faulting in fresh ones: the ensemble benchmark
# ran ~15 % faster than with 8,192-token decoder chunks. GPUs use the full token budget.
CPU_DECODE_TOKEN_BUDGET = 2048


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def run_splitting_on_oom(items: list[T], run: Callable[[list[T]], None], on_split: Callable[[], None] | None = None) -> None:
    """Run `run(items)`; on out-of-memory, halve the batch and retry each half."""
    try:
        run(items)
    except Exception as exc:  # noqa: BLE001 - only OOM is handled; everything else re-raises
        if not is_out_of_memory(exc):
            raise
        if len(items) <= 1:
            raise RuntimeError(f"out of memory on a single item ({exc}); lower max_length or use a larger device") from exc
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if on_split:
            on_split()
        middle = len(items) // 2
        run_splitting_on_oom(items[:middle], run, on_split)
        run_splitting_on_oom(items[middle:], run, on_split)


def budget_batches(lengths: Sequence[int], order: Sequence[int], token_budget: int, max_items: int | None = None) -> list[list[int]]:
    """Group indices (already in the desired order, longest first) so that
    len(batch) * max(length in batch) <= token_budget (at least one item per batch)."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        length = max(int(lengths[index]), 1)
        new_longest = max(longest, length)
        too_many = max_items is not None and len(current) >= max_items
        if current and (new_longest * (len(current) + 1) > token_budget or too_many):
            batches.append(current)
            current, new_longest = [], length
        current.append(index)
        longest = new_longest
    if current:
        batches.append(current)
    return batches


def _pad(sequences: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.as_tensor(list(sequence), dtype=torch.long)
        mask[row, : len(sequence)] = 1
    return ids.to(device), mask.to(device)


def _token_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) per position, computed in float32: logit[label] - logsumexp(logits)."""
    logits = logits.float()
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


class Seq2SeqLikelihood:
    """Mean target-token NLL under an encoder-decoder model (BARTScore Eq. 1-2 with uniform
    weights; CTRLEval's lm_score). The decoder input is the target shifted right behind the
    model's decoder start token, so the model never sees the token it predicts."""

    def __init__(self, model, pad_id: int, decoder_start_id: int, token_budget: int = DEFAULT_TOKEN_BUDGET, max_batch_items: int | None = None):
        self.model = model
        self.pad_id = pad_id
        self.decoder_start_id = decoder_start_id
        self.token_budget = int(token_budget)
        self.max_batch_items = max_batch_items
        self.device = next(model.parameters()).device
        self.decode_token_budget = min(self.token_budget, CPU_DECODE_TOKEN_BUDGET) if self.device.type == "cpu" else self.token_budget
        self.stats: Counter = Counter()
        self.head = OutputHead.for_model(model)
        # rows of one source attend to its keys/values as one query sequence (same numbers)
        self.shared_source_attention = shared_source_attention.enable(model)
        self.layout = "auto"  # decoder layout: "auto", "by_length" or "by_slot" (see _decode_plan)

    @torch.inference_mode()
    def mean_nll(self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[Sequence[int]]]) -> list[list[float]]:
        """For each source i and each of its targets j: -mean log p(target_j | source_i)."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} target lists")
        for i, (source, target_list) in enumerate(zip(sources, targets)):
            if len(source) == 0:
                raise ValueError(f"source {i} has no tokens")
            for j, target in enumerate(target_list):
                if len(target) == 0:
                    raise ValueError(f"target {j} of source {i} has no tokens")
        results: list[list[float]] = [[float("nan")] * len(t) for t in targets]
        order = sorted((i for i in range(len(sources)) if targets[i]), key=lambda i: -len(sources[i]))
        lengths = [len(s) for s in sources]
        for batch in budget_batches(lengths, order, self.token_budget, self.max_batch_items):
            run_splitting_on_oom(batch, lambda b: self._score_source_batch(b, sources, targets, results), self._count_split)
        return results

    def _count_split(self) -> None:
        self.stats["oom_splits"] += 1

    def _score_source_batch(self, batch: list[int], sources, targets, results) -> None:
        input_ids, attention_mask = _pad([sources[i] for i in batch], self.pad_id, self.device)
        encoder_states = self.model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        self.stats["encoder_passes"] += 1
        self.stats["encoded_sources"] += len(batch)
        cross_kv = self._cross_attention_kv(encoder_states)
        for chunk_pairs in self._decode_plan(batch, targets, encoder_states.shape[1]):
            run_splitting_on_oom(
                chunk_pairs,
                lambda cp: self._decode_pairs(cp, encoder_states, attention_mask, cross_kv, targets, results),
                self._count_split,
            )

    # Copying one padded source token's cross-attention keys/values for one more target costs
    # about as much as decoding 1/COPY_TOKENS_PER_DECODE_TOKEN of a target token (measured on
    # CPU with bart-base shapes; the choice below only needs the order of magnitude).
    COPY_TOKENS_PER_DECODE_TOKEN = 16

    def _decode_plan(self, batch: list[int], targets, source_width: int) -> list[list[tuple[int, int, int]]]:
        """Decoder chunks of (row in batch, source, target) for one encoded source batch.

        Two layouts; the cheaper by padded decoder tokens plus key/value copies is used:
        - by length: all pairs sorted by target length and cut by the token budget (least
          padding), but a chunk mixing sources must copy each pair's source keys/values;
        - by slot: target j of every source together, rows in source order, cut into
          contiguous runs, so each chunk reads a slice of the cached keys/values without a
          copy (wins when targets are short next to their sources, e.g. CTRLEval label words).
        """
        pairs = [(row, i, j) for row, i in enumerate(batch) for j in range(len(targets[i]))]
        pair_lengths = [len(targets[i][j]) for _, i, j in pairs]
        pair_order = sorted(range(len(pairs)), key=lambda p: -pair_lengths[p])
        by_length = [[pairs[p] for p in chunk] for chunk in budget_batches(pair_lengths, pair_order, self.decode_token_budget, self.max_batch_items)]
        if len(batch) == 1 or self.layout == "by_length":
            return by_length
        by_slot = []
        for j in range(max(len(targets[i]) for i in batch)):
            slot = [(row, i, j) for row, i in enumerate(batch) if j < len(targets[i])]
            lengths = [len(targets[i][j]) for _, i, _ in slot]
            by_slot += [[slot[k] for k in run] for run in budget_batches(lengths, range(len(slot)), self.decode_token_budget, self.max_batch_items)]

        if self.layout == "by_slot":
            return by_slot

        def padded_tokens(chunks):
            return sum(len(c) * max(len(targets[i][j]) for _, i, j in c) for c in chunks)

        copied = sum(len(c) for c in by_length if len({row for row, _, _ in c}) > 1) * source_width
        cost_by_length = padded_tokens(by_length) + copied / self.COPY_TOKENS_PER_DECODE_TOKEN
        return by_slot if padded_tokens(by_slot) <= cost_by_length else by_length

    def _cross_attention_kv(self, encoder_states: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Cross-attention keys and values of every decoder layer for this source batch,
        projected once and reused by every target of these sources (otherwise each target
        would project the whole source again). None for architectures without BART-style
        `encoder_attn.k_proj/v_proj` layers (they fall back to plain decoding)."""
        decoder = self.model.get_decoder()
        layers = getattr(decoder, "layers", None)
        if not layers or not all(hasattr(getattr(layer, "encoder_attn", None), "k_proj") for layer in layers):
            return None
        projected = []
        for layer in layers:
            attention = layer.encoder_attn
            shape = (*encoder_states.shape[:-1], -1, attention.head_dim)
            # contiguous once here, so selecting rows per target chunk is a plain block copy
            keys = attention.k_proj(encoder_states).view(shape).transpose(1, 2).contiguous()
            values = attention.v_proj(encoder_states).view(shape).transpose(1, 2).contiguous()
            projected.append((keys, values))
        return projected

    @staticmethod
    def _cache_for(cross_kv, rows: torch.Tensor, source_length: int | None = None):
        """An encoder-decoder cache whose cross-attention layers hold the projected source
        keys/values of these rows (a view, no copy, when every row is the same source, then cut
        to `source_length`, or when the rows are a contiguous run of the source batch), marked
        as already computed so the decoder only reads them."""
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        first = int(rows[0])
        contiguous = bool((rows == torch.arange(first, first + len(rows), device=rows.device)).all())
        cross = DynamicCache()
        for layer_index, (keys, values) in enumerate(cross_kv):
            if source_length is not None:  # one source: broadcast its real positions over the rows
                keys = keys[first : first + 1, :, :source_length].expand(len(rows), -1, -1, -1)
                values = values[first : first + 1, :, :source_length].expand(len(rows), -1, -1, -1)
            elif contiguous:  # a slice of the cached rows: a view, no copy
                keys, values = keys[first : first + len(rows)], values[first : first + len(rows)]
            else:
                keys, values = keys.index_select(0, rows), values.index_select(0, rows)
            cross.update(keys[:, :, :0], values[:, :, :0], layer_index)  # initialise the layer
            cross.layers[layer_index].keys, cross.layers[layer_index].values = keys, values
        cache = EncoderDecoderCache(DynamicCache(), cross)
        for layer_index in range(len(cross_kv)):
            cache.is_updated[layer_index] = True
        return cache

    def _decode_pairs(self, chunk_pairs, encoder_states, attention_mask, cross_kv, targets, results) -> None:
        rows = torch.as_tensor([row for row, _, _ in chunk_pairs], device=self.device)
        labels_list = [targets[i][j] for _, i, j in chunk_pairs]
        labels, label_mask = _pad(labels_list, self.pad_id, self.device)
        decoder_inputs = torch.full_like(labels, self.pad_id)
        decoder_inputs[:, 0] = self.decoder_start_id
        decoder_inputs[:, 1:] = labels[:, :-1]
        if self.head is not None:
            if cross_kv is not None and bool((rows == rows[0]).all()):
                # one source for every row: its unpadded keys/values, no mask needed (padding
                # positions would get exactly zero attention weight anyway)
                source_length = int(attention_mask[rows[0]].sum())
                cache = self._cache_for(cross_kv, rows, source_length)
                states, source_mask = encoder_states[rows[:1], :source_length].expand(len(rows), -1, -1), None
            elif cross_kv is not None:
                cache = self._cache_for(cross_kv, rows)
                states, source_mask = encoder_states[:1].expand(len(rows), -1, -1), attention_mask.index_select(0, rows)
            else:
                cache, states, source_mask = None, encoder_states.index_select(0, rows), attention_mask.index_select(0, rows)
            hidden = self.model.get_decoder()(
                input_ids=decoder_inputs,
                attention_mask=label_mask,
                # with cached cross keys/values the states only give the mask its shape
                encoder_hidden_states=states,
                encoder_attention_mask=source_mask,
                past_key_values=cache,
                use_cache=False,
            ).last_hidden_state
            sums = self.head.target_logprob_sums(hidden, labels, label_mask)
        else:
            from transformers.modeling_outputs import BaseModelOutput

            logits = self.model(
                encoder_outputs=BaseModelOutput(last_hidden_state=encoder_states.index_select(0, rows)),
                attention_mask=attention_mask.index_select(0, rows),
                decoder_input_ids=decoder_inputs,
                decoder_attention_mask=label_mask,
            ).logits
            sums = (_token_logprobs(logits, labels) * label_mask).sum(-1)
        self.stats["decoder_passes"] += 1
        self.stats["decoded_targets"] += len(chunk_pairs)
        mean_nll = (-(sums / label_mask.sum(-1))).double().cpu().tolist()
        for (_, i, j), value in zip(chunk_pairs, mean_nll):
            results[i][j] = value


class OutputHead:
    """The LM head applied only where it is needed: on real (non-pad) target positions, a
    chunk of positions at a time, so the full [batch, length, vocabulary] logits tensor is
    never built. Only for architectures whose logits are exactly `lm_head(h) +
    final_logits_bias` (BART, PEGASUS, mBART, Marian); others use the model's own forward."""

    ARCHITECTURES = ("bart", "mbart", "pegasus", "marian")
    # Logits of one chunk stay below glibc's largest mmap threshold (32 MiB), so the allocator
    # reuses heap memory between chunks instead of mapping (and page-faulting) fresh pages:
    # with 1,024 positions x 50k vocabulary (200 MiB logits plus a 200 MiB temporary per chunk)
    # the logsumexp alone took 40 % of the head's time in a CPU profile.
    CHUNK_BYTES = 24 << 20

    def __init__(self, model):
        self.model = model
        self._weight_key = None
        self._weight = None
        self.positions_per_chunk = max(1, self.CHUNK_BYTES // (4 * model.get_output_embeddings().weight.shape[0]))

    def vocabulary_major_weight(self) -> torch.Tensor:
        """(hidden, vocabulary) copy of the output embedding: it multiplies 10-15 % faster on
        CPU than the transposed view (measured with MKL, 50k vocabulary). Rebuilt whenever the
        model's weight is replaced or changed in place (e.g. a state dict loaded on top)."""
        weight = self.model.get_output_embeddings().weight
        key = (weight.data_ptr(), weight._version, weight.dtype)
        if key != self._weight_key:
            self._weight = weight.detach().t().contiguous()
            self._weight_key = key
        return self._weight

    def bias(self) -> torch.Tensor | None:
        bias = getattr(self.model, "final_logits_bias", None)
        return bias.reshape(-1).float() if bias is not None else None

    @classmethod
    def for_model(cls, model) -> "OutputHead | None":
        if getattr(model.config, "model_type", None) not in cls.ARCHITECTURES:
            return None
        if model.get_output_embeddings() is None or not hasattr(model, "get_decoder"):
            return None
        return cls(model)

    def target_logprob_sums(self, hidden: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per row: sum over real positions of log p(label) = logit[label] - logsumexp(logits),
        in float32 (logsumexp as max + log(sum(exp(logits - max))), in place on the chunk)."""
        positions = mask.bool()
        states, targets = hidden[positions], labels[positions]
        owners = torch.nonzero(positions, as_tuple=True)[0]
        token_logprobs = torch.empty(len(targets), dtype=torch.float32, device=hidden.device)
        weight, bias = self.vocabulary_major_weight(), self.bias()
        for start in range(0, len(targets), self.positions_per_chunk):
            stop = start + self.positions_per_chunk
            logits = (states[start:stop] @ weight).float()
            if bias is not None:
                logits += bias
            picked = logits.gather(-1, targets[start:stop, None]).squeeze(-1)
            peak = logits.amax(dim=-1, keepdim=True)
            log_normaliser = logits.sub_(peak).exp_().sum(dim=-1).log_() + peak.squeeze(-1)
            token_logprobs[start:stop] = picked - log_normaliser
        sums = torch.zeros(labels.shape[0], dtype=torch.float32, device=hidden.device)
        return sums.index_add_(0, owners, token_logprobs)


class CausalLikelihood:
    """Summed token NLL under a causal LM, every token after the first predicted."""

    def __init__(self, model, pad_id: int, token_budget: int = DEFAULT_TOKEN_BUDGET, max_batch_items: int | None = None):
        self.model = model
        self.pad_id = pad_id
        self.token_budget = int(token_budget)
        self.max_batch_items = max_batch_items
        self.device = next(model.parameters()).device
        self.stats: Counter = Counter()

    @torch.inference_mode()
    def sequence_nll(self, sequences: Sequence[Sequence[int]]) -> list[tuple[float, int]]:
        """(sum of -log p(x_t | x_<t) over t >= 1, number of predicted tokens) per sequence."""
        for i, sequence in enumerate(sequences):
            if len(sequence) < 2:
                raise ValueError(f"sequence {i} needs at least 2 tokens (BOS + one token)")
        results: list[tuple[float, int]] = [(float("nan"), 0)] * len(sequences)
        lengths = [len(s) for s in sequences]
        order = sorted(range(len(sequences)), key=lambda i: -lengths[i])
        for batch in budget_batches(lengths, order, self.token_budget, self.max_batch_items):
            run_splitting_on_oom(batch, lambda b: self._score_batch(b, sequences, results), lambda: self.stats.update(["oom_splits"]))
        return results

    def _score_batch(self, batch: list[int], sequences, results) -> None:
        input_ids, mask = _pad([sequences[i] for i in batch], self.pad_id, self.device)
        logits = self.model(input_ids=input_ids, attention_mask=mask).logits
        self.stats["forward_passes"] += 1
        logprobs = _token_logprobs(logits[:, :-1], input_ids[:, 1:]) * mask[:, 1:]
        sums = (-logprobs.sum(-1)).double().cpu().tolist()
        counts = mask[:, 1:].sum(-1).cpu().tolist()
        for i, total, count in zip(batch, sums, counts):
            results[i] = (total, int(count))

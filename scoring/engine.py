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
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Callable, Sequence, TypeVar

import numpy as np
import torch

from scoring import shared_source_attention
from scoring.errors import is_out_of_memory

T = TypeVar("T")

DEFAULT_TOKEN_BUDGET = 4096
# On CPU, decoder chunks of at most this many target tokens keep the per-layer temporaries
# (e.g. 2,048 x 3,072 floats for a bart-base feed-forward layer) under glibc's largest mmap
# threshold, so they reuse heap pages instead of faulting in fresh ones: the ensemble benchmark
# ran ~15 % faster than with 8,192-token decoder chunks. GPUs use the full token budget.
CPU_DECODE_TOKEN_BUDGET = 2048


def run_splitting_on_oom(items: list[T], run: Callable[[list[T]], None], on_split: Callable[[], None] | None = None) -> None:
    """Run `run(items)`; on out-of-memory, halve the batch and retry each half.

    The retry runs after the `except` block has ended, so the failed attempt's frames (and the
    tensors they held) are gone before the halves run; only the error's text is kept."""
    pending = [items]
    while pending:
        batch = pending.pop(0)
        failure = None
        try:
            run(batch)
        except Exception as exc:  # noqa: BLE001 - only OOM is handled; everything else re-raises
            if not is_out_of_memory(exc):
                raise
            failure = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if failure is None:
            continue
        if len(batch) <= 1:
            raise RuntimeError(f"out of memory on a single item ({failure}); lower max_length or use a larger device")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if on_split:
            on_split()
        middle = len(batch) // 2
        pending[:0] = [batch[:middle], batch[middle:]]


def budget_batches(lengths: Sequence[int], order: Sequence[int], token_budget: int, max_items: int | None = None,
                   max_padding: float | None = None, *, max_chunk_padding: float | None = None,
                   widths: Sequence[int] | None = None, width_budget: int | None = None) -> list[list[int]]:
    """Group indices (already in the desired order, longest first) so that
    len(batch) * max(length in batch) <= token_budget (at least one item per batch). With
    `max_padding` (a fraction), an item shorter than (1 - max_padding) * the batch's longest
    starts a new batch, so no row of a batch is padded by more than that fraction. With
    `max_chunk_padding`, a batch's padded tokens stay within (1 + max_chunk_padding) x its real
    ones; with `widths` and `width_budget`, len(batch) * max(width in batch) <= width_budget."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = real = widest = 0
    for index in order:
        length = max(int(lengths[index]), 1)
        width = 0 if widths is None else int(widths[index])
        new_longest, new_widest, count = max(longest, length), max(widest, width), len(current) + 1
        too_many = max_items is not None and len(current) >= max_items
        too_short = max_padding is not None and length < (1.0 - max_padding) * longest
        too_padded = max_chunk_padding is not None and new_longest * count > (1.0 + max_chunk_padding) * (real + length)
        too_wide = width_budget is not None and new_widest * count > width_budget
        if current and (new_longest * count > token_budget or too_many or too_short or too_padded or too_wide):
            batches.append(current)
            current, new_longest, new_widest, real = [], length, width, 0
        current.append(index)
        longest, widest, real = new_longest, new_widest, real + length
    if current:
        batches.append(current)
    return batches


class Ragged:
    """Token id sequences in Arrow's list layout: one flat `values` array and `offsets` (n + 1,
    int64), so sequence k is `values[offsets[k]:offsets[k + 1]]`. The metrics' prepared id
    columns (`list<int32>`) arrive in this form without a per-row Python step."""

    __slots__ = ("values", "offsets", "lengths")

    def __init__(self, values, offsets):
        self.values = np.asarray(values)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.lengths = np.diff(self.offsets)

    @classmethod
    def from_lists(cls, sequences: Sequence[Sequence[int]]) -> "Ragged":
        count = len(sequences)
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.fromiter((len(s) for s in sequences), dtype=np.int64, count=count), out=offsets[1:])
        values = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64, count=int(offsets[-1]))
        return cls(values, offsets)

    @classmethod
    def from_arrow(cls, array) -> "Ragged":
        """A `list<int>` Arrow array (or chunked array) as it is: its offsets already index
        its values buffer, slices included. A `list<list<int>>` array gives its inner
        sequences, all rows' in order."""
        if hasattr(array, "combine_chunks"):
            array = array.combine_chunks()
        if hasattr(array.type, "value_type") and hasattr(array.type.value_type, "value_type"):
            array = array.flatten()
        return cls(array.values.to_numpy(zero_copy_only=False), array.offsets.to_numpy(zero_copy_only=False))

    def take(self, index: Sequence[int]) -> "Ragged":
        """Sequences `index` (in that order) as a new Ragged."""
        index = np.asarray(index, dtype=np.int64)
        lengths = self.lengths[index]
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        within = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lengths)
        return Ragged(self.values[np.repeat(self.offsets[index], lengths) + within], offsets)

    def __len__(self) -> int:
        return len(self.lengths)

    def key(self, k: int) -> bytes:
        """Sequence k's ids as bytes (equal ids, equal keys)."""
        return self.values[self.offsets[k] : self.offsets[k + 1]].tobytes()

    def padded(self, index: Sequence[int], pad_id: int, device, start_id: int | None = None) -> tuple[torch.Tensor, ...]:
        """Sequences `index`, right-padded: (ids, mask) as int64 tensors on `device`, plus the
        decoder inputs (ids shifted right behind `start_id`) when it is given. Built with numpy
        from the flat values in one host buffer (pinned on CUDA) and copied to the device in one
        non-blocking copy."""
        index = np.asarray(index, dtype=np.int64)
        lengths = self.lengths[index]
        width = int(lengths.max())
        positions = np.arange(width)
        real = positions[None, :] < lengths[:, None]
        planes = 2 if start_id is None else 3
        on_cuda = _on_cuda(device)
        buffer = torch.empty((planes, len(index), width), dtype=torch.long, pin_memory=on_cuda)
        host = buffer.numpy()
        ids = host[0]
        ids.fill(pad_id)
        ids[real] = self.values[(self.offsets[index][:, None] + positions[None, :])[real]]
        host[1] = real
        if start_id is not None:
            host[2, :, 0] = start_id
            host[2, :, 1:] = ids[:, :-1]
        if on_cuda:
            buffer = buffer.to(device, non_blocking=True)
        elif torch.device(device).type != "cpu":
            buffer = buffer.to(device)
        return tuple(buffer.unbind(0))


def _to_device(tensor: torch.Tensor, device) -> torch.Tensor:
    if torch.device(device).type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def _version_of(tensor: torch.Tensor) -> int:
    """In-place change counter of a tensor (-1 for inference tensors, which keep none)."""
    return -1 if tensor.is_inference() else tensor._version


def _on_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def refuse_float16_for(model) -> None:
    """PEGASUS activations exceed float16's range (NaN/inf NLLs): refuse that pairing."""
    from scoring.errors import UsageError

    if getattr(model.config, "model_type", None) == "pegasus" and next(model.parameters()).dtype == torch.float16:
        raise UsageError("dtype float16 is refused for PEGASUS: its activations overflow float16 (inf/NaN scores); "
                         "use bfloat16 or float32")


def require_ieee_float32(model) -> None:
    """float32 models on CUDA multiply in IEEE float32, not TF32 (10-bit mantissa): TF32 made
    tiny-BART scores differ from the CPU's by 0.025 nats on an H200. A process that switched TF32
    on globally gets a one-line error rather than silently rounded scores; use bfloat16 for speed."""
    from scoring.errors import UsageError

    if _on_cuda(next(model.parameters()).device) and next(model.parameters()).dtype == torch.float32:
        if torch.backends.cuda.matmul.allow_tf32:
            raise UsageError("dtype float32 on CUDA with TF32 matmuls switched on in this process "
                             "(torch.backends.cuda.matmul.allow_tf32): switch it off, or use dtype bfloat16")


def compile_model_layers(model) -> int:
    """Regional `torch.compile` (dynamic shapes) of each encoder and decoder layer, in place:
    LayerNorm, residual adds and activations fused around the GEMMs, fewer kernel launches,
    compile time per layer type rather than per model. A part dynamo cannot trace (the cache
    object, say) runs eagerly (`suppress_errors`: never a failed row). Returns the layer count."""
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    count = 0
    stacks = [model.get_encoder(), model.get_decoder()] if hasattr(model, "get_encoder") else [model.get_decoder()]
    for stack in stacks:
        for layer in getattr(stack, "layers", []):
            layer.compile(dynamic=True)
            count += 1
    return count


def _collect(pending: list[tuple[list, torch.Tensor]], store: Callable[[object, float], None]) -> None:
    """Move the per-chunk results kept on the device to the host in one copy, then store them."""
    if not pending:
        return
    values = torch.cat([tensor.double() for _, tensor in pending]).tolist()  # the one device-to-host read
    keys = [key for chunk_keys, _ in pending for key in chunk_keys]
    for key, value in zip(keys, values):
        store(key, value)
    pending.clear()


def _token_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) per position, computed in float32: logit[label] - logsumexp(logits)."""
    logits = logits.float()
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


class Seq2SeqLikelihood:
    """Mean target-token NLL under an encoder-decoder model (BARTScore Eq. 1-2 with uniform
    weights; CTRLEval's lm_score). The decoder input is the target shifted right behind the
    model's decoder start token, so the model never sees the token it predicts."""

    # Cross-batch planning: the encoder outputs and cross keys/values of consecutive encoder
    # batches, up to POOL_BUDGETS x token_budget padded source tokens (BART-large bfloat16 at a
    # 32,768-token budget: about 6.7 GB), stay alive and their targets are planned together,
    # each decoder chunk's padded tokens within (1 + MAX_DECODER_PADDING) x its real tokens.
    POOL_BUDGETS = 4
    MAX_DECODER_PADDING = 0.2

    def __init__(self, model, pad_id: int, decoder_start_id: int, token_budget: int = DEFAULT_TOKEN_BUDGET, max_batch_items: int | None = None,
                 compile_layers: bool = False, cross_batch: bool | None = None):
        self.model = model
        self.pad_id = pad_id
        self.decoder_start_id = decoder_start_id
        self.token_budget = int(token_budget)
        self.max_batch_items = max_batch_items
        self.device = next(model.parameters()).device
        self.decode_token_budget = min(self.token_budget, CPU_DECODE_TOKEN_BUDGET) if self.device.type == "cpu" else self.token_budget
        self.on_cuda = _on_cuda(self.device)
        refuse_float16_for(model)
        require_ieee_float32(model)
        self.stats: Counter = Counter()
        self._pending: list[tuple[list, torch.Tensor]] = []
        self.head = OutputHead.for_model(model)
        # rows of one source attend to its keys/values as one query sequence (same numbers)
        self.shared_source_attention = shared_source_attention.enable(model)
        self.layout = "auto"  # decoder layout: "auto", "by_length" or "by_slot" (see _decode_plan)
        # decoder chunks planned across encoder batches: on CUDA unless set (CPU keeps
        # per-batch planning, so its scores and signatures stay as they were)
        self.cross_batch = self.on_cuda if cross_batch is None else bool(cross_batch)
        self.pool_budgets = self.POOL_BUDGETS
        self.max_decoder_padding = self.MAX_DECODER_PADDING
        # regional torch.compile of every encoder and decoder layer: CUDA only, off by default
        self.compiled_layers = compile_model_layers(model) if compile_layers and self.on_cuda else 0

    def batching(self) -> str:
        """How rows are batched, for the metrics' signatures; cross-batch planning (CUDA) is
        named only when on, so CPU signatures stay as they were."""
        text = f"length-sorted,token_budget={self.token_budget},decode_token_budget={self.decode_token_budget}"
        if self.cross_batch:
            text += f",decoder_pool={self.pool_budgets}x,max_decoder_padding={self.max_decoder_padding}"
        return text

    @torch.inference_mode()
    def mean_nll(self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[Sequence[int]]]) -> list[list[float]]:
        """For each source i and each of its targets j: -mean log p(target_j | source_i)."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} target lists")
        groups, position = [], 0
        for target_list in targets:
            groups.append(range(position, position + len(target_list)))
            position += len(target_list)
        nll = self.pair_nll(Ragged.from_lists(sources), Ragged.from_lists([t for ts in targets for t in ts]), groups)
        return [nll[group.start : group.stop] for group in groups]

    @torch.inference_mode()
    def pair_nll(self, sources: Ragged, targets: Ragged, groups: Sequence[Sequence[int]]) -> list[float]:
        """-mean log p(target k | source i) for every target k listed in `groups[i]` (each
        target in one group), as a list indexed by target. Sources are encoded once for all
        of their targets; `mean_nll` is this call on nested lists."""
        if len(groups) != len(sources):
            raise ValueError(f"{len(sources)} sources but {len(groups)} target lists")
        source_lengths, target_lengths = sources.lengths.tolist(), targets.lengths.tolist()
        if 0 in source_lengths or 0 in target_lengths:
            for i, group in enumerate(groups):
                if source_lengths[i] == 0:
                    raise ValueError(f"source {i} has no tokens")
                for j, k in enumerate(group):
                    if target_lengths[k] == 0:
                        raise ValueError(f"target {j} of source {i} has no tokens")
        results = [float("nan")] * len(targets)
        order = sorted((i for i in range(len(groups)) if len(groups[i])), key=lambda i: -source_lengths[i])
        plan_lengths = [[target_lengths[k] for k in group] for group in groups]
        self._pending = []
        batch_data = (sources, targets, groups, source_lengths, plan_lengths)

        def store(key, value):
            results[key] = value

        # a pool is one encoder batch, or (cross_batch) the sources of several planned together
        pool_budget = self.token_budget * (self.pool_budgets if self.cross_batch else 1)
        for pool in budget_batches(source_lengths, order, pool_budget, None if self.cross_batch else self.max_batch_items):
            run_splitting_on_oom(pool, lambda p: self._score_pool(p, batch_data), self._count_split)
            if not self.on_cuda:
                _collect(self._pending, store)
        _collect(self._pending, store)
        return results

    def _count_split(self) -> None:
        self.stats["oom_splits"] += 1

    def _score_pool(self, pool: list[int], batch_data) -> None:
        """Encode the sources `pool` in token-budget batches, then decode all of their targets
        in one plan."""
        sources, targets, groups, source_lengths, plan_lengths = batch_data
        batches = budget_batches(source_lengths, pool, self.token_budget, self.max_batch_items)
        encoder_states, attention_mask, cross_kv = self._encode(pool, sources) if len(batches) == 1 else self._encode_pool(batches, sources)
        pool_lengths = [source_lengths[i] for i in pool]
        row_widths = pool_lengths if self.cross_batch else None
        for chunk_pairs in self._plan(pool, plan_lengths, encoder_states.shape[1], row_widths):
            run_splitting_on_oom(
                chunk_pairs,
                lambda cp: self._decode_pairs(cp, encoder_states, attention_mask, cross_kv, targets, groups, pool_lengths),
                self._count_split,
            )

    def _encode(self, batch: list[int], sources: Ragged):
        """(encoder states, source mask, cross keys/values or None) of one source batch."""
        input_ids, attention_mask = sources.padded(batch, self.pad_id, self.device)
        encoder_states = self.model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        self.stats["encoder_passes"] += 1
        self.stats["encoded_sources"] += len(batch)
        return encoder_states, attention_mask, self._cross_attention_kv(encoder_states)

    def _encode_pool(self, batches: list[list[int]], sources: Ragged):
        """`_encode` of several batches as one pool: rows in batch order, each batch copied into
        buffers as wide as the pool's longest source (zeros past a row's width, masked out);
        a batch's own tensors are freed before the next batch runs."""
        rows = sum(len(batch) for batch in batches)
        width = int(max(sources.lengths[batch].max() for batch in batches))
        pooled, start = None, 0
        for batch in batches:
            states, mask, cross_kv = self._encode(batch, sources)
            parts = [states, mask] + [tensor for pair in cross_kv or [] for tensor in pair]
            if pooled is None:
                pooled = [_pool_buffer(part, rows, width) for part in parts]
            for buffer, part in zip(pooled, parts):
                width_dim = 2 if part.dim() == 4 else 1  # keys/values are (rows, heads, width, dim)
                buffer.narrow(0, start, len(batch)).narrow(width_dim, 0, part.shape[width_dim]).copy_(part)
            start += len(batch)
        kv = pooled[2:]
        return pooled[0], pooled[1], [(kv[k], kv[k + 1]) for k in range(0, len(kv), 2)] if kv else None

    # Copying one padded source token's cross-attention keys/values for one more target costs
    # about as much as decoding 1/COPY_TOKENS_PER_DECODE_TOKEN of a target token (measured on
    # CPU with bart-base shapes; the choice below only needs the order of magnitude).
    COPY_TOKENS_PER_DECODE_TOKEN = 16
    # On CUDA a mixed-source decoder chunk gathers at most this many source tokens' keys/values
    # per token of the budget (32,768-token budget, BART-large bf16: <= 6.4 GB gathered)
    GATHERED_SOURCE_TOKENS_PER_BUDGET_TOKEN = 2

    def _decode_plan(self, batch: list[int], targets, source_width: int) -> list[list[tuple[int, int, int]]]:
        """`_plan` for nested target sequences (`targets[i][j]`)."""
        return self._plan(batch, [[len(t) for t in group] for group in targets], source_width)

    def _plan(self, batch: list[int], lengths: Sequence[Sequence[int]], source_width: int,
              row_widths: Sequence[int] | None = None) -> list[list[tuple[int, int, int]]]:
        """Decoder chunks of (row in batch, source, target) for one encoded source batch;
        `lengths[i][j]` is the length of target j of source i. With `row_widths` (each row's
        source length: cross-batch planning) a chunk gathers only its own rows' widest source,
        and padded decoder tokens stay within (1 + max_decoder_padding) x the real ones:
        by-length chunks are cut so, and by slot is used only when it stays within the cap.

        Two layouts; the cheaper by padded decoder tokens plus key/value copies is used:
        - by length: all pairs sorted by target length and cut by the token budget (least
          padding), but a chunk mixing sources must copy each pair's source keys/values;
        - by slot: target j of every source together, rows in source order, cut into
          contiguous runs, so each chunk reads a slice of the cached keys/values without a
          copy (wins when targets are short next to their sources, e.g. CTRLEval label words).
        """
        pairs = [(row, i, j) for row, i in enumerate(batch) for j in range(len(lengths[i]))]
        pair_lengths = [lengths[i][j] for _, i, j in pairs]
        pair_order = sorted(range(len(pairs)), key=lambda p: -pair_lengths[p])
        pair_widths = [source_width if row_widths is None else row_widths[row] for row, _, _ in pairs]
        max_padding = None if row_widths is None else self.max_decoder_padding
        width_budget = None
        if self.on_cuda and len(batch) > 1:
            # a chunk mixing sources gathers every row's cross keys/values (rows x source width
            # x 2 x layers x d): bound those gathered source tokens like the token budget, or a
            # chunk of short targets against long sources can ask for tens of GB
            width_budget = self.GATHERED_SOURCE_TOKENS_PER_BUDGET_TOKEN * self.token_budget
        by_length = [[pairs[p] for p in chunk] for chunk in budget_batches(
            pair_lengths, pair_order, self.decode_token_budget, self.max_batch_items,
            max_chunk_padding=max_padding, widths=pair_widths, width_budget=width_budget)]
        if len(batch) == 1 or self.layout == "by_length":
            return by_length

        def padded_tokens(chunks):
            return sum(len(c) * max(lengths[i][j] for _, i, j in c) for c in chunks)

        by_slot = []
        for j in range(max(len(lengths[i]) for i in batch)):
            slot = [(row, i, j) for row, i in enumerate(batch) if j < len(lengths[i])]
            slot_lengths = [lengths[i][j] for _, i, _ in slot]
            # a slot that skips sources gathers its rows' keys/values: the same bound as by length
            slot_widths = [source_width if row_widths is None else row_widths[row] for row, _, _ in slot]
            runs = budget_batches(slot_lengths, range(len(slot)), self.decode_token_budget, self.max_batch_items, widths=slot_widths,
                                  width_budget=width_budget if len(slot) < len(batch) else None)
            by_slot += [[slot[k] for k in run] for run in runs]

        if self.layout == "by_slot":
            return by_slot
        if max_padding is not None and padded_tokens(by_slot) > (1.0 + max_padding) * sum(pair_lengths):
            return by_length
        if self.on_cuda:
            # a forward costs a launch-bound few ms whatever its size, a key/value gather about
            # nothing: the layout with fewer forwards wins, then the one with less padding
            return min((by_slot, by_length), key=lambda chunks: (len(chunks), padded_tokens(chunks)))

        def gathered_width(chunk):  # the source positions a mixed chunk copies per row
            return source_width if row_widths is None else max(row_widths[row] for row, _, _ in chunk)

        copied = sum(len(c) * gathered_width(c) for c in by_length if len({row for row, _, _ in c}) > 1)
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
            # the (rows, heads, length, dim) views the layer itself would make: no copy here (a
            # chunk of contiguous rows reads a slice of them, a mixed chunk gathers its rows)
            keys = attention.k_proj(encoder_states).view(shape).transpose(1, 2)
            values = attention.v_proj(encoder_states).view(shape).transpose(1, 2)
            projected.append((keys, values))
        return projected

    @staticmethod
    def _cache_for(cross_kv, rows: list[int], rows_on_device: torch.Tensor, width: int, one_source: bool = False):
        """An encoder-decoder cache whose cross-attention layers hold the projected source
        keys/values of these rows, cut to `width` source positions (a view, no copy, when every
        row is the same source or when the rows are a contiguous run of the source batch),
        marked as already computed so the decoder only reads them. `rows` is the host list
        (layout decisions need no device sync), `rows_on_device` the same rows for the gather."""
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        first = rows[0]
        contiguous = rows == list(range(first, first + len(rows)))
        cross = DynamicCache()
        for layer_index, (keys, values) in enumerate(cross_kv):
            keys, values = keys[:, :, :width], values[:, :, :width]
            if one_source:  # one source: broadcast its real positions over the rows
                keys = keys[first : first + 1].expand(len(rows), -1, -1, -1)
                values = values[first : first + 1].expand(len(rows), -1, -1, -1)
            elif contiguous:  # a slice of the cached rows: a view, no copy
                keys, values = keys[first : first + len(rows)], values[first : first + len(rows)]
            else:
                keys, values = keys.index_select(0, rows_on_device), values.index_select(0, rows_on_device)
            cross.update(keys[:, :, :0], values[:, :, :0], layer_index)  # initialise the layer
            cross.layers[layer_index].keys, cross.layers[layer_index].values = keys, values
        cache = EncoderDecoderCache(DynamicCache(), cross)
        for layer_index in range(len(cross_kv)):
            cache.is_updated[layer_index] = True
        return cache

    def _decode_pairs(self, chunk_pairs, encoder_states, attention_mask, cross_kv, targets: Ragged, groups, source_lengths) -> None:
        row_list = [row for row, _, _ in chunk_pairs]
        rows = _to_device(torch.as_tensor(row_list), self.device)
        keys = [groups[i][j] for _, i, j in chunk_pairs]
        labels, label_mask, decoder_inputs = targets.padded(keys, self.pad_id, self.device, self.decoder_start_id)
        one_source = self.head is not None and cross_kv is not None and all(row == row_list[0] for row in row_list)
        # one source, or cross-batch planning: only the chunk's widest real source positions
        # (padding positions would get exactly zero attention weight anyway)
        width = max(source_lengths[row] for row in row_list) if one_source or self.cross_batch else encoder_states.shape[1]
        encoder_states, attention_mask = encoder_states[:, :width], attention_mask[:, :width]
        if self.head is not None:
            if one_source:  # one source for every row: its unpadded keys/values, no mask needed
                cache = self._cache_for(cross_kv, row_list, rows, width, one_source=True)
                first = row_list[0]
                states, source_mask = encoder_states[first : first + 1].expand(len(rows), -1, -1), None
            elif cross_kv is not None:
                cache = self._cache_for(cross_kv, row_list, rows, width)
                states, source_mask = encoder_states[:1].expand(len(rows), -1, -1), attention_mask.index_select(0, rows)
            else:
                cache, states, source_mask = None, encoder_states.index_select(0, rows), attention_mask.index_select(0, rows)
            hidden = self.model.get_decoder()(
                input_ids=decoder_inputs,
                attention_mask=label_mask,
                # with cached cross keys/values the states only give the mask its shape
                encoder_hidden_states=states,
                encoder_attention_mask=source_mask,
                cache=cache,
                use_cache=False,
            ).last_hidden_state
            sums = self.head.target_logprob_sums(hidden, labels, targets.lengths[keys])
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
        chunk_lengths = targets.lengths[keys]  # host-known: padded vs real decoder tokens
        self.stats["decoder_tokens_real"] += int(chunk_lengths.sum())
        self.stats["decoder_tokens_padded"] += len(keys) * int(chunk_lengths.max())
        self._pending.append((keys, -(sums / label_mask.sum(-1))))


def _pool_buffer(part: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """Zeros for `rows` rows of `width` source positions shaped like `part`; keys/values
    (rows, heads, width, dim) keep the strides their projection gives them."""
    if part.dim() == 4:
        return part.new_zeros((rows, width, part.shape[1], part.shape[3])).transpose(1, 2)
    return part.new_zeros((rows, width, *part.shape[2:]))


def real_positions(lengths: Sequence[int], device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(row, column) index tensors on `device` of the first `lengths[row]` positions of every
    row, built on the host (no device read), and their count."""
    counts = np.asarray(lengths, dtype=np.int64)
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    index = np.empty((2, total), dtype=np.int64)
    index[0] = np.repeat(np.arange(len(counts)), counts)
    index[1] = np.arange(total) - np.repeat(starts, counts)
    owners, columns = _to_device(torch.from_numpy(index), device).unbind(0)
    return owners, columns, total


class OutputHead:
    """The LM head applied only where it is needed: on real (non-pad) target positions, a
    chunk of positions at a time, so the full [batch, length, vocabulary] logits tensor is
    never built. Only for architectures whose logits are exactly `lm_head(h) +
    final_logits_bias` (BART, PEGASUS, mBART, Marian) or `lm_head(h)` (GPT-2, Llama-like causal
    models); others use the model's own forward.

    One pass over each chunk's float32 logits after the GEMM writes them: no bias pass when
    `final_logits_bias` is zero (checked when its weights change, not per call), and the
    log-normaliser log sum_v exp(z_v) = m + log sum_v exp(z_v - m), m = max_v z_v, as one fused
    reduction on CUDA (a compiled `logsumexp`; eager `torch.logsumexp` where compiling is not
    possible) and in place on the chunk on CPU (no temporary: docs/gpu.md)."""

    ARCHITECTURES = ("bart", "mbart", "pegasus", "marian")
    CAUSAL_ARCHITECTURES = ("gpt2", "llama", "mistral", "qwen2")
    # Logits of one chunk stay below glibc's largest mmap threshold (32 MiB), so the allocator
    # reuses heap memory between chunks instead of mapping (and page-faulting) fresh pages:
    # with 1,024 positions x 50k vocabulary (200 MiB logits plus a 200 MiB temporary per chunk)
    # the logsumexp alone took 40 % of the head's time in a CPU profile.
    CHUNK_BYTES = 24 << 20
    # On CUDA a chunk is sized for the device: float32 logits of this many bytes per chunk
    # (about 2,600 positions of a 50k vocabulary), so the loop is a handful of large GEMMs.
    CUDA_CHUNK_BYTES = 512 << 20

    def __init__(self, model):
        self.model = model
        self._weight_key = None
        self._weight = None
        self._bias_key = None
        self._bias = None
        vocabulary = model.get_output_embeddings().weight.shape[0]
        self.on_cuda = _on_cuda(model.get_output_embeddings().weight.device)
        chunk_bytes = self.CUDA_CHUNK_BYTES if self.on_cuda else self.CHUNK_BYTES
        self.positions_per_chunk = max(1, chunk_bytes // (4 * vocabulary))
        self.bias()  # read the bias once now (a host read), not inside a scoring call

    def vocabulary_major_weight(self) -> torch.Tensor:
        """(hidden, vocabulary) copy of the output embedding: it multiplies 10-15 % faster on
        CPU than the transposed view (measured with MKL, 50k vocabulary). Rebuilt whenever the
        model's weight is replaced or changed in place (e.g. a state dict loaded on top)."""
        weight = self.model.get_output_embeddings().weight
        key = (weight.data_ptr(), _version_of(weight), weight.dtype)
        if key != self._weight_key:
            self._weight = weight.detach().t().contiguous()
            self._weight_key = key
        return self._weight

    def bias(self) -> torch.Tensor | None:
        """`final_logits_bias` in float32, or None when there is none or it is all zeros (as in
        the published BART and PEGASUS checkpoints): then no pass adds it. Re-checked only when
        the bias tensor is replaced or changed in place (e.g. a state dict loaded on top)."""
        bias = getattr(self.model, "final_logits_bias", None)
        if bias is None:
            return None
        key = (bias.data_ptr(), _version_of(bias))
        if key != self._bias_key:
            self._bias = bias.reshape(-1).float() if bool(bias.detach().any()) else None
            self._bias_key = key
        return self._bias

    @classmethod
    def for_model(cls, model) -> "OutputHead | None":
        if getattr(model.config, "model_type", None) not in cls.ARCHITECTURES:
            return None
        if model.get_output_embeddings() is None or not hasattr(model, "get_decoder"):
            return None
        return cls(model)

    @classmethod
    def for_causal_model(cls, model) -> "OutputHead | None":
        """The head of a causal LM whose logits are `lm_head(base_model(x))` exactly (no bias,
        scaling or soft-capping), or None."""
        if getattr(model.config, "model_type", None) not in cls.CAUSAL_ARCHITECTURES:
            return None
        head = model.get_output_embeddings()
        if head is None or getattr(head, "bias", None) is not None or getattr(model, "base_model", model) is model:
            return None
        return cls(model)

    def target_logprob_sums(self, hidden: torch.Tensor, labels: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
        """Per row: sum over its first `lengths[row]` positions of log p(label) =
        logit[label] - logsumexp(logits), in float32 (logsumexp as max + log(sum(exp(logits -
        max))), in place on the chunk). The real positions are indexed from the host-side
        lengths, so the loop bounds never wait for the device."""
        owners, columns, total = real_positions(lengths, hidden.device)
        states, targets = hidden[owners, columns], labels[owners, columns]
        token_logprobs = torch.empty(total, dtype=torch.float32, device=hidden.device)
        weight, bias = self.vocabulary_major_weight(), self.bias()
        for start in range(0, total, self.positions_per_chunk):
            stop = start + self.positions_per_chunk
            logits = self._logits(states[start:stop], weight)
            if bias is not None:
                logits += bias
            picked = logits.gather(-1, targets[start:stop, None]).squeeze(-1)
            token_logprobs[start:stop] = picked - self._log_normaliser(logits)
        sums = torch.zeros(labels.shape[0], dtype=torch.float32, device=hidden.device)
        return sums.index_add_(0, owners, token_logprobs)

    def _log_normaliser(self, logits: torch.Tensor) -> torch.Tensor:
        """log sum_v exp(logits[:, v]) per row, float32; may overwrite `logits`."""
        if self.on_cuda:
            return fused_logsumexp(logits)
        peak = logits.amax(dim=-1, keepdim=True)
        return logits.sub_(peak).exp_().sum(dim=-1).log_() + peak.squeeze(-1)

    def _logits(self, states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """float32 logits; on CUDA a half-precision GEMM accumulates into float32 directly
        (no rounding of the logits to bf16/fp16 first)."""
        if self.on_cuda and states.dtype in (torch.bfloat16, torch.float16):
            return torch.mm(states, weight, out_dtype=torch.float32)
        return (states @ weight).float()


_COMPILED_LOGSUMEXP: list = []  # [] not tried yet, [fn] compiled, [None] compiling failed


def _logsumexp_last(logits: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(logits, dim=-1)


def fused_logsumexp(logits: torch.Tensor) -> torch.Tensor:
    """`torch.logsumexp(logits, -1)` compiled once (dynamic row count) into one fused reduction
    that reads the logits once; eager from the first time compiling or running the compiled
    function fails here (no Triton, say). Out-of-memory and accelerator errors are the
    caller's (the batch is split, or the process ends)."""
    from scoring.errors import is_accelerator_error

    if not _COMPILED_LOGSUMEXP:
        _COMPILED_LOGSUMEXP.append(torch.compile(_logsumexp_last, dynamic=True))
    compiled = _COMPILED_LOGSUMEXP[0]
    if compiled is not None:
        try:
            return compiled(logits)
        except Exception as exc:  # noqa: BLE001 - a compiler that fails only costs speed
            if is_out_of_memory(exc) or is_accelerator_error(exc):
                raise
            _COMPILED_LOGSUMEXP[0] = None
    return torch.logsumexp(logits, dim=-1)


class CausalLikelihood:
    """Summed token NLL under a causal LM, every token after the first predicted."""

    def __init__(self, model, pad_id: int, token_budget: int = DEFAULT_TOKEN_BUDGET, max_batch_items: int | None = None):
        self.model = model
        self.pad_id = pad_id
        self.token_budget = int(token_budget)
        self.max_batch_items = max_batch_items
        self.device = next(model.parameters()).device
        self.on_cuda = _on_cuda(self.device)
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
                _collect(self._pending, store)
        _collect(self._pending, store)
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
        logprobs = _token_logprobs(logits[:, :-1], input_ids[:, 1:]) * mask[:, 1:]
        self._pending.append((list(batch), -logprobs.sum(-1)))

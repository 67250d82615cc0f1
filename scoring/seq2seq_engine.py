"""The seq2seq likelihood engine: per-target mean token NLL, each source encoded once for all of its
targets (docs/metrics.md, L1; docs/gpu.md for the CUDA path)."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Sequence

import numpy as np
import torch

from scoring import layer_caches, shared_source_attention
from scoring.engine_setup import compile_model_layers, refuse_float16_for, require_cache_keyword, require_ieee_float32
from scoring.fused_activations import fuse_tanh_gelu, one_kernel_gelus
from scoring.output_head import OutputHead, token_logprobs
from scoring.packed_decoder import can_pack_decoder, packed_decoder_states
from scoring.packed_encoder import can_pack_encoder, packed_encoder_states
from scoring.planning import (
    CPU_DECODE_TOKEN_BUDGET,
    DEFAULT_TOKEN_BUDGET,
    budget_batches,
    run_splitting_on_oom,
    source_grouped_chunks,
)
from scoring.ragged import Ragged, collect, is_cuda, length_mask, packed_rows, packed_targets, to_device
from scoring.varlen_attention import CrossSegments, DecoderPacking, PackedSegments, SourceRuns


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
    # Packed decoder chunks (`packed_decoder`) are cut by real tokens: a chunk's target tokens
    # plus its sources' tokens / SOURCE_TOKENS_PER_DECODER_TOKEN. Per layer a source token costs
    # its key and value projections (2 d^2 multiply-adds), a target token about 14 d^2 (4 d^2
    # self-attention, 2 d^2 cross query and output, 8 d^2 feed-forward of width 4d).
    SOURCE_TOKENS_PER_DECODER_TOKEN = 7

    def __init__(self, model, pad_id: int, decoder_start_id: int, token_budget: int = DEFAULT_TOKEN_BUDGET, max_batch_items: int | None = None,
                 compile_layers: bool = False, cross_batch: bool | None = None,
                 fuse_activations: bool | None = None):
        require_cache_keyword(type(model.get_decoder()))  # the decoder is handed its cross keys/values as `cache=`
        self.model = model
        self.pad_id = pad_id
        self.decoder_start_id = decoder_start_id
        self.token_budget = int(token_budget)
        self.max_batch_items = max_batch_items
        self.device = next(model.parameters()).device
        self.decode_token_budget = min(self.token_budget, CPU_DECODE_TOKEN_BUDGET) if self.device.type == "cpu" else self.token_budget
        self.on_cuda = is_cuda(self.device)
        refuse_float16_for(model)
        require_ieee_float32(model)
        self.stats: Counter = Counter()
        self._pending: list[tuple[list, torch.Tensor]] = []
        self.head = OutputHead.for_model(model)
        # rows of one source attend to its keys/values as one query sequence (same numbers)
        self.shared_source_attention = shared_source_attention.enable(model)
        # each decoder layer reads its own cross keys/values at index 0 (scoring/layer_caches.py)
        self.per_layer_caches = layer_caches.install(model)
        self.layout = "auto"  # decoder layout: "auto", "by_length" or "by_slot" (see _decode_plan)
        # decoder chunks planned across encoder batches: on CUDA unless set (CPU keeps
        # per-batch planning, so its scores and signatures stay as they were)
        self.cross_batch = self.on_cuda if cross_batch is None else bool(cross_batch)
        self.pool_budgets = self.POOL_BUDGETS
        self.max_decoder_padding = self.MAX_DECODER_PADDING
        # Python-built tanh GELUs replaced by the one-kernel GELU: on CUDA unless set (a CPU keeps
        # its scores bit for bit; scoring/fused_activations.py); `fused_activations`: how many the
        # model runs (derived from the model, so an engine on a model fused before says so too)
        self.fuse_activations = self.on_cuda if fuse_activations is None else bool(fuse_activations)
        if self.fuse_activations:
            fuse_tanh_gelu(model)
        self.fused_activations = one_kernel_gelus(model)
        # regional torch.compile of every encoder and decoder layer: CUDA only, off by default
        self.compiled_layers = compile_model_layers(model) if compile_layers and self.on_cuda else 0
        # cross-attention per source for chunks that would gather keys/values (rows sorted by
        # source, each source read once for all of its rows: scoring/varlen_attention.py); off:
        # 0.86x on the H200's grouped case, where the packed decoder gathers nothing anyway
        self.source_runs = False
        # sources packed into one row through the encoder (scoring/packed_encoder.py), and targets
        # packed through the decoder with cross-attention per source from host-built cu_seqlens
        # (scoring/packed_decoder.py): no padded token in any GEMM. On CUDA wherever the model can
        # pack both (1.28x BART distinct, 2.47x grouped, 1.38x PEGASUS on an H200:
        # benchmarks/results/gpu-check-h200-2026-11-28); off on CPU so its scores and signatures
        # stay as they were; set either to override
        packs = self.on_cuda and self.head is not None and can_pack_decoder(model)
        self.packed_encoder = packs
        self.packed_decoder = packs

    def batching(self) -> str:
        """How rows are batched and computed, for the metrics' signatures; cross-batch planning,
        packing and the fused GELU (CUDA defaults) are named only when on, so CPU signatures
        stay as they were."""
        text = f"length-sorted,token_budget={self.token_budget},decode_token_budget={self.decode_token_budget}"
        if self.packed_decoder:  # chunks of real tokens: no padding cap to name
            pool = f",decoder_pool={self.pool_budgets}x" if self.cross_batch else ""
            text += pool + f",packed_decoder,source_tokens_per_decoder_token={self.SOURCE_TOKENS_PER_DECODER_TOKEN}"
        elif self.cross_batch:
            text += f",decoder_pool={self.pool_budgets}x,max_decoder_padding={self.max_decoder_padding}"
        return text + (",tanh_gelu_one_kernel" if self.fused_activations else "")

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
        if self.packed_encoder and not can_pack_encoder(self.model):
            raise ValueError(f"a packed encoder is not supported for model type {getattr(self.model.config, 'model_type', None)!r} "
                             f"with attention {getattr(self.model.config, '_attn_implementation', None)!r}")
        if self.packed_decoder and (self.head is None or not can_pack_decoder(self.model)):
            raise ValueError(f"a packed decoder is not supported for model type {getattr(self.model.config, 'model_type', None)!r} "
                             f"with attention {getattr(self.model.config, '_attn_implementation', None)!r}")
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
        score_pool = self._score_packed_pool if self.packed_decoder else self._score_pool
        for pool in budget_batches(source_lengths, order, pool_budget, None if self.cross_batch else self.max_batch_items):
            run_splitting_on_oom(pool, lambda p: score_pool(p, batch_data), self._count_split)
            if not self.on_cuda:
                collect(self._pending, store)
        collect(self._pending, store)
        return results

    def _count_split(self) -> None:
        self.stats["oom_splits"] += 1

    def _score_pool(self, pool: list[int], batch_data) -> None:
        """Encode the sources `pool` in token-budget batches, then decode all of their targets
        in one plan. A pool of several batches (cross-batch planning) keeps only the encoder
        states, its rows laid out in the order the decoder chunks first use them, so that a
        chunk of distinct sources reads a contiguous slice of the keys/values projected once
        from the pool (a view) instead of gathering them per target."""
        sources, targets, groups, source_lengths, plan_lengths = batch_data
        batches = budget_batches(source_lengths, pool, self.token_budget, self.max_batch_items)
        pool_lengths = [source_lengths[i] for i in pool]
        row_widths = pool_lengths if self.cross_batch else None
        chunks = self._plan(pool, plan_lengths, max(pool_lengths), row_widths)
        if self.cross_batch:  # rows in first-use order (an encoder batch's row order is free)
            chunks, pool = _rows_in_first_use_order(chunks, pool)
            pool_lengths = [source_lengths[i] for i in pool]
        if len(batches) == 1:
            encoder_states, attention_mask, cross_kv = self._encode(pool, sources)
        else:
            encoder_states, attention_mask, cross_kv = self._encode_pool(batches, sources, pool)
        for chunk_pairs in chunks:
            run_splitting_on_oom(
                chunk_pairs,
                lambda cp: self._decode_pairs(cp, encoder_states, attention_mask, cross_kv, targets, groups, pool_lengths),
                self._count_split,
            )

    def _encode(self, batch: list[int], sources: Ragged, project: bool = True):
        """(encoder states, source mask, cross keys/values or None) of one source batch."""
        if self.packed_encoder:
            return self._encode_packed(batch, sources, project)
        input_ids, attention_mask = sources.padded(batch, self.pad_id, self.device)
        encoder_states = self.model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        self.stats["encoder_passes"] += 1
        self.stats["encoded_sources"] += len(batch)
        self.stats["encoder_tokens_real"] += int(sources.lengths[batch].sum())  # host-known lengths
        self.stats["encoder_tokens_padded"] += input_ids.numel()
        return encoder_states, attention_mask, self._cross_attention_kv(encoder_states) if project else None

    def _encode_packed(self, batch: list[int], sources: Ragged, project: bool):
        """`_encode` with the batch's sources packed into one row through the encoder (no
        padded token in its GEMMs), the states then laid out right-padded for the decoder."""
        states, packed = self._packed_source_states(batch, sources)
        lengths = sources.lengths[batch].tolist()  # numpy on the host, no device read
        encoder_states = states.new_zeros((len(batch), max(lengths), states.shape[-1]))
        encoder_states[packed["owners"], packed["columns"]] = states
        attention_mask = length_mask(lengths, max(lengths), self.device)
        return encoder_states, attention_mask, self._cross_attention_kv(encoder_states) if project else None

    def _packed_source_states(self, batch: list[int], sources: Ragged) -> tuple[torch.Tensor, dict]:
        """(T, d) encoder states of the batch's sources packed into one row, and the packed
        layout (`scoring.ragged.packed_rows`)."""
        packed = packed_rows(sources, batch, self.device)
        lengths = tuple(sources.lengths[batch].tolist())  # numpy on the host, no device read
        segments = PackedSegments(lengths, packed["cu_seqlens"], max(lengths))
        states = packed_encoder_states(self.model.get_encoder(), packed["ids"], packed["positions"], segments)
        self.stats["encoder_passes"] += 1
        self.stats["encoded_sources"] += len(batch)
        self.stats["encoder_tokens_real"] += segments.total
        self.stats["encoder_tokens_padded"] += segments.total
        return states, packed

    def _score_packed_pool(self, pool: list[int], batch_data) -> None:
        """`_score_pool` with nothing padded (`packed_decoder`): the pool's sources encoded
        packed, a batch at a time, their states kept packed, (T_pool, d) in pool order (a pool
        of several batches copies each batch's real tokens into one buffer); the pool's
        (source, target) pairs in source order, cut into chunks of real tokens
        (`planning.source_grouped_chunks`), each chunk decoded packed against the slice of
        states of its sources (a view)."""
        sources, targets, groups, source_lengths, _ = batch_data
        batches = budget_batches(source_lengths, pool, self.token_budget, self.max_batch_items)
        pool = [i for batch in batches for i in batch]  # batches are consecutive runs of the pool
        pool_lengths = [source_lengths[i] for i in pool]
        offsets = np.concatenate([[0], np.cumsum(pool_lengths)]).tolist()
        if len(batches) == 1:
            states, _ = self._packed_source_states(batches[0], sources)
        else:
            states, start = None, 0
            for batch in batches:
                part, _ = self._packed_source_states(batch, sources)
                if states is None:
                    states = part.new_empty((offsets[-1], part.shape[-1]))
                states[start : start + part.shape[0]].copy_(part)
                start += part.shape[0]
                self.stats["bytes_pooled"] += part.numel() * part.element_size()
                del part
        pairs = [(slot, i, j) for slot, i in enumerate(pool) for j in range(len(groups[i]))]
        chunks = source_grouped_chunks([slot for slot, _, _ in pairs], [int(targets.lengths[groups[i][j]]) for _, i, j in pairs],
                                       pool_lengths, self.decode_token_budget, self.SOURCE_TOKENS_PER_DECODER_TOKEN,
                                       self.max_batch_items)
        for chunk in chunks:
            run_splitting_on_oom([pairs[p] for p in chunk],
                                 lambda cp: self._decode_packed(cp, states, offsets, pool_lengths, targets, groups), self._count_split)

    def _decode_packed(self, chunk_pairs, states: torch.Tensor, offsets: list[int], pool_lengths: list[int], targets: Ragged,
                       groups) -> None:
        """One packed decoder forward for `chunk_pairs` ((slot, source, target) sorted by
        slot: consecutive slots of the pool): every index built on the host."""
        slots, group_sizes = [], []
        for slot, _, _ in chunk_pairs:
            if slots and slots[-1] == slot:
                group_sizes[-1] += 1
            else:
                slots.append(slot)
                group_sizes.append(1)
        key_lengths = [pool_lengths[slot] for slot in slots]
        source_states = states[offsets[slots[0]] : offsets[slots[-1] + 1]]  # a view of the chunk's sources
        keys = [groups[i][j] for _, i, j in chunk_pairs]
        target_lengths = targets.lengths[keys]  # host-known
        packed = packed_targets(targets, keys, self.decoder_start_id, group_sizes, key_lengths, self.device)
        ends = np.cumsum(target_lengths)
        group_ends = ends[np.cumsum(group_sizes) - 1]
        query_lengths = tuple(np.diff(group_ends, prepend=0).tolist())
        packing = DecoderPacking(
            PackedSegments(tuple(target_lengths.tolist()), packed["cu_seqlens"], int(target_lengths.max())),
            CrossSegments(query_lengths, tuple(key_lengths), packed["cu_seqlens_q"], packed["cu_seqlens_k"],
                          max(query_lengths), max(key_lengths)),
        )
        hidden = packed_decoder_states(self.model.get_decoder(), packed["inputs"], packed["positions"], source_states, packing)
        sums = self.head.logprob_sums_at(hidden, packed["labels"], packed["owners"], len(keys))
        real = int(ends[-1])
        self.stats["decoder_passes"] += 1
        self.stats["decoded_targets"] += len(keys)
        self.stats["decoder_tokens_real"] += real
        self.stats["decoder_tokens_padded"] += real
        self.stats["cross_kv_tokens"] += sum(key_lengths)
        self._pending.append((keys, -(sums / packed["lengths"])))

    def _encode_pool(self, batches: list[list[int]], sources: Ragged, rows: list[int]):
        """`_encode` of several batches as one pool whose row k is source `rows[k]`: each
        batch's encoder states copied into one buffer as wide as the pool's longest source
        (zeros past a row's width, masked out by a mask built on the host from the lengths),
        a batch's own tensors freed before the next batch runs; then the cross keys/values
        projected once from the pooled states (nothing else is pooled or copied)."""
        lengths = sources.lengths[np.asarray(rows, dtype=np.int64)]
        width = int(lengths.max())
        slot = {source: k for k, source in enumerate(rows)}
        pooled = None
        for batch in batches:
            states, _, _ = self._encode(batch, sources, project=False)
            if pooled is None:
                pooled = states.new_zeros((len(rows), width, states.shape[-1]))
            destination = [slot[i] for i in batch]
            target = pooled[:, : states.shape[1]]
            if destination == list(range(destination[0], destination[0] + len(batch))):
                target.narrow(0, destination[0], len(batch)).copy_(states)
            else:
                target.index_copy_(0, to_device(torch.as_tensor(destination), self.device), states)
            self.stats["bytes_pooled"] += states.numel() * states.element_size()
        mask = length_mask(lengths, width, self.device)
        return pooled, mask, self._cross_attention_kv(pooled)

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
        # cross-batch planning with one target per source: rows are laid out in first-use
        # order, so every chunk reads a slice of the keys/values and none gathers
        gathers = not (row_widths is not None and all(len(lengths[i]) <= 1 for i in batch))
        if self.source_runs and self.shared_source_attention and self.head is not None:
            gathers = False  # mixed chunks read their sources' keys/values as views, per source
        if self.on_cuda and len(batch) > 1 and gathers:
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
        self.stats["cross_kv_tokens"] += encoder_states.shape[0] * encoder_states.shape[1]  # rows x width: shapes, no read
        for layer in layers:
            attention = layer.encoder_attn
            shape = (*encoder_states.shape[:-1], -1, attention.head_dim)
            # the (rows, heads, length, dim) views the layer itself would make: no copy here (a
            # chunk of contiguous rows reads a slice of them, a mixed chunk gathers its rows)
            keys = attention.k_proj(encoder_states).view(shape).transpose(1, 2)
            values = attention.v_proj(encoder_states).view(shape).transpose(1, 2)
            projected.append((keys, values))
        return projected

    def _decoder_cache(self, layer_kv):
        """The context in which the decoder reads these per-layer (keys, values): each layer
        its own one-layer cache at index 0 (`scoring.layer_caches`: the compiled graphs do
        not depend on the layer index), or, where the hook could not be installed, one cache
        for all layers; nothing without keys/values."""
        if layer_kv is None:
            return contextlib.nullcontext(None)
        if self.per_layer_caches:
            return layer_caches.layer_caches(self.model, layer_kv)
        return contextlib.nullcontext(layer_caches.cross_cache(layer_kv))

    @staticmethod
    def _rows_view(cross_kv, start: int, stop: int):
        """Rows [start, stop) of the projected keys/values at their full width, per layer
        (views: no copy)."""
        return [(keys[start:stop], values[start:stop]) for keys, values in cross_kv]

    def _rows_for(self, cross_kv, rows: list[int], rows_on_device: torch.Tensor, width: int, one_source: bool = False):
        """The projected source keys/values of these rows per layer, cut to `width`
        source positions (a view, no copy, when every row is the same source or when the rows
        are a contiguous run of the source batch). `rows` is the host list (layout decisions
        need no device sync), `rows_on_device` the same rows for the gather."""
        first = rows[0]
        contiguous = rows == list(range(first, first + len(rows)))

        def layer(keys, values):
            keys, values = keys[:, :, :width], values[:, :, :width]
            if one_source:  # one source: broadcast its real positions over the rows
                return (keys[first : first + 1].expand(len(rows), -1, -1, -1),
                        values[first : first + 1].expand(len(rows), -1, -1, -1))
            if contiguous:  # a slice of the cached rows: a view, no copy
                return keys[first : first + len(rows)], values[first : first + len(rows)]
            keys, values = keys.index_select(0, rows_on_device), values.index_select(0, rows_on_device)
            self.stats["bytes_gathered"] += 2 * keys.numel() * keys.element_size()
            return keys, values

        return [layer(keys, values) for keys, values in cross_kv]

    def _decode_pairs(self, chunk_pairs, encoder_states, attention_mask, cross_kv, targets: Ragged, groups, source_lengths) -> None:
        if self.source_runs and self.shared_source_attention and self.head is not None and cross_kv is not None:
            chunk_pairs = sorted(chunk_pairs, key=lambda pair: pair[0])  # rows by source: runs
        row_list = [row for row, _, _ in chunk_pairs]
        rows = to_device(torch.as_tensor(row_list), self.device)
        keys = [groups[i][j] for _, i, j in chunk_pairs]
        labels, label_mask, decoder_inputs = targets.padded(keys, self.pad_id, self.device, self.decoder_start_id)
        one_source = self.head is not None and cross_kv is not None and all(row == row_list[0] for row in row_list)
        # one source, or cross-batch planning: only the chunk's widest real source positions
        # (padding positions would get exactly zero attention weight anyway)
        width = max(source_lengths[row] for row in row_list) if one_source or self.cross_batch else encoder_states.shape[1]
        encoder_states, attention_mask = encoder_states[:, :width], attention_mask[:, :width]
        runs_kwargs = {}
        if self.head is not None:
            contiguous = row_list == list(range(row_list[0], row_list[0] + len(row_list)))
            if one_source:  # one source for every row: its unpadded keys/values, no mask needed
                layer_kv = self._rows_for(cross_kv, row_list, rows, width, one_source=True)
                first = row_list[0]
                states, source_mask = encoder_states[first : first + 1].expand(len(rows), -1, -1), None
            elif cross_kv is not None and self.source_runs and self.shared_source_attention and not contiguous:
                # rows sorted by source: the keys/values of the chunk's first to last source as
                # a view, each source's positions read once for all of its rows (no gather)
                first, last = row_list[0], row_list[-1]
                layer_kv = self._rows_view(cross_kv, first, last + 1)
                runs = SourceRuns(tuple(row - first for row in row_list), tuple(source_lengths[first : last + 1]))
                if self.on_cuda:
                    runs = runs.with_kernel_index(decoder_inputs.shape[1], cross_kv[0][0].shape[2], self.device)
                runs_kwargs = {shared_source_attention.SOURCE_RUNS_KWARG: runs}
                states, source_mask = encoder_states[:1].expand(len(rows), -1, -1), None
                self.stats["source_run_chunks"] += 1
            elif cross_kv is not None:
                layer_kv = self._rows_for(cross_kv, row_list, rows, width)
                states, source_mask = encoder_states[:1].expand(len(rows), -1, -1), attention_mask.index_select(0, rows)
            else:
                layer_kv, states, source_mask = None, encoder_states.index_select(0, rows), attention_mask.index_select(0, rows)
            with self._decoder_cache(layer_kv) as cache:
                hidden = self.model.get_decoder()(
                    input_ids=decoder_inputs,
                    attention_mask=label_mask,
                    # with cached cross keys/values the states only give the mask its shape
                    encoder_hidden_states=states,
                    encoder_attention_mask=source_mask,
                    cache=cache,
                    use_cache=False,
                    **runs_kwargs,
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
            sums = (token_logprobs(logits, labels) * label_mask).sum(-1)
        self.stats["decoder_passes"] += 1
        self.stats["decoded_targets"] += len(chunk_pairs)
        chunk_lengths = targets.lengths[keys]  # host-known: padded vs real decoder tokens
        self.stats["decoder_tokens_real"] += int(chunk_lengths.sum())
        self.stats["decoder_tokens_padded"] += len(keys) * int(chunk_lengths.max())
        self._pending.append((keys, -(sums / label_mask.sum(-1))))



def _rows_in_first_use_order(chunks: list[list[tuple[int, int, int]]], pool: list[int]):
    """The pool's rows renumbered in the order the decoder chunks first use them, so a chunk
    whose sources appear nowhere earlier is a contiguous run of rows: (the chunks with new
    row numbers, the pool's sources in that order)."""
    order: dict[int, int] = {}
    for chunk in chunks:
        for row, _, _ in chunk:
            order.setdefault(row, len(order))
    for row in range(len(pool)):  # rows without targets (none are planned, but keep every row)
        order.setdefault(row, len(order))
    renumbered = [[(order[row], i, j) for row, i, j in chunk] for chunk in chunks]
    sources = [0] * len(pool)
    for row, new in order.items():
        sources[new] = pool[row]
    return renumbered, sources

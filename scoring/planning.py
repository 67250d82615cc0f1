"""Batching by a token budget and out-of-memory halving: the planning shared by the likelihood
engines (scoring/seq2seq_engine.py, scoring/causal_engine.py) and the other model metrics.

Rows are sorted by length and cut into batches whose padded tokens (rows x longest row) stay
within a budget; a batch that runs out of device memory is halved and each half retried."""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import torch

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



def packed_batches(lengths: Sequence[int], order: Sequence[int], token_budget: int, max_items: int | None = None) -> list[list[int]]:
    """Consecutive runs of `order` whose real tokens (sum of lengths, no padding: sequences
    packed end to end) stay within `token_budget` (at least one item per run)."""
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for index in order:
        length = max(int(lengths[index]), 1)
        if current and (tokens + length > token_budget or (max_items is not None and len(current) >= max_items)):
            batches.append(current)
            current, tokens = [], 0
        current.append(index)
        tokens += length
    if current:
        batches.append(current)
    return batches


def source_grouped_chunks(pair_sources: Sequence[int], pair_lengths: Sequence[int], source_lengths: Sequence[int],
                          token_budget: int, source_tokens_per_token: float, max_items: int | None = None) -> list[list[int]]:
    """Consecutive runs of pairs 0..n-1 (ordered so that each source's pairs are together;
    `pair_sources[p]` indexes `source_lengths`) for packed decoder chunks. A run costs its real
    target tokens plus, for each distinct source it reads, that source's tokens divided by
    `source_tokens_per_token` (the keys/values its layers project from them), and stays within
    `token_budget` (at least one pair per run) and `max_items` pairs. A source whose pairs
    overflow a run continues in the next, where its keys/values are projected again."""
    chunks: list[list[int]] = []
    current: list[int] = []
    cost = 0.0
    for pair, (source, length) in enumerate(zip(pair_sources, pair_lengths)):
        new_source = not current or pair_sources[current[-1]] != source
        added = max(int(length), 1) + (source_lengths[source] / source_tokens_per_token if new_source else 0.0)
        if current and (cost + added > token_budget or (max_items is not None and len(current) >= max_items)):
            chunks.append(current)
            current, cost = [], 0.0
            added = max(int(length), 1) + source_lengths[source] / source_tokens_per_token  # the source again
        current.append(pair)
        cost += added
    if current:
        chunks.append(current)
    return chunks

"""Token id sequences in Arrow's list layout and their trips between host and device: right-padded
batches built on the host in one (pinned, on CUDA) buffer, index tensors of real positions
built from host-known lengths, and the one device-to-host read of a scoring call (`collect`)."""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np
import torch


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
        on_cuda = is_cuda(device)
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



def packed_rows(ragged: "Ragged", index: Sequence[int], device) -> dict[str, torch.Tensor]:
    """Sequences `index` of `ragged` end to end, for a packed encoder, in one host-built copy:
    `ids` and `positions` (within each sequence) of the T tokens, `owners` and `columns` (the
    row and column of each token in the padded layout, to unpack states), `cu_seqlens` (int32)."""
    lengths, _, within, tokens = _packed_tokens(ragged, index)
    count, total = len(lengths), len(tokens)
    sizes = (total, total, total, count + 1)
    buffer, (ids, positions, owners, cu) = _host_planes(sizes, device)
    ids[:], positions[:] = tokens, within
    owners[:] = np.repeat(np.arange(count), lengths)
    _cumulative(lengths, cu)
    parts = _moved(buffer, ("ids", "positions", "owners", "cu_seqlens"), sizes, device)
    parts["columns"] = parts["positions"]
    return parts


def packed_causal(ragged: "Ragged", index: Sequence[int], device) -> dict[str, torch.Tensor]:
    """Sequences `index` of `ragged` laid end to end in one row, for a packed causal forward,
    built on the host and copied to `device` in one (pinned, non-blocking on CUDA) copy:
    `ids` and `positions` (0..L-1 within each sequence) of the T packed tokens, `predicting`
    the T - n positions that predict a next token of their own sequence (every token but a
    sequence's last), `owners` the sequence (0..n-1) of each of them, and `cu_seqlens`
    (n + 1, int32) for the attention kernel."""
    lengths, _, within, tokens = _packed_tokens(ragged, index)
    count, total = len(lengths), len(tokens)
    predicted = total - count
    sizes = (total, total, predicted, predicted, count + 1)
    buffer, (ids, positions, predicting, owners, cu) = _host_planes(sizes, device)
    ids[:], positions[:] = tokens, within
    keep = within < np.repeat(lengths - 1, lengths)  # a sequence's last token predicts nothing
    predicting[:] = np.flatnonzero(keep)
    owners[:] = np.repeat(np.arange(count), lengths - 1)
    _cumulative(lengths, cu)
    return _moved(buffer, ("ids", "positions", "predicting", "owners", "cu_seqlens"), sizes, device)


def packed_targets(ragged: "Ragged", index: Sequence[int], start_id: int, group_sizes: Sequence[int],
                   key_lengths: Sequence[int], device) -> dict[str, torch.Tensor]:
    """Targets `index` of `ragged` end to end for a packed seq2seq decoder, in one host-built
    (pinned, non-blocking on CUDA) copy: `inputs` (each target shifted right behind
    `start_id`), `labels` (the targets' own tokens: every position predicts one), `positions`
    (0..L-1 within each target) and `owners` (the target, 0..n-1, of each of the T tokens),
    `lengths` (n), `cu_seqlens` (n + 1, int32) of the targets, and for cross-attention
    `cu_seqlens_q` and `cu_seqlens_k` (U + 1, int32): the targets form U consecutive groups of
    `group_sizes[u]` targets, group u reading a source of `key_lengths[u]` packed tokens."""
    lengths, starts, within, tokens = _packed_tokens(ragged, index)
    count, total, groups = len(lengths), len(tokens), len(group_sizes)
    sizes = (total, total, total, total, count, count + 1, groups + 1, groups + 1)
    buffer, (inputs, labels, positions, owners, counts, cu, cu_q, cu_k) = _host_planes(sizes, device)
    labels[:], positions[:] = tokens, within
    inputs[1:] = labels[:-1]
    inputs[starts] = start_id  # every target starts behind the decoder start token
    owners[:] = np.repeat(np.arange(count), lengths)
    counts[:] = lengths
    _cumulative(lengths, cu)
    cu_q[0] = 0
    cu_q[1:] = cu[np.cumsum(np.asarray(group_sizes, dtype=np.int64))]
    _cumulative(key_lengths, cu_k)
    names = ("inputs", "labels", "positions", "owners", "lengths", "cu_seqlens", "cu_seqlens_q", "cu_seqlens_k")
    return _moved(buffer, names, sizes, device)


def _packed_tokens(ragged: "Ragged", index: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lengths, first position, position within its sequence, token id) of sequences `index`
    of `ragged` laid end to end."""
    index = np.asarray(index, dtype=np.int64)
    lengths = ragged.lengths[index]
    starts = np.cumsum(lengths) - lengths
    within = np.arange(int(lengths.sum())) - np.repeat(starts, lengths)
    return lengths, starts, within, ragged.values[np.repeat(ragged.offsets[index], lengths) + within]


def _host_planes(sizes: Sequence[int], device) -> tuple[torch.Tensor, list[np.ndarray]]:
    """One int64 host buffer (pinned for CUDA) of `sum(sizes)` and its numpy views, one per size."""
    buffer = torch.empty(sum(sizes), dtype=torch.long, pin_memory=is_cuda(device))
    return buffer, np.split(buffer.numpy(), np.cumsum(sizes)[:-1])


def _cumulative(lengths: Sequence[int], out: np.ndarray) -> None:
    """`out` = [0, L_1, L_1 + L_2, ...]: cu_seqlens in place."""
    out[0] = 0
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=out[1:])


def _moved(buffer: torch.Tensor, names: Sequence[str], sizes: Sequence[int], device) -> dict[str, torch.Tensor]:
    """`buffer` on `device` in one copy (non-blocking from pinned memory on CUDA), split into
    the named parts; every `cu_seqlens...` part as int32, the layout the varlen kernels read."""
    moved = buffer.to(device, non_blocking=True) if is_cuda(device) else buffer.to(device)
    parts = dict(zip(names, moved.split(list(sizes))))
    for name in names:
        if name.startswith("cu_seqlens"):
            parts[name] = parts[name].int()
    return parts


def length_mask(lengths: Sequence[int], width: int, device) -> torch.Tensor:
    """(rows, width) int64 mask, 1 on each row's first `lengths[row]` positions, built on the
    host and copied to `device` (non-blocking from pinned memory on CUDA)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    buffer = torch.empty((len(lengths), width), dtype=torch.long, pin_memory=is_cuda(device))
    buffer.numpy()[:] = np.arange(width)[None, :] < lengths[:, None]
    return buffer.to(device, non_blocking=True) if is_cuda(device) else buffer.to(device)


def to_device(tensor: torch.Tensor, device) -> torch.Tensor:
    if torch.device(device).type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)



def is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"



def collect(pending: list[tuple[list, torch.Tensor]], store: Callable[[object, float], None]) -> None:
    """Move the per-chunk results kept on the device to the host in one copy, then store them."""
    if not pending:
        return
    values = torch.cat([tensor.double() for _, tensor in pending]).tolist()  # the one device-to-host read
    keys = [key for chunk_keys, _ in pending for key in chunk_keys]
    for key, value in zip(keys, values):
        store(key, value)
    pending.clear()


def real_positions(lengths: Sequence[int], device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(row, column) index tensors on `device` of the first `lengths[row]` positions of every
    row, built on the host (no device read), and their count."""
    counts = np.asarray(lengths, dtype=np.int64)
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    index = np.empty((2, total), dtype=np.int64)
    index[0] = np.repeat(np.arange(len(counts)), counts)
    index[1] = np.arange(total) - np.repeat(starts, counts)
    owners, columns = to_device(torch.from_numpy(index), device).unbind(0)
    return owners, columns, total

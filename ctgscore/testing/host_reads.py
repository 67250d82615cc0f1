"""Counting device-to-host reads on any device: every `Tensor` method that waits for a CUDA
stream when the tensor lives on a GPU (`__bool__`, `.item`, `.tolist`, `.cpu`, `int()`,
`float()`). On CPU the same Python runs, so the count is the count a GPU would sync."""

from __future__ import annotations

import contextlib
import traceback

READS = ("__bool__", "item", "tolist", "cpu", "__int__", "__float__")


@contextlib.contextmanager
def counted_reads():
    """Yields a list that collects "<method> at <file>:<line>" for every read in the block."""
    import torch

    seen: list[str] = []
    saved = {name: getattr(torch.Tensor, name) for name in READS}

    def wrap(name, original):
        def read(self, *args, **kwargs):
            frame = traceback.extract_stack(limit=2)[0]
            seen.append(f"{name} at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}")
            return original(self, *args, **kwargs)
        return read

    for name, original in saved.items():
        setattr(torch.Tensor, name, wrap(name, original))
    try:
        yield seen
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)

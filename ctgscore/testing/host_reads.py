"""Counting device-to-host reads on any device: every `Tensor` method that waits for a CUDA
stream when the tensor lives on a GPU (`__bool__`, `.item`, `.tolist`, `.cpu`, `int()`,
`float()`). On CPU the same Python runs, so the count is the count a GPU would sync.

Code that `torch.compile` generates at run time (dynamo's graphs and guards, "<...>" files;
inductor's wrappers, in its cache folder) calls `.item()` on CPU scalars it lifts from float
attributes (LayerNorm eps, attention scale): host memory, never a device wait. Such reads are
recorded with a "<...>" file name, so `device_reads` can leave them out, and `cuda_only` counts
only reads of tensors that live on a GPU (what a benchmark on CUDA wants to know)."""

from __future__ import annotations

import contextlib
import traceback

READS = ("__bool__", "item", "tolist", "cpu", "__int__", "__float__")
GENERATED_FOLDER_MARK = "torchinductor"  # inductor's cache folder: /tmp/torchinductor_<user>/...


def read_site(filename: str, lineno: int) -> str:
    """"file:line" of a read; code torch.compile generated starts with "<" (dynamo's own
    "<eval_with_key>.N" and "<string>", "<inductor:file>" for inductor's wrappers)."""
    name = filename.rsplit("/", 1)[-1]
    if GENERATED_FOLDER_MARK in filename and not filename.startswith("<"):
        name = f"<inductor:{name}>"
    return f"{name}:{lineno}"


def device_reads(seen: list[str]) -> list[str]:
    """The reads of `counted_reads` made by code in source files (engine code), not by code
    torch.compile generated."""
    return [read for read in seen if not read.split(" at ", 1)[1].startswith("<")]


@contextlib.contextmanager
def counted_reads(cuda_only: bool = False):
    """Yields a list that collects "<method> at <file>:<line>" for every read in the block;
    `cuda_only`: reads of tensors on a CUDA device only."""
    import torch

    seen: list[str] = []
    saved = {name: getattr(torch.Tensor, name) for name in READS}

    def wrap(name, original):
        def read(self, *args, **kwargs):
            if not cuda_only or self.is_cuda:
                frame = traceback.extract_stack(limit=2)[0]
                seen.append(f"{name} at {read_site(frame.filename, frame.lineno)}")
            return original(self, *args, **kwargs)
        return read

    for name, original in saved.items():
        setattr(torch.Tensor, name, wrap(name, original))
    try:
        yield seen
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)

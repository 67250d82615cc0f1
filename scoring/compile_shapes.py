"""How a compiled layer of a packed path is traced: shape-generic from its first chunk
(docs/gpu.md, "How often a layer compiles").

The packed encoder and decoder hand every layer a row of T tokens and the chunk's lengths as
CPU tensors of one entry per sequence (`scoring.varlen_attention`). Traced with torch's
defaults, a layer specialised on what its first chunks happened to hold, and compiled again
at run time for a later chunk without it: a size of 1 (a single source, a single target, a
decoder chunk of one token) became a constant, two sizes equal at trace time (one target per
source: as many targets as cross-attention groups) became one symbol ("duck sizing"). With
`backed_size_oblivious` a size seen as 1 stays a symbol, and without duck sizing every size
gets its own. Both are settings torch reads when it traces, so they apply to the layers
called inside `generic_shapes()` only; an eager call is unaffected."""

from __future__ import annotations

import contextlib

#: torch.fx.experimental._config settings for tracing the packed layers (those the installed
#: torch knows: `backed_size_oblivious` is recent)
GENERIC_SHAPES = {"backed_size_oblivious": True, "use_duck_shape": False}


def generic_shapes():
    """A context in which a layer compiled with `dynamic=True` is traced shape-generic: no 0/1
    specialisation, no duck sizing."""
    try:
        from torch.fx.experimental import _config
    except ImportError:  # pragma: no cover - every torch ctgscore supports has it
        return contextlib.nullcontext()
    known = {name: value for name, value in GENERIC_SHAPES.items() if hasattr(_config, name)}
    return _config.patch(known) if known else contextlib.nullcontext()

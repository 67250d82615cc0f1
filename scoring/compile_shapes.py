"""How a compiled layer of a packed path is traced: shape-generic from its first chunk
(docs/gpu.md, "How often a layer compiles").

The packed encoder, decoder and causal forwards hand every layer a row of T tokens and the
chunk's lengths as CPU tensors of one entry per sequence (`scoring.varlen_attention`). Traced
with torch's defaults, a layer specialised on what its first chunks happened to hold, and
compiled again at run time for a later chunk without it: a size of 1 (a single source, a
single target, a decoder chunk of one token) became a constant or a guard `2 <= size`, and two
sizes equal at trace time (one target per source: as many targets as cross-attention groups)
became one symbol ("duck sizing"). With `backed_size_oblivious` a size seen as 1 stays a
symbol, and without duck sizing every size gets its own. Both are settings torch reads when
it traces, so they apply to the compiled layers called inside `generic_shapes(layers)` only;
an eager call is unaffected."""

from __future__ import annotations

import contextlib
import functools

#: torch.fx.experimental._config settings for tracing the packed layers (`backed_size_oblivious`
#: is in torch since 2.7; an older one gets the other setting only)
GENERIC_SHAPES = {"backed_size_oblivious": True, "use_duck_shape": False}


def generic_shapes(layers):
    """A context in which compiled `layers` (`layer.compile(dynamic=True)`: torch's
    `_compiled_call_impl`) are traced shape-generic: no 0/1 specialisation, no duck sizing
    (thread-local, as torch's config patches are). Layers not compiled get a no-op context:
    entering the patch costs microseconds, and the packed decoder runs once per chunk."""
    if getattr(next(iter(layers), None), "_compiled_call_impl", None) is None:
        return contextlib.nullcontext()
    return _patch(tuple(sorted(GENERIC_SHAPES.items())))


@functools.cache
def _patch(settings: tuple):
    """One reusable torch config patch of `settings` (building one costs tens of microseconds)."""
    from torch.fx.experimental import _config

    known = {name: value for name, value in settings if hasattr(_config, name)}
    return _config.patch(known) if known else contextlib.nullcontext()

"""Each decoder layer of the padded seq2seq decoder reads its own cross-attention cache.

The likelihood engine hands the decoder its precomputed cross-attention keys/values as a
transformers cache marked as already computed. A BART, PEGASUS or mBART attention reads its
entry by `self.layer_idx` (`cache.is_updated[layer_idx]`, `cache.cross_attention_cache.
layers[layer_idx]`), and under `torch.compile` dynamo guards on that Python int, so every
decoder layer index compiled a graph of its own per chunk kind (docs/gpu.md, "How often a
layer compiles").

Here every decoder layer gets a one-layer cache of its own keys/values at index 0, swapped in
for the `cache` argument by a forward pre-hook (`install`), and for the duration of the call
every attention in the decoder layers reads index 0 (`layer_caches`). The tensors are the
same ones, so the numbers are the same, compiled or not; the graphs no longer depend on the
layer index, so the compiled graph count no longer grows with depth. Each layer's cache also
has its own (empty, discarded) self-attention cache, which the self-attention appends to at
index 0 as it did at its own index before. During a call the model's decoder attentions all
read index 0, so one model must not run a decoder call of another caller (a second thread,
`generate`) at the same time; outside the call every `layer_idx` is as it was.
"""

from __future__ import annotations

import contextlib

# the decoder layer attribute holding that layer's own cache during an engine call
ATTRIBUTE = "_ctgscore_own_cache"
_INSTALLED = "_ctgscore_own_cache_hook"


def cross_cache(layers):
    """An encoder-decoder cache whose cross-attention layers hold these (keys, values), one
    pair per layer from index 0, marked as already computed so the attention only reads them."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    cross = DynamicCache()
    count = 0
    for layer_index, (keys, values) in enumerate(layers):
        cross.update(keys[:, :, :0], values[:, :, :0], layer_index)  # initialise the layer
        cross.layers[layer_index].keys, cross.layers[layer_index].values = keys, values
        count += 1
    cache = EncoderDecoderCache(DynamicCache(), cross)
    for layer_index in range(count):
        cache.is_updated[layer_index] = True
    return cache


def _own_cache(module, args, kwargs):
    """Forward pre-hook: the layer's own cache, when one is set, replaces its `cache` argument.
    One module-level function for every layer, reading only the layer it is called with, so
    nothing in it depends on the layer index."""
    own = getattr(module, ATTRIBUTE, None)
    if own is not None:
        kwargs["cache"] = own
    return args, kwargs


def _decoder_layers(model):
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    return list(getattr(decoder, "layers", None) or [])


def _indexed_attentions(layer):
    return [module for module in layer.modules() if isinstance(getattr(module, "layer_idx", None), int)]


def install(model) -> bool:
    """Register the pre-hook on every decoder layer (once). False, nothing registered, when
    the decoder's layers are not found or a layer has no attention indexed by `layer_idx`:
    then the engine keeps one cache for all layers."""
    layers = _decoder_layers(model)
    if not layers or not all(_indexed_attentions(layer) for layer in layers):
        return False
    for layer in layers:
        if not getattr(layer, _INSTALLED, False):
            layer.register_forward_pre_hook(_own_cache, with_kwargs=True)
            setattr(layer, _INSTALLED, True)
            setattr(layer, ATTRIBUTE, None)
    return True


@contextlib.contextmanager
def layer_caches(model, cross_kv):
    """For one decoder call: layer i reads (keys, values) `cross_kv[i]` as its own cache at
    index 0. Yields the cache to hand the decoder itself (empty: the decoder only reads its
    self-attention length, 0, and builds its masks from it). Everything is restored on the way
    out, an exception (an out-of-memory retry) included."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    layers = _decoder_layers(model)
    cross_kv = list(cross_kv)
    if len(cross_kv) != len(layers):
        raise ValueError(f"{len(cross_kv)} cross-attention keys/values for {len(layers)} decoder layers")
    saved = []
    try:
        for layer, (keys, values) in zip(layers, cross_kv):
            setattr(layer, ATTRIBUTE, cross_cache([(keys, values)]))
            for attention in _indexed_attentions(layer):
                saved.append((attention, attention.layer_idx))
                attention.layer_idx = 0
        yield EncoderDecoderCache(DynamicCache(), DynamicCache())
    finally:
        for attention, index in saved:
            attention.layer_idx = index
        for layer in layers:
            setattr(layer, ATTRIBUTE, None)

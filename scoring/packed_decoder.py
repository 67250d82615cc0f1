"""The decoder of a BART-family or PEGASUS model run on packed targets: no padded target token
enters its GEMMs (docs/gpu.md, "Packed tokens").

Like the packed encoder (scoring/packed_encoder.py), the engine runs the decoder's own modules
in their order on one packed row: token embeddings of the decoder inputs (each target shifted
right behind the decoder start token), positional embeddings at each token's position within
its own target, BART's `layernorm_embedding`, every layer, PEGASUS's and mBART's final
`layer_norm`. Each layer's self-attention is causal and block-diagonal per target; its
cross-attention reads the chunk's sources' packed encoder states (projected to keys/values by
the layer itself, each source's once for all of its targets), target group u attending to
source u only (`scoring.varlen_attention.DecoderPacking`). The same numbers as the padded
decoder on each target's real positions, within float32 rounding
(`tests/test_packed_decoder.py`)."""

from __future__ import annotations

import torch

from scoring import shared_source_attention
from scoring.compile_shapes import generic_shapes
from scoring.packed_encoder import can_pack_encoder, packed_embeddings
from scoring.varlen_attention import DecoderPacking


def can_pack_decoder(model) -> bool:
    """`can_pack_encoder`, and every decoder layer has BART-style cross-attention projections
    (`encoder_attn.k_proj`, `v_proj`) that a packed row of source states can go through."""
    if not can_pack_encoder(model):
        return False
    layers = getattr(model.get_decoder(), "layers", None)
    return bool(layers) and all(hasattr(getattr(layer, "encoder_attn", None), "k_proj") for layer in layers)


def packed_decoder_states(decoder, inputs: torch.Tensor, positions: torch.Tensor, source_states: torch.Tensor,
                          packing: DecoderPacking) -> torch.Tensor:
    """(T, d) decoder states of T packed target tokens (`inputs`, and `positions` within each
    target) against the (S, d) packed states of their sources, grouped as `packing` says."""
    hidden = packed_embeddings(decoder, inputs, positions)
    sources = source_states[None]
    with generic_shapes(decoder.layers):  # a compiled layer traced for any chunk layout
        for layer in decoder.layers:
            hidden = layer(hidden, None, encoder_hidden_states=sources, encoder_attention_mask=None, cache=None, use_cache=False,
                           **{shared_source_attention.PACKING_KWARG: packing})
    final = getattr(decoder, "layer_norm", None)
    if final is not None:
        hidden = final(hidden)
    return hidden[0]

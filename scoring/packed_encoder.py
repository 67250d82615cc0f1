"""The encoder of a BART-family or PEGASUS model run on packed sources: no padded token enters
its GEMMs (docs/gpu.md, "Packed tokens").

transformers' encoders number positions 0..length-1 per padded row and take no `position_ids`,
so the engine runs the encoder's own modules in their order on one packed row: token
embeddings (scaled as the model scales them), positional embeddings at each token's position
within its own source, BART's `layernorm_embedding`, every layer with block-diagonal
(non-causal) attention from host-built `cu_seqlens`, PEGASUS's and mBART's final `layer_norm`.
The same numbers as the padded encoder on each source's real positions, within float32
rounding (`tests/test_packed_attention.py`)."""

from __future__ import annotations

import torch

from scoring import shared_source_attention
from scoring.compile_shapes import generic_shapes
from scoring.varlen_attention import PackedSegments

ARCHITECTURES = ("bart", "mbart", "pegasus")


def can_pack_encoder(model) -> bool:
    """A supported architecture running the engine's attention function (eval mode: no
    LayerDrop, no dropout)."""
    return (getattr(model.config, "model_type", None) in ARCHITECTURES and not model.training
            and getattr(model.config, "_attn_implementation", None) == shared_source_attention.NAME)


def packed_encoder_states(encoder, ids: torch.Tensor, positions: torch.Tensor, segments: PackedSegments) -> torch.Tensor:
    """(T, d) encoder states of T packed source tokens (`ids`, and `positions` within each
    source), the sources' boundaries in `segments`."""
    hidden = packed_embeddings(encoder, ids, positions)
    with generic_shapes(encoder.layers):  # a compiled layer traced for any chunk layout
        for layer in encoder.layers:
            hidden = layer(hidden, None, **{shared_source_attention.PACKING_KWARG: segments})
    final = getattr(encoder, "layer_norm", None)
    if final is not None:
        hidden = final(hidden)
    return hidden[0]


def packed_embeddings(stack, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(1, T, d) input of an encoder or decoder `stack` for T packed tokens: token embeddings
    (scaled as the model scales them), positional embeddings at `positions` (each token's
    position within its own sequence: BART's and mBART's learned ones with their offset,
    PEGASUS's sinusoidal ones), then `layernorm_embedding` where there is one."""
    embeds = stack.embed_tokens(ids[None]) * getattr(stack, "embed_scale", 1.0)  # BART scales inside embed_tokens
    hidden = embeds + stack.embed_positions(ids[None], 0, position_ids=positions).to(embeds.device)
    norm = getattr(stack, "layernorm_embedding", None)
    return hidden if norm is None else norm(hidden)

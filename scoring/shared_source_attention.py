"""Cross-attention for a decoder batch whose rows all read the same source.

When the likelihood engine decodes many targets of one source (a prompt ensemble, many
references), the cached cross-attention keys/values of that source are broadcast over the
batch (`expand`, stride 0). Attention has no interaction between queries, so the queries of
all rows can attend to the one source as a single long query sequence: the same numbers as
row-by-row attention, with the source's keys/values read once instead of once per row
(about 25 % less cross-attention time on CPU for bart-base shapes, measured).

A forward called with `ctgscore_packing=` (sequences packed into one row, no padding) gets
block-diagonal attention from scoring/varlen_attention.py instead (a packed decoder's
`DecoderPacking`: causal per target in self-attention, per source in cross-attention), and a
decoder forward called with `ctgscore_source_runs=` (rows sorted by source) cross-attention per
source from there.

Plugged in through transformers' `AttentionInterface` as "ctgscore_sdpa": every other call
(self-attention, encoder, batches of several sources) goes to the library's own SDPA function
unchanged. Masks are built as for "sdpa" but never skipped (`sdpa_mask_without_skips`):
transformers decides whether a mask can be dropped by reading the padding mask back to the
host (`padding_mask.all()`), one device sync per encoder forward and two or three per decoder
forward. Always materialising the boolean mask from the known shapes costs a small mask
tensor and keeps the CPU free to run ahead of the GPU (docs/gpu.md, "No host sync").
"""

from __future__ import annotations

import torch

NAME = "ctgscore_sdpa"
# a forward given this keyword (a `scoring.varlen_attention.PackedSegments`) runs packed attention
PACKING_KWARG = "ctgscore_packing"
# a decoder forward given this keyword (a `scoring.varlen_attention.SourceRuns`) runs its
# cross-attention per source, each source's keys/values read once for all of its rows
SOURCE_RUNS_KWARG = "ctgscore_source_runs"


_PACKED_MASKS: dict[torch.device, torch.Tensor] = {}


def packed_mask(device) -> torch.Tensor:
    """The placeholder 4-D mask a packed causal forward hands transformers (which passes a 4-D
    mask through untouched, so it builds none; the attention function reads the segments
    instead): one tensor per device, so the attention function knows it again when a layer
    drops the segments' keyword on the way (`refuse_packed_without_segments`)."""
    device = torch.device(device)
    if device not in _PACKED_MASKS:
        _PACKED_MASKS[device] = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)
    return _PACKED_MASKS[device]


def refuse_packed_without_segments(module, attention_mask) -> None:
    """ValueError when the packed placeholder mask arrives without its segments: the layer did
    not hand its keyword arguments on to its attention (Nemotron's and StableLM's decoder
    layers in transformers 5.24), so attention would run across every sequence of the row."""
    if attention_mask is not None and any(attention_mask is mask for mask in _PACKED_MASKS.values()):
        raise ValueError(f"packed attention cannot run {type(module).__name__}: its layer drops the packed segments "
                         "on the way to attention; score this model unpacked")


def _is_broadcast(tensor: torch.Tensor) -> bool:
    return tensor.shape[0] > 1 and tensor.stride(0) == 0


def shared_source_sdpa(module, query, key, value, attention_mask, **kwargs):
    """SDPA with queries (B, H, L, D); when key/value are one source broadcast over B rows
    (and every row's mask is that source's mask), attend once with all B*L queries."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    segments = kwargs.pop(PACKING_KWARG, None)
    runs = kwargs.pop(SOURCE_RUNS_KWARG, None)
    if runs is not None and not getattr(module, "is_causal", False):  # cross-attention of a chunk of source runs
        from scoring.varlen_attention import source_run_attention

        return source_run_attention(query, key, value, runs, kwargs.get("scaling")), None
    if segments is not None:  # one packed row of whole sequences (scoring/varlen_attention.py)
        from scoring.varlen_attention import packed_attention, packed_cross_attention

        refuse_packed_extras(module, kwargs)

        cross = getattr(segments, "cross", None)  # a packed decoder's `DecoderPacking`
        if cross is not None:
            if getattr(module, "is_causal", False):  # self-attention: causal per target
                return packed_attention(query, key, value, segments.targets, kwargs.get("scaling"), causal=True), None
            return packed_cross_attention(query, key, value, cross, kwargs.get("scaling")), None
        return packed_attention(query, key, value, segments, kwargs.get("scaling"), causal=getattr(module, "is_causal", True)), None
    refuse_packed_without_segments(module, attention_mask)
    if not (_is_broadcast(key) and _is_broadcast(value)) or getattr(module, "is_causal", False):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    rows, heads, length, dim = query.shape
    if attention_mask is not None:
        first = attention_mask[:1, :, :1]
        if not bool((attention_mask == first).all()):  # rows differ after all: no folding
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        attention_mask = first
    folded = query.transpose(0, 1).reshape(1, heads, rows * length, dim)
    output, weights = sdpa_attention_forward(module, folded, key[:1], value[:1], attention_mask, **kwargs)
    # output: (1, rows * length, heads, dim), query-major like the input -> (rows, length, heads, dim)
    return output.reshape(rows, length, heads, dim), weights


# keywords a layer hands its attention function that change the attention itself; packed
# attention computes none of them, so a layer that sets one is refused, never silently ignored
PACKED_UNSUPPORTED = ("sliding_window", "softcap", "s_aux")


def refuse_packed_extras(module, kwargs) -> None:
    """ValueError when a layer asks packed attention for a sliding window, a logit soft cap or
    attention sinks (the engines keep such models off the packed paths; this is the backstop)."""
    extras = [name for name in PACKED_UNSUPPORTED if kwargs.get(name) is not None]
    if extras:
        raise ValueError(f"packed attention cannot run {type(module).__name__} with {', '.join(extras)}: "
                         "score this model unpacked")


def sdpa_mask_without_skips(*args, **kwargs):
    """transformers' SDPA mask with both skip checks off whenever there is a padding mask:
    built from shapes and the padding mask by indexing alone, it never inspects the mask's
    values (no device-to-host read). Without a padding mask the checks read nothing from the
    device, so they keep deciding (no mask at all for a bidirectional call)."""
    from transformers.masking_utils import sdpa_mask

    if kwargs.get("attention_mask") is not None or (len(args) > 6 and args[6] is not None):
        kwargs["allow_is_causal_skip"] = False
        kwargs["allow_is_bidirectional_skip"] = False
    return sdpa_mask(*args, **kwargs)


def enable(model) -> bool:
    """Switch `model` from "sdpa" to the shared-source variant (same numbers). False when the
    model uses another attention implementation or cannot switch; then nothing changes."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return getattr(model.config, "_attn_implementation", None) == NAME
    AttentionInterface.register(NAME, shared_source_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask_without_skips)
    try:
        model.set_attn_implementation(NAME)
    except (KeyError, ValueError, AttributeError):
        return False
    return model.config._attn_implementation == NAME

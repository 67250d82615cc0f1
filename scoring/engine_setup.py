"""Checks and setup the likelihood engines apply to a model before scoring: dtypes refused or
required, and the regional `torch.compile` of the transformer layers."""

from __future__ import annotations

import torch

from scoring.ragged import is_cuda


def refuse_float16_for(model) -> None:
    """PEGASUS activations exceed float16's range (NaN/inf NLLs): refuse that pairing."""
    from scoring.errors import UsageError

    if getattr(model.config, "model_type", None) == "pegasus" and next(model.parameters()).dtype == torch.float16:
        raise UsageError("dtype float16 is refused for PEGASUS: its activations overflow float16 (inf/NaN scores); "
                         "use bfloat16 or float32")


def require_cache_keyword(module_class: type) -> None:
    """The engines hand transformers their precomputed keys/values as `cache=`, the keyword
    from transformers 5.24 on. An older transformers names it `past_key_values` and takes a
    `cache=` silently into its **kwargs: every decoder row would attend to the placeholder
    states the engine passes beside its cache, wrong scores and no error. A module class whose
    forward does not name `cache` is refused in one line instead."""
    import inspect

    if "cache" in inspect.signature(module_class.forward).parameters:
        return
    import transformers

    from scoring.errors import UsageError

    raise UsageError(f"transformers {transformers.__version__} is too old: ctgscore needs >= 5.24 (its models take `cache=`); "
                     "on a GPU machine without a registry carry .whl (`make gpu-wheels`, docs/gpu.md)")


def require_causal_attention(model) -> None:
    """A likelihood of x_t given x_<t needs a decoder that attends left to right; one configured
    to attend both ways (Gemma 3's `use_bidirectional_attention`: an embedding model) is
    refused in one line: its prompt caches and packed rows would give other numbers than its
    forward, and its "perplexity" would mean nothing."""
    from scoring.errors import UsageError
    from scoring.output_head import is_causal

    if not is_causal(model.config):
        raise UsageError(f"model type {getattr(model.config, 'model_type', None)!r} is configured to attend both ways "
                         "(use_bidirectional_attention): a causal likelihood needs a left-to-right LM")


def rope_switch_length(config) -> int | None:
    """The length T past which a model's rotary frequencies change with the batch, or None.
    transformers picks them from the longest position of the whole forward, L = max(position_ids)
    + 1: LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini) takes its long factors when L > T =
    `original_max_position_embeddings`, dynamic NTK rescales when L > T = `max_position_embeddings`.
    A sequence batched with a longer one across T would get other positions than alone, so the
    engines never batch sequences of both sides of T together (`split_at_rope_switch`). Dynamic
    NTK past T also depends on the calls before (the longest length seen); the metrics refuse
    rows past the position table, so it never switches there. Per-layer rotary parameters
    (Gemma 3's `{layer type: parameters}`) give the smallest T of their layers."""
    parameters = getattr(config, "rope_parameters", None) or {}
    entries = list(parameters.values()) if all(isinstance(v, dict) for v in parameters.values()) and parameters else [parameters]
    found = []
    for entry in entries:
        kind = str(entry.get("rope_type", "default"))
        if kind == "longrope":
            found.append(entry.get("original_max_position_embeddings") or getattr(config, "original_max_position_embeddings", None)
                         or getattr(config, "max_position_embeddings", None))
        elif "dynamic" in kind:
            found.append(getattr(config, "max_position_embeddings", None))
    found = [int(t) for t in found if t is not None]
    return min(found) if found else None


def split_at_rope_switch(order: list[int], lengths, switch: int | None) -> list[list[int]]:
    """`order` as one run, or, past a rope switch T (`rope_switch_length`), as two runs in the
    same order: the items longer than T, then the others (so no batch straddles T)."""
    if switch is None:
        return [order]
    long = [i for i in order if int(lengths[i]) > switch]
    short = [i for i in order if int(lengths[i]) <= switch]
    return [run for run in (long, short) if run]


def require_ieee_float32(model) -> None:
    """float32 models on CUDA multiply in IEEE float32, not TF32 (10-bit mantissa): TF32 made
    tiny-BART scores differ from the CPU's by 0.025 nats on an H200. A process that switched TF32
    on globally gets a one-line error rather than silently rounded scores; use bfloat16 for speed."""
    from scoring.errors import UsageError

    if is_cuda(next(model.parameters()).device) and next(model.parameters()).dtype == torch.float32:
        if torch.backends.cuda.matmul.allow_tf32:
            raise UsageError("dtype float32 on CUDA with TF32 matmuls switched on in this process "
                             "(torch.backends.cuda.matmul.allow_tf32): switch it off, or use dtype bfloat16")


def layer_stacks(model) -> list:
    """The transformer layer lists of `model`: an encoder-decoder's encoder and decoder
    `.layers`; a causal LM's `.layers` (Llama family) or `.h` (GPT-2)."""
    stacks = [model.get_encoder(), model.get_decoder()] if hasattr(model, "get_encoder") else [getattr(model, "base_model", model)]
    found = []
    for stack in stacks:
        layers = getattr(stack, "layers", None)
        if layers is None:
            layers = getattr(stack, "h", None)
        if layers is not None:
            found.append(layers)
    return found


def compile_model_layers(model, backend="inductor") -> int:
    """Regional `torch.compile` (dynamic shapes) of each encoder and decoder layer (or each
    block of a causal LM, GPT-2's `.h` included), in place: LayerNorm, residual adds and
    activations fused around the GEMMs, fewer kernel launches, compile time per layer type
    rather than per model. A part dynamo cannot trace (the cache object, say) runs eagerly
    (`suppress_errors`: never a failed row). All layers get the same `backend` (the engines:
    inductor; tests: a CPU one), so layers of one type share their compiled graphs. Returns
    the layer count."""
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    count = 0
    for layers in layer_stacks(model):
        for layer in layers:
            layer.compile(dynamic=True, backend=backend)
            count += 1
    raise_recompile_limit(count)
    return count


GRAPHS_PER_LAYER = 8  # dynamo's own default recompile limit of one function


def raise_recompile_limit(layer_count: int) -> None:
    """Every transformers layer runs through one shared wrapper function (the gradient-
    checkpointing `forward` of `GradientCheckpointingLayer`), and dynamo's recompile limit (8)
    counts the graphs of a function, so all layers of all types share 8 graphs, after which
    the rest run eagerly, silently. The padded decoder compiles per chunk kind, not per layer
    index (each layer reads its own cache at index 0, `scoring.layer_caches`): 6 graphs for a
    tiny BART with 2 or 4 layers per stack (11 and 21 before), 7 with source runs (13 and 25);
    BART-large on a GPU 4 (26 before) (docs/gpu.md, "How often a layer compiles"). The limit
    becomes dynamo's default per layer instead, never lowered: headroom for a model whose layers
    do compile per index."""
    import torch._dynamo

    config = torch._dynamo.config
    wanted = GRAPHS_PER_LAYER * layer_count
    config.recompile_limit = max(config.recompile_limit, wanted)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, wanted)

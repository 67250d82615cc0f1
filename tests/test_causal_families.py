"""The causal engines on today's decoder families (`ctgscore.testing.tiny_causal.FAMILIES`):
every family's per-sequence NLL, padded, packed where the engine packs it, and through
PromptedLikelihood (shared prompts and independent forwards), against the plain reference, one
unpadded sequence at a time: `model(input_ids).logits` -> log_softmax -> gather. Within 1e-6
relative in float32. Sliding-window families (and Falcon, BLOOM, GPT-OSS, DeepSeek, Nemotron)
stay off packing, and each fails its parity when forced to pack; the logit scalings of Granite
and Cohere and the output biases of Phi and GPT-J are applied by the output head; a call reads
the device once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctgscore.testing.host_reads import counted_reads
from ctgscore.testing.tiny_causal import FAMILIES, ROPE_SWITCH, WINDOW, tiny_family
from scoring.causal_engine import CausalLikelihood
from scoring.errors import UsageError
from scoring.output_head import OutputHead
from scoring.prompt_cache import PromptedLikelihood
from scoring.ragged import Ragged

LENGTHS = (2, 5, 17, 30, 9, 3, 12, 41, 6)  # most longer than the window (4): a wrong window shows
SLIDING = {"mistral-sliding", "qwen2-sliding", "qwen3-sliding", "gemma2", "gemma3_text", "phi3-sliding", "cohere2", "olmo3",
           "ministral", "exaone4", "mixtral-sliding", "qwen2_moe-sliding", "gpt_oss"}
# a fast head, never packed: attention outside transformers' attention functions (Falcon), value
# heads narrower than query/key heads (DeepSeek's latent attention), decoder layers that drop the
# packed segments' keyword (Nemotron)
HEAD_ONLY = {"falcon", "falcon-alibi", "deepseek_v3", "deepseek_v2", "nemotron"}
EAGER = {"gemma2", "gpt_oss", "bloom"}  # no engine attention function, so nothing reaches packed attention
# layers that hand no window to the attention function (only the mask has it): packing would drop it silently
WINDOW_IN_MASK_ONLY = {"qwen2_moe-sliding"}
SCALED = {"granite": "divisor", "granitemoe": "divisor", "cohere": "multiplier", "cohere2": "multiplier",
          "gemma2": "softcap", "gemma3_text": "softcap"}
TOLERANCE = 1e-6


def reference_nll(model, sequences) -> np.ndarray:
    """-sum_t log p(x_t | x_<t) per sequence, each alone, from the model's own logits."""
    totals = []
    for sequence in sequences:
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([sequence])).logits[0]
        logprobs = torch.log_softmax(logits[:-1].double(), dim=-1)
        totals.append(-logprobs.gather(-1, torch.tensor(sequence[1:])[:, None]).sum().item())
    return np.array(totals)


def reference_continuations(model, prompts, continuations) -> np.ndarray:
    """sum_t log p(c_t | prompt, c_<t) per pair, prompt + continuation in one unpadded forward."""
    totals = []
    for prompt, continuation in zip(prompts, continuations):
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([prompt + continuation])).logits[0]
        logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1].double(), dim=-1)
        totals.append(logprobs.gather(-1, torch.tensor(continuation)[:, None]).sum().item())
    return np.array(totals)


def relative(got, want) -> float:
    """Largest |got - want| / max(|want|, 1 nat): relative, except that a total under one nat (a
    one-token continuation the model is sure of, log p = -0.02) is held to 1e-6 nats, not to
    1e-6 of itself (float32 logits carry ~1e-7 of rounding each, however small the total)."""
    want = np.asarray(want)
    return float(np.max(np.abs(np.asarray(got) - want) / np.maximum(np.abs(want), 1.0)))


def _sequences(vocabulary: int, seed: int = 3) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocabulary, size=n).tolist() for n in LENGTHS]


def _pairs(seed: int = 4):
    """Prompts sharing prefixes (one longer than a prompt of its own), 1 to 11 continuation tokens."""
    rng = np.random.default_rng(seed)
    base = rng.integers(3, 990, size=20).tolist()
    prompts, continuations = [], []
    for prompt in (base[:12], base, base[:3], [7, 8]):
        for n in (1, 4, 11):
            prompts.append(prompt)
            continuations.append(rng.integers(3, 990, size=n).tolist())
    return prompts, continuations


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_scores_as_its_own_forward(name):
    model = tiny_family(name)
    sequences = _sequences(model.config.vocab_size)
    want = reference_nll(model, sequences)
    engine = CausalLikelihood(model, pad_id=0, token_budget=64)
    assert engine.head is not None, f"{name}: the fast head is off"
    padded = engine.sequence_nll(sequences)
    assert [n for _, n in padded] == [n - 1 for n in LENGTHS]
    assert relative([t for t, _ in padded], want) <= TOLERANCE, name
    assert engine.stats["forward_passes"] >= 2
    # a packable family without a sliding window packs, and gives the same numbers
    assert engine.can_pack() == (name not in SLIDING | HEAD_ONLY | EAGER)
    if engine.can_pack():
        engine.packed = True
        packed = engine.sequence_nll(sequences)
        assert relative([t for t, _ in packed], want) <= TOLERANCE, name
    prompts, continuations = _pairs()
    want_pairs = reference_continuations(model, prompts, continuations)
    for share in (True, False):
        prompted = PromptedLikelihood(model, pad_id=0, share_prompts=share, token_budget=64, min_shared_prefix=2)
        assert prompted.head is not None
        got = prompted.continuation_logprobs(Ragged.from_lists(prompts), Ragged.from_lists(continuations))
        assert relative([t for t, _ in got], want_pairs) <= TOLERANCE, (name, share)
        if share:
            assert prompted.stats["prompt_tokens_computed"] < prompted.stats["prompt_tokens_requested"]


@pytest.mark.parametrize("name", sorted(SLIDING - EAGER))
def test_sliding_window_families_are_kept_off_packing(name):
    """The window matters in these tiny models (the same weights without it score otherwise),
    packed attention ignores windows, so the engine refuses to pack them; a layer that still
    reached packed attention with a window would be refused there too, except where the layer
    hands the window to its mask only (Qwen2-MoE): packed, its scores would be wrong, so the
    engine's own check is what keeps it off."""
    sliding = tiny_family(name)
    assert sliding.config.sliding_window == WINDOW
    sequences = _sequences(sliding.config.vocab_size)[2:4]
    unwindowed = tiny_family(name.replace("-sliding", "")) if name.endswith("-sliding") else None
    if unwindowed is not None:  # same seed, same parameter shapes: the same weights, no window
        assert relative(reference_nll(unwindowed, sequences), reference_nll(sliding, sequences)) > 1e-3
    engine = CausalLikelihood(sliding, pad_id=0)
    assert engine.attention_enabled and engine.head is not None and not engine.can_pack()
    engine.packed = True
    with pytest.raises(ValueError, match="packed sequences are not supported"):
        engine.sequence_nll(sequences)
    engine.can_pack = lambda: True  # past the engine's own check: the attention function refuses
    if name in WINDOW_IN_MASK_ONLY:
        packed = engine.sequence_nll(sequences)
        assert relative([t for t, _ in packed], reference_nll(sliding, sequences)) > 1e-3
        return
    with pytest.raises(ValueError, match="packed attention cannot run .* with sliding_window"):
        engine.sequence_nll(sequences)


def test_a_window_read_per_layer_type_only_where_the_family_does():
    """Qwen2-MoE's config writes sliding_window = 0 for "no window" and its layers take a window
    only where `layer_types` says so: it packs. The same 0 in a family that reads
    `sliding_window` itself (Mixtral) keeps packing off."""
    qwen = tiny_family("qwen2_moe")
    assert qwen.config.sliding_window == 0 and "sliding_attention" not in qwen.config.layer_types
    assert CausalLikelihood(qwen, pad_id=0).can_pack()
    mixtral = tiny_family("mixtral")
    mixtral.config.sliding_window = 0
    assert not CausalLikelihood(mixtral, pad_id=0).can_pack()


@pytest.mark.parametrize("name", sorted(HEAD_ONLY | EAGER))
def test_families_outside_packing_would_fail_their_parity_packed(name):
    """A wrong entry in PACKABLE_ARCHITECTURES would be caught: forced past the engine's check,
    these families' packed scores raise or are far from their own forward (Falcon's and the
    eager families' attention never sees the packed segments; DeepSeek's value heads do not fit
    packed attention; Nemotron's layers drop the segments, which its attention refuses)."""
    model = tiny_family(name)
    sequences = _sequences(model.config.vocab_size)[2:5]
    engine = CausalLikelihood(model, pad_id=0)
    assert engine.head is not None and not engine.can_pack()
    engine.packed, engine.can_pack = True, lambda: True
    try:
        packed = engine.sequence_nll(sequences)
    except (RuntimeError, ValueError):
        return
    assert relative([t for t, _ in packed], reference_nll(model, sequences)) > 1e-3


@pytest.mark.parametrize("name", sorted(SCALED))
def test_the_family_logit_transform_is_what_makes_the_scores_match(name):
    """Without its transform (Granite's divisor, Cohere's multiplier, Gemma's soft cap) the
    head's scores are far from the model's: the parity above really exercises it."""
    model = tiny_family(name)
    sequences = _sequences(model.config.vocab_size)[:4]
    want = reference_nll(model, sequences)
    engine = CausalLikelihood(model, pad_id=0)
    assert getattr(engine.head, SCALED[name]) is not None
    setattr(engine.head, SCALED[name], None)
    assert relative([t for t, _ in engine.sequence_nll(sequences)], want) > 1e-2


def test_a_layer_that_drops_the_packed_segments_is_refused_in_attention():
    """Nemotron's decoder layers do not hand their keyword arguments on to attention: forced to
    pack, its attention would get the placeholder mask without the segments and attend across
    the whole row. The attention function knows the placeholder and refuses instead."""
    model = tiny_family("nemotron")
    engine = CausalLikelihood(model, pad_id=0)
    assert engine.attention_enabled and engine.head is not None and not engine.can_pack()
    engine.packed, engine.can_pack = True, lambda: True
    with pytest.raises(ValueError, match="NemotronAttention: its layer drops the packed segments"):
        engine.sequence_nll(_sequences(model.config.vocab_size)[2:5])


@pytest.mark.parametrize("name", ["phi", "gptj", "phimoe"])
def test_the_output_bias_is_added(name):
    """The lm_head of Phi, GPT-J and Phi-3.5-MoE has a bias (drawn large in the tiny models):
    the head adds it, and without it the scores are far from the model's."""
    model = tiny_family(name)
    sequences = _sequences(model.config.vocab_size)[:4]
    engine = CausalLikelihood(model, pad_id=0)
    assert engine.head.bias() is not None
    engine.head.bias = lambda: None
    assert relative([t for t, _ in engine.sequence_nll(sequences)], reference_nll(model, sequences)) > 1e-2


def test_a_transform_is_read_only_from_the_family_that_applies_it():
    """A Llama config carrying Cohere's, Granite's and Gemma's attributes (configs keep unknown
    keys): Llama's forward ignores them, and so does the head."""
    model = tiny_family("llama")
    model.config.logit_scale, model.config.logits_scaling, model.config.final_logit_softcapping = 0.25, 4.0, 3.0
    head = OutputHead.for_causal_model(model)
    assert (head.softcap, head.multiplier, head.divisor) == (None, None, None)
    sequences = _sequences(model.config.vocab_size)[:4]
    got = CausalLikelihood(model, pad_id=0).sequence_nll(sequences)
    assert relative([t for t, _ in got], reference_nll(model, sequences)) <= TOLERANCE


@pytest.mark.parametrize(("name", "attribute", "value"), [
    ("cohere", "logit_scale", None), ("cohere", "logit_scale", float("nan")), ("granite", "logits_scaling", 0.0),
    ("gemma3_text", "final_logit_softcapping", -1.0),
])
def test_a_transform_value_that_is_not_a_positive_number_leaves_the_head_off(name, attribute, value):
    model = tiny_family(name)
    setattr(model.config, attribute, value)
    assert OutputHead.for_causal_model(model) is None
    assert not CausalLikelihood(model, pad_id=0).can_pack()


def test_a_family_not_checked_here_uses_the_model_forward():
    """A family outside the table (Cohere's transform is not Llama's) gets no fast head."""
    model = tiny_family("cohere")
    model.config.model_type = "cohere_unknown"
    assert OutputHead.for_causal_model(model) is None
    assert set(FAMILIES[name][0] for name in FAMILIES) <= set(OutputHead.CAUSAL_LOGITS)


def test_every_listed_family_has_a_parity_test_here():
    """A model type joins the fast head or packing only with a tiny model in `FAMILIES` (so the
    parity test above runs on it); GPT-2 is checked in tests/test_output_head.py and
    tests/test_packed_attention.py instead."""
    tested = {model_type for model_type, _ in FAMILIES.values()} | {"gpt2"}
    assert set(OutputHead.CAUSAL_LOGITS) <= tested
    assert set(CausalLikelihood.PACKABLE_ARCHITECTURES) <= tested
    packed_here = {FAMILIES[name][0] for name in FAMILIES if name not in SLIDING | HEAD_ONLY | EAGER}
    assert set(CausalLikelihood.PACKABLE_ARCHITECTURES) <= packed_here | {"gpt2"}


def test_a_decoder_attending_both_ways_is_refused():
    model = tiny_family("gemma3_text")
    model.config.use_bidirectional_attention = True
    assert OutputHead.for_causal_model(model) is None
    for engine in (CausalLikelihood, PromptedLikelihood):
        with pytest.raises(UsageError, match="attend both ways"):
            engine(model, pad_id=0)


@pytest.mark.parametrize(("name", "packed"), [("qwen3", True), ("granite", True), ("cohere", False), ("gemma3_text", False),
                                              ("phi3", True), ("phi", True)])
def test_new_families_read_the_device_once_per_call(name, packed):
    model = tiny_family(name)
    engine = CausalLikelihood(model, pad_id=0, token_budget=48)
    engine.packed, engine.on_cuda = packed, True  # collect once at the end, as on CUDA
    ragged = Ragged.from_lists(_sequences(model.config.vocab_size, seed=5))
    with torch.inference_mode(), counted_reads() as seen:
        got = engine.ragged_nll(ragged)
    assert engine.stats["forward_passes"] >= 2
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen
    engine.on_cuda = False
    assert [t for t, _ in got] == pytest.approx([t for t, _ in engine.ragged_nll(ragged)], rel=TOLERANCE)


def test_longrope_never_batches_sequences_across_its_switch():
    """LongRoPE switches to its long factors when a forward's longest position passes
    `original_max_position_embeddings` (16 here): a short sequence batched or packed with a long
    one would take them too. With budgets that put every sequence in one batch, padded, packed
    and prompted scores still equal each sequence's own forward; without the split they do not."""
    model = tiny_family("phi3-longrope")
    sequences = _sequences(model.config.vocab_size)
    want = reference_nll(model, sequences)
    engine = CausalLikelihood(model, pad_id=0, token_budget=4096)
    assert engine.rope_switch == ROPE_SWITCH and engine.can_pack()
    for packed in (False, True):
        engine.packed = packed
        engine.stats.clear()
        assert relative([t for t, _ in engine.sequence_nll(sequences)], want) <= TOLERANCE, packed
        assert engine.stats["forward_passes"] == 2  # the sequences past 16 tokens, then the others
    engine.rope_switch = None  # one batch for all: the short ones take the long factors
    assert relative([t for t, _ in engine.sequence_nll(sequences)], want) > 1e-3
    prompts, continuations = _pairs()
    assert {len(p) + len(c) > ROPE_SWITCH for p, c in zip(prompts, continuations)} == {True, False}
    want_pairs = reference_continuations(model, prompts, continuations)
    for share in (True, False):
        prompted = PromptedLikelihood(model, pad_id=0, share_prompts=share, token_budget=4096, min_shared_prefix=2)
        got = prompted.continuation_logprobs(Ragged.from_lists(prompts), Ragged.from_lists(continuations))
        assert relative([t for t, _ in got], want_pairs) <= TOLERANCE, share
        if share:  # the pairs within 16 tokens still share their prompts
            assert prompted.stats["prompt_tokens_computed"] < prompted.stats["prompt_tokens_requested"]
    prompted.rope_switch = None
    got = prompted.continuation_logprobs(Ragged.from_lists(prompts), Ragged.from_lists(continuations))
    assert relative([t for t, _ in got], want_pairs) > 1e-3


@pytest.mark.parametrize(("parameters", "switch"), [
    ({"rope_type": "default", "rope_theta": 1e4}, None),
    ({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}, None),
    ({"rope_type": "longrope", "original_max_position_embeddings": 4096}, 4096),
    ({"rope_type": "dynamic", "factor": 2.0}, 256),  # the position table: it rescales past it
    ({"full_attention": {"rope_type": "longrope", "original_max_position_embeddings": 64},
      "sliding_attention": {"rope_type": "default"}}, 64),
])
def test_the_rope_switch_is_read_from_the_rotary_parameters(parameters, switch):
    from types import SimpleNamespace

    from scoring.engine_setup import rope_switch_length

    assert rope_switch_length(SimpleNamespace(rope_parameters=parameters, max_position_embeddings=256)) == switch


def test_sequences_split_at_the_switch_keep_their_order():
    from scoring.engine_setup import split_at_rope_switch

    lengths, order = [40, 2, 300, 64, 65], [2, 4, 3, 0, 1]
    assert split_at_rope_switch(order, lengths, 64) == [[2, 4], [3, 0, 1]]  # longer than 64, then the others
    assert split_at_rope_switch(order, lengths, None) == [order] == split_at_rope_switch(order, lengths, 1000)

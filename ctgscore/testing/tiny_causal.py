"""Tiny random causal LMs built in memory (no tokenizer, nothing saved) for the engine's parity
tests: a Llama, a Gemma-2 (logits soft-capped by `final_logit_softcapping`), and one model per
decoder family people score with (`tiny_family`), with sliding windows shorter than the test
sequences, the logit scalings of Granite and Cohere set away from 1 and Phi's output bias drawn
large (GPT-J's and Phi-3.5-MoE's too). Random weights: their scores mean nothing."""

from __future__ import annotations

VOCABULARY = 1003  # not a multiple of 64, so the padded output layout really pads
WINDOW = 4  # sliding windows of the tiny families: shorter than most test sequences
ROPE_SWITCH = 16  # the tiny LongRoPE model's original_max_position_embeddings
MATRIX_STD = 0.15
HEAD_STD = 0.3

_COMMON = dict(vocab_size=VOCABULARY, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=8, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
               tie_word_embeddings=False)
_ALTERNATING = ["sliding_attention", "full_attention"]
_UNSET = object()  # a `_COMMON` keyword a family's config does not take (Falcon derives head_dim)
# name -> (model type, config keywords on top of `_COMMON`)
FAMILIES: dict[str, tuple[str, dict]] = {
    "llama": ("llama", {}),
    "mistral": ("mistral", {"sliding_window": None}),
    "mistral-sliding": ("mistral", {"sliding_window": WINDOW}),
    "qwen2": ("qwen2", {}),
    "qwen2-sliding": ("qwen2", {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1}),
    "qwen3": ("qwen3", {}),
    "qwen3-sliding": ("qwen3", {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1}),
    "qwen3_moe": ("qwen3_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16}),
    "gemma": ("gemma", {}),
    "gemma2": ("gemma2", {"sliding_window": WINDOW, "final_logit_softcapping": 3.0, "attn_logit_softcapping": 50.0,
                          "query_pre_attn_scalar": 8}),
    "gemma3_text": ("gemma3_text", {"sliding_window": WINDOW, "layer_types": _ALTERNATING, "final_logit_softcapping": 3.0,
                                    "query_pre_attn_scalar": 8, "tie_word_embeddings": True}),
    "phi3": ("phi3", {"sliding_window": None}),
    "phi3-sliding": ("phi3", {"sliding_window": WINDOW}),
    # LongRoPE (Phi-3 128k, Phi-3.5): long factors once a forward's longest position passes 16
    "phi3-longrope": ("phi3", {"sliding_window": None, "original_max_position_embeddings": ROPE_SWITCH, "rope_parameters": {
        "rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 4, "long_factor": [4.0, 8.0, 16.0, 32.0],
        "original_max_position_embeddings": ROPE_SWITCH}}),
    "olmo2": ("olmo2", {}),
    "granite": ("granite", {"logits_scaling": 4.0, "embedding_multiplier": 3.0, "residual_multiplier": 0.5,
                            "attention_multiplier": 0.25}),
    "cohere": ("cohere", {"logit_scale": 0.25, "tie_word_embeddings": True}),
    "cohere2": ("cohere2", {"logit_scale": 0.25, "sliding_window": WINDOW, "layer_types": _ALTERNATING,
                            "tie_word_embeddings": True}),
    "smollm3": ("smollm3", {"no_rope_layers": [1, 0]}),
    "olmo3": ("olmo3", {"sliding_window": WINDOW, "layer_types": _ALTERNATING}),
    "ministral": ("ministral", {"sliding_window": WINDOW, "layer_types": _ALTERNATING}),
    "starcoder2": ("starcoder2", {"sliding_window": None, "tie_word_embeddings": True}),
    "glm4": ("glm4", {}),
    "exaone4": ("exaone4", {"sliding_window": WINDOW, "sliding_window_pattern": 2}),
    # mixtures of experts: top-k routing per token, no capacity (nothing depends on other tokens)
    "mixtral": ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None}),
    "mixtral-sliding": ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": WINDOW}),
    "qwen2_moe": ("qwen2_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                                "shared_expert_intermediate_size": 32}),
    "qwen2_moe-sliding": ("qwen2_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                                        "shared_expert_intermediate_size": 32, "use_sliding_window": True,
                                        "sliding_window": WINDOW, "max_window_layers": 1}),
    "olmoe": ("olmoe", {"num_experts": 4, "num_experts_per_tok": 2}),
    "granitemoe": ("granitemoe", {"num_local_experts": 4, "num_experts_per_tok": 2, "logits_scaling": 4.0,
                                  "embedding_multiplier": 3.0, "residual_multiplier": 0.5, "attention_multiplier": 0.25}),
    # MLA with value heads narrower than query/key heads; group-limited routing, a dense first layer
    "deepseek_v3": ("deepseek_v3", {"num_key_value_heads": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2,
                                    "topk_group": 1, "moe_intermediate_size": 16, "first_k_dense_replace": 1,
                                    "n_shared_experts": 1, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
                                    "qk_nope_head_dim": 8, "v_head_dim": 4}),
    "glm4_moe": ("glm4_moe", {"n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
                              "moe_intermediate_size": 16, "first_k_dense_replace": 1, "n_shared_experts": 1,
                              "partial_rotary_factor": 0.5, "use_qk_norm": True}),
    # attention sinks and alternating sliding layers (eager attention: transformers has no SDPA for sinks)
    "gpt_oss": ("gpt_oss", {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": WINDOW,
                            "layer_types": _ALTERNATING, "rope_parameters": {  # YaRN as published, scaled to 256 positions
                                "rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                "original_max_position_embeddings": 32, "rope_theta": 150000.0}}),
    # Pythia (partial rotary, parallel residual); OPT-350m's projection out of the decoder width;
    # Phi-2 (partial rotary, a bias on lm_head); Falcon (rotary, and the ALiBi variant)
    "gpt_neox": ("gpt_neox", {"rotary_pct": 0.25, "use_parallel_residual": True}),
    "opt": ("opt", {"word_embed_proj_dim": 16, "ffn_dim": 64}),
    "phi": ("phi", {"partial_rotary_factor": 0.5}),
    "falcon": ("falcon", {"head_dim": _UNSET, "new_decoder_architecture": True, "num_kv_heads": 2, "alibi": False}),
    "falcon-alibi": ("falcon", {"head_dim": _UNSET, "alibi": True, "multi_query": True, "parallel_attn": True}),
    # GPT-J (partial rotary, a bias on lm_head); StarCoder 1 / SantaCoder (multi-query, learned
    # positions); Phi-3.5-MoE (sparsemixer routing, lm_head bias); BLOOM (ALiBi, eager attention only)
    "gptj": ("gptj", {"head_dim": _UNSET, "rotary_dim": 4}),
    "gpt_bigcode": ("gpt_bigcode", {"head_dim": _UNSET, "multi_query": True}),
    "phimoe": ("phimoe", {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None, "lm_head_bias": True}),
    "ernie4_5_moe": ("ernie4_5_moe", {"moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 16,
                                      "moe_num_shared_experts": 1}),
    "deepseek_v2": ("deepseek_v2", {"num_key_value_heads": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
                                    "moe_intermediate_size": 16, "first_k_dense_replace": 1, "n_shared_experts": 1,
                                    "q_lora_rank": None, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
                                    "v_head_dim": 4}),
    "nemotron": ("nemotron", {}),
    "bloom": ("bloom", {"head_dim": _UNSET}),
    "seed_oss": ("seed_oss", {}),
    "ernie4_5": ("ernie4_5", {}),
    "apertus": ("apertus", {}),
    "hunyuan_v1_dense": ("hunyuan_v1_dense", {}),
}
# eager attention where transformers has no SDPA for the family (Gemma 2: attention soft-capping;
# GPT-OSS: attention sinks; BLOOM: ALiBi)
_EAGER = ("gemma2", "gpt_oss", "bloom")


def tiny_family(name: str, seed: int = 0):
    """A 2-layer random model of family `name` (`FAMILIES`) in float32, eval mode. Matrices are
    drawn with std 0.15 and the output layer (the embedding, where tied) with std 0.3, so
    attention is far from uniform and the logits far from flat: a wrong window, position or
    scale changes the scores well beyond rounding."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, extra = FAMILIES[name]
    config = AutoConfig.for_model(model_type, **{k: v for k, v in {**_COMMON, **extra}.items() if v is not _UNSET})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager" if model_type in _EAGER else "sdpa")
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2:
                parameter.normal_(0.0, MATRIX_STD)
        model.get_output_embeddings().weight.normal_(0.0, HEAD_STD)
        if getattr(model.get_output_embeddings(), "bias", None) is not None:  # Phi's, GPT-J's: large enough to matter
            model.get_output_embeddings().bias.normal_(0.0, 1.0)
    return model.eval()


def tiny_llama(seed: int = 0, vocab_size: int = VOCABULARY):
    """A 2-layer Llama (grouped-query attention, rotary positions, SwiGLU) in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config).eval()


def tiny_gemma2(seed: int = 0, vocab_size: int = VOCABULARY, softcap: float = 3.0):
    """A 2-layer Gemma-2 whose final logits are soft-capped at `softcap`, in eval mode; its
    output layer is drawn with unit variance, so logits reach the cap and it changes the scores."""
    import torch
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(seed)
    config = Gemma2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                          final_logit_softcapping=softcap, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                          tie_word_embeddings=False, attn_implementation="eager")
    model = Gemma2ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 1.0)
    return model

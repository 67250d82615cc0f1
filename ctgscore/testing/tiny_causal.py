"""Tiny random causal LMs of the Llama family built in memory (no tokenizer, nothing saved): a
Llama and a Gemma-2 (logits soft-capped by `final_logit_softcapping`) for the engine's parity
tests. Random weights: their scores mean nothing."""

from __future__ import annotations

VOCABULARY = 1003  # not a multiple of 64, so the padded output layout really pads


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

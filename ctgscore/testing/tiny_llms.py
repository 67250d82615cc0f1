"""Tiny random decoder LLMs of the families people score with (Llama, Qwen2, Mistral, Gemma 2,
GPT-2) and a tiny T5, for tests and benchmarks of the prompted likelihood metric (never
meaningful scores).

The decoder families share one byte-level BPE tokenizer trained on the tiny corpus
(`<s>` BOS, `</s>` EOS, no pad token, a small chat template), so one trained vocabulary serves
every family; T5 gets a sentencepiece unigram vocabulary laid out as T5's (pad 0, eos 1, unk 2)
with `model_max_length` 512, T5 having relative positions and no position table.
"""

from __future__ import annotations

import pathlib
import tempfile

from ctgscore.testing.tiny_models import (
    TINY_SIZES,
    _save,
    _spread_weights,
    _train_sentencepiece,
    _weight_std,
    corpus_lines,
)

FAMILIES = ("llama", "qwen2", "mistral", "gemma2", "gpt2")
# a chat template in the usual shape: a user turn, then the assistant turn the model continues
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_llm_tokenizer(out_dir: pathlib.Path, bos: bool = True):
    """Byte-level BPE tokenizer of 1,000 ids shared by the decoder families: BOS `<s>` (unless
    `bos` is False, as for Qwen2), EOS `</s>`, no pad token, `CHAT_TEMPLATE`."""
    from transformers import PreTrainedTokenizerFast

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        work_dir = pathlib.Path(work)
        from tokenizers import ByteLevelBPETokenizer

        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(corpus_lines(), vocab_size=1000, min_frequency=2, special_tokens=["<s>", "</s>", "<unk>"],
                                show_progress=False)
        bpe.save(str(work_dir / "tokenizer.json"))
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(work_dir / "tokenizer.json"), bos_token="<s>" if bos else None,
                                            eos_token="</s>", unk_token="<unk>", model_max_length=512)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _decoder_config(family: str, tokenizer, sizes: dict, positions: int):
    from transformers import Gemma2Config, GPT2Config, LlamaConfig, MistralConfig, Qwen2Config

    common = dict(vocab_size=len(tokenizer), hidden_size=sizes["d_model"], num_hidden_layers=sizes["layers"],
                  num_attention_heads=sizes["heads"], intermediate_size=sizes["ffn"], max_position_embeddings=positions,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=None,
                  tie_word_embeddings=False)
    kv_heads = max(1, sizes["heads"] // 2)  # grouped-query attention: two query heads per key/value head
    if family == "llama":
        return LlamaConfig(num_key_value_heads=kv_heads, **common)
    if family == "qwen2":
        return Qwen2Config(num_key_value_heads=kv_heads, **common)
    if family == "mistral":  # a short sliding window, so test prompts run past it
        return MistralConfig(num_key_value_heads=kv_heads, sliding_window=16, **common)
    if family == "gemma2":  # logits soft-capped (tanh), alternating sliding-window layers
        return Gemma2Config(num_key_value_heads=kv_heads, head_dim=sizes["d_model"] // sizes["heads"], sliding_window=16,
                            final_logit_softcapping=3.0, attn_logit_softcapping=50.0, query_pre_attn_scalar=16, **common)
    if family == "gpt2":
        return GPT2Config(vocab_size=len(tokenizer), n_embd=sizes["d_model"], n_layer=sizes["layers"], n_head=sizes["heads"],
                          n_inner=sizes["ffn"], n_positions=positions, bos_token_id=tokenizer.bos_token_id,
                          eos_token_id=tokenizer.eos_token_id)
    raise ValueError(f"unknown family {family!r}; choose from {list(FAMILIES)}")


def build_decoder(family: str, out_dir: pathlib.Path, seed: int = 0, sizes: dict | None = None, positions: int = 512,
                  tokenizer=None) -> pathlib.Path:
    """A seeded random causal LM of `family` with `positions` positions, saved with the shared
    tokenizer (built when not given)."""
    import torch
    from transformers import AutoModelForCausalLM

    sizes = sizes or TINY_SIZES
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if tokenizer is None:
        tokenizer = build_llm_tokenizer(out_dir / ".tokenizer", bos=family != "qwen2")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_decoder_config(family, tokenizer, sizes, positions), attn_implementation="sdpa"
                                             if family != "gemma2" else "eager")
    _spread_weights(model, _weight_std(sizes) if sizes is TINY_SIZES else 0.02, seed)
    return _save(model, tokenizer, out_dir)


def build_t5(out_dir: pathlib.Path, seed: int = 0, sizes: dict | None = None) -> pathlib.Path:
    """A seeded random T5 (FLAN-T5's architecture: gated-GELU, untied head) with a sentencepiece
    vocabulary; relative positions, so its length limit is the tokenizer's 512."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    sizes = sizes or TINY_SIZES
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        work_dir = pathlib.Path(work)
        _train_sentencepiece(work_dir, corpus_lines(), vocab_size=800)
        tokenizer = T5Tokenizer(vocab_file=str(work_dir / "spiece.model"), extra_ids=0, model_max_length=512)
    torch.manual_seed(seed)
    config = T5Config(vocab_size=len(tokenizer), d_model=sizes["d_model"], d_kv=sizes["d_model"] // sizes["heads"],
                      d_ff=sizes["ffn"], num_layers=sizes["layers"], num_heads=sizes["heads"], feed_forward_proj="gated-gelu",
                      tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    model = T5ForConditionalGeneration(config)
    _spread_weights(model, _weight_std(sizes), seed)
    return _save(model, tokenizer, out_dir)

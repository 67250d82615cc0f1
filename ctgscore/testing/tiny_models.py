"""Tiny, deterministic models for tests, the demo and benchmarks (never meaningful scores).

`build_tiny_models(cache_dir)` trains a sentencepiece PEGASUS tokenizer and a byte-level BPE
tokenizer (BART, GPT-2) on `scoring/resources/tiny_corpus.txt`, builds small seeded models and saves
everything with `save_pretrained` (safetensors), plus an IWF table for the tiny PEGASUS
vocabulary computed with the CTRLEval formula. Weights are drawn with a large std so that
per-token log-probabilities differ by nats: with the default tiny init every token scores
about -ln(vocab) and a parity test could not tell a correct scorer from a shifted one.

The weights are the same bytes on every machine: every matrix is drawn from a seeded integer
generator and turned into floats by exact integer arithmetic and one rounding (`_draw`), never
by torch's `normal_`, whose CPU kernel differs with the instruction set (AVX2, AVX-512 or
neither give different last bits, and so a different model digest in every signature).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import tempfile

from scoring.resources import RESOURCES

TINY_CORPUS = RESOURCES / "tiny_corpus.txt"
TINY_VERSION = "3"  # 3: weights from an integer generator, the same bytes on every CPU
WEIGHT_STD = 0.3

TINY_SIZES = {"d_model": 64, "layers": 2, "heads": 4, "ffn": 128}
BART_BASE_SIZES = {"d_model": 768, "layers": 6, "heads": 12, "ffn": 3072}


def corpus_lines() -> list[str]:
    """The tiny corpus's lines (UTF-8 in any locale: its IWF table, and so the demo's scores, are
    the same everywhere)."""
    return [line for line in TINY_CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def _train_sentencepiece(out_dir: pathlib.Path, lines: list[str], vocab_size: int) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(out_dir / "spiece"),
        vocab_size=vocab_size,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        seed_sentencepiece_size=100000,
        minloglevel=2,
    )


def _train_byte_bpe(out_dir: pathlib.Path, lines: list[str], vocab_size: int, specials: list[str]) -> None:
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines, vocab_size=vocab_size, min_frequency=2, special_tokens=specials, show_progress=False)
    bpe.save_model(str(out_dir))


def _draw(rng, shape, std: float):
    """A float32 array of `shape` with mean 0 and standard deviation `std`, the same bytes on
    every machine: each value is the centred sum of 4 uniform 16-bit integers (a bell-shaped
    Irwin-Hall draw, variance 4 (2^32 - 1) / 12), exact in float64, times one scale (one
    rounding), cast to float32 (one more). No transcendental function or vector kernel is
    involved, only integer generation and IEEE-rounded arithmetic."""
    import math

    import numpy as np

    count = int(np.prod(shape))
    total = np.zeros(count, dtype=np.int64)
    for _ in range(4):
        total += rng.integers(0, 1 << 16, size=count, dtype=np.uint16)
    scale = std / math.sqrt(4 * ((1 << 32) - 1) / 12)
    return ((total - 2 * ((1 << 16) - 1)).astype(np.float64) * scale).astype(np.float32).reshape(shape)


def _spread_weights(model, std: float, seed: int) -> None:
    """Redraw every matrix with a large std (biases and norms keep their constant init) so the
    output distribution is far from uniform; machine-independent (`_draw`), in parameter order."""
    import numpy as np
    import torch

    rng = np.random.Generator(np.random.PCG64(seed))
    with torch.no_grad():
        for _name, parameter in model.named_parameters():
            if parameter.dim() >= 2:
                parameter.copy_(torch.from_numpy(_draw(rng, tuple(parameter.shape), std)))


def _seq2seq_dims(sizes: dict) -> dict:
    """Encoder-decoder config sizes (same depth and width on both sides)."""
    return {
        "d_model": sizes["d_model"],
        "encoder_layers": sizes["layers"],
        "decoder_layers": sizes["layers"],
        "encoder_attention_heads": sizes["heads"],
        "decoder_attention_heads": sizes["heads"],
        "encoder_ffn_dim": sizes["ffn"],
        "decoder_ffn_dim": sizes["ffn"],
        "max_position_embeddings": 1024,
    }


def _weight_std(sizes: dict) -> float:
    """Tiny models get spread-out weights; larger (benchmark) models a conventional init."""
    return WEIGHT_STD if sizes is TINY_SIZES else 0.02


def _build_seq2seq(config_class, model_class, tokenizer, out_dir: pathlib.Path, seed: int, sizes: dict,
                   vocab_size: int | None, **special_token_ids) -> pathlib.Path:
    """Seeded random encoder-decoder of `sizes` with spread-out weights, saved with its tokenizer."""
    import torch

    torch.manual_seed(seed)
    config = config_class(vocab_size=vocab_size or len(tokenizer), **_seq2seq_dims(sizes), **special_token_ids)
    model = model_class(config)
    _spread_weights(model, _weight_std(sizes), seed)
    return _save(model, tokenizer, out_dir)


def _save(model, tokenizer, out_dir: pathlib.Path) -> pathlib.Path:
    model.eval()
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


def build_pegasus(out_dir: pathlib.Path, seed: int = 0, sizes: dict | None = None, vocab_size: int | None = None) -> pathlib.Path:
    from transformers import PegasusConfig, PegasusForConditionalGeneration, PegasusTokenizer

    sizes = sizes or TINY_SIZES
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        work_dir = pathlib.Path(work)
        _train_sentencepiece(work_dir, corpus_lines(), vocab_size=800)
        tokenizer = PegasusTokenizer.from_pretrained(str(work_dir))
    return _build_seq2seq(PegasusConfig, PegasusForConditionalGeneration, tokenizer, out_dir, seed, sizes, vocab_size,
                          pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1)


def build_bart(out_dir: pathlib.Path, seed: int = 0, sizes: dict | None = None, vocab_size: int | None = None) -> pathlib.Path:
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizer

    sizes = sizes or TINY_SIZES
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        work_dir = pathlib.Path(work)
        _train_byte_bpe(work_dir, corpus_lines(), 1000, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        tokenizer = BartTokenizer.from_pretrained(str(work_dir))
    return _build_seq2seq(BartConfig, BartForConditionalGeneration, tokenizer, out_dir, seed, sizes, vocab_size,
                          bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
                          forced_bos_token_id=0, forced_eos_token_id=2)


def build_gpt2(out_dir: pathlib.Path, seed: int = 0, sizes: dict | None = None) -> pathlib.Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    sizes = sizes or TINY_SIZES
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        work_dir = pathlib.Path(work)
        _train_byte_bpe(work_dir, corpus_lines(), 1000, ["<|endoftext|>"])
        tokenizer = GPT2Tokenizer.from_pretrained(str(work_dir))
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=sizes["d_model"],
        n_layer=sizes["layers"],
        n_head=sizes["heads"],
        n_inner=sizes["ffn"],
        n_positions=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    _spread_weights(model, _weight_std(sizes), seed)
    return _save(model, tokenizer, out_dir)


def build_roberta(out_dir: pathlib.Path, seed: int = 0, sizes: dict | None = None) -> pathlib.Path:
    """Seeded random RoBERTa encoder (BERTScore's default family) with a byte-level BPE
    tokenizer trained on the tiny corpus; not part of `build_tiny_models`."""
    import torch
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer

    sizes = sizes or TINY_SIZES
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        work_dir = pathlib.Path(work)
        _train_byte_bpe(work_dir, corpus_lines(), 1000, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        tokenizer = RobertaTokenizer.from_pretrained(str(work_dir), model_max_length=512)
    torch.manual_seed(seed)
    config = RobertaConfig(
        vocab_size=len(tokenizer), hidden_size=sizes["d_model"], num_hidden_layers=sizes["layers"],
        num_attention_heads=sizes["heads"], intermediate_size=sizes["ffn"], max_position_embeddings=514,
        bos_token_id=0, pad_token_id=1, eos_token_id=2,
    )
    model = RobertaModel(config, add_pooling_layer=False)
    _spread_weights(model, _weight_std(sizes), seed)
    return _save(model, tokenizer, out_dir)


def build_tiny_models(cache_dir: str | pathlib.Path, force: bool = False) -> dict[str, str]:
    """Build (or reuse) the tiny PEGASUS, BART and GPT-2 and the tiny IWF table under
    `cache_dir`; returns their paths. Reuse is keyed by TINY_VERSION in `tiny.json`."""
    from transformers import AutoTokenizer

    from scoring.iwf import compute_iwf, save_iwf

    cache_dir = pathlib.Path(cache_dir)
    paths = {
        "pegasus": str(cache_dir / "tiny-pegasus"),
        "bart": str(cache_dir / "tiny-bart"),
        "gpt2": str(cache_dir / "tiny-gpt2"),
        "iwf": str(cache_dir / "tiny-pegasus-iwf.txt"),
    }
    stamp = cache_dir / "tiny.json"
    if not force and stamp.exists() and json.loads(stamp.read_text(encoding="utf-8")).get("version") == TINY_VERSION:
        return paths
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".tiny-", dir=cache_dir.parent if cache_dir.parent.exists() else None))
    try:
        build_pegasus(staging / "tiny-pegasus", seed=1)
        build_bart(staging / "tiny-bart", seed=2)
        build_gpt2(staging / "tiny-gpt2", seed=3)
        tokenizer = AutoTokenizer.from_pretrained(str(staging / "tiny-pegasus"))
        save_iwf(compute_iwf(tokenizer, corpus_lines()), staging / "tiny-pegasus-iwf.txt")
        (staging / "tiny.json").write_text(json.dumps({"version": TINY_VERSION, **paths}, indent=2), encoding="utf-8")
        cache_dir.mkdir(parents=True, exist_ok=True)
        for name in ("tiny-pegasus", "tiny-bart", "tiny-gpt2", "tiny-pegasus-iwf.txt", "tiny.json"):
            target = cache_dir / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            shutil.move(str(staging / name), str(target))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return paths

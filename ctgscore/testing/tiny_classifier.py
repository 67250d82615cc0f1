"""Tiny sequence classifiers built from config, for tests, benchmarks and demos (no hub).

A WordPiece vocabulary is written from a few KB of text (deterministically: the same files on
every build); the model is a
2-layer BERT (or RoBERTa) with the given label names, saved as safetensors. `bias` fixes the
classification head: zero weights plus that bias make the logits constant, so the predicted
label is known in advance.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

CORPUS = (
    "the quick brown fox jumps over the lazy dog while a happy child plays with a ball in the park "
    "sad news about the economy made people angry and afraid of what comes next in the market "
    "music film video games sports travel food fashion science technology family friends school "
    "she wrote a short story about love and loss and the joy of a sunny morning at the beach "
    "toxic rude words are not welcome here please keep the discussion calm kind and respectful "
)


SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def write_wordpiece_vocab(directory: pathlib.Path) -> None:
    """`vocab.txt` for a lower-casing BERT tokenizer: the special tokens, every character of
    CORPUS alone and as a continuation (`##c`), then every word of CORPUS, sorted. Written
    directly rather than trained: a trainer breaks ties differently from run to run, and a
    different vocabulary would mean a different random model."""
    characters = sorted(set(CORPUS.replace(" ", "")))
    words = sorted(set(CORPUS.split()) - set(characters))
    tokens = [*SPECIAL_TOKENS, *characters, *[f"##{c}" for c in characters], *words]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


def build_tiny_classifier(
    directory: str | pathlib.Path,
    labels: Sequence[str],
    bias: Sequence[float] | None = None,
    multi_label: bool = False,
    arch: str = "bert",
    seed: int = 0,
    max_positions: int = 512,
    init_range: float = 0.02,
) -> pathlib.Path:
    """Save a tiny `arch` classifier with `labels` as id2label into `directory`; a larger
    `init_range` makes the (random) logits vary more between inputs."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertTokenizerFast,
        RobertaConfig,
        RobertaForSequenceClassification,
    )

    directory = pathlib.Path(directory)
    write_wordpiece_vocab(directory)
    tokenizer = BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=True)
    if tokenizer.vocab_size <= len(tokenizer.all_special_tokens):  # transformers ignores unknown keywords
        raise RuntimeError(f"tiny classifier: the WordPiece vocabulary in {directory} was not loaded")
    tokenizer.model_max_length = max_positions
    common = dict(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        initializer_range=init_range,
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
    )
    torch.manual_seed(seed)
    if arch == "bert":
        config = BertConfig(max_position_embeddings=max_positions, **common)
        model = BertForSequenceClassification(config)
        head = model.classifier
    elif arch == "roberta":
        config = RobertaConfig(
            max_position_embeddings=max_positions + 2,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            **common,
        )
        model = RobertaForSequenceClassification(config)
        head = model.classifier.out_proj
    else:
        raise ValueError(f"arch must be bert or roberta, got {arch!r}")
    if bias is not None:
        if len(bias) != len(labels):
            raise ValueError("bias needs one value per label")
        with torch.no_grad():
            head.weight.zero_()
            head.bias.copy_(torch.tensor(list(bias), dtype=torch.float32))
    model.eval()
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    return directory


def one_hot_bias(labels: Sequence[str], chosen: str | Sequence[str], high: float = 6.0, low: float = -6.0) -> list[float]:
    """Bias that makes `chosen` (one label or several) win / exceed sigmoid 0.5."""
    chosen_set = {chosen} if isinstance(chosen, str) else set(chosen)
    unknown = chosen_set - set(labels)
    if unknown:
        raise ValueError(f"labels {sorted(unknown)} not in {list(labels)}")
    return [high if label in chosen_set else low for label in labels]

"""Turning texts into token ids with head-keeping truncation that is recorded, not silent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    truncated: bool


def encode_texts(tokenizer, texts: Sequence[str], max_length: int, special_tokens: bool = True) -> list[Encoded]:
    """Tokenise and keep the head. With special tokens, a trailing end token survives
    truncation (the same ids as the tokenizer's own `truncation=True, max_length=...`)."""
    if not texts:
        return []
    batch = tokenizer(list(texts), add_special_tokens=special_tokens)["input_ids"]
    eos = tokenizer.eos_token_id
    encoded = []
    for ids in batch:
        ids = list(ids)
        if len(ids) <= max_length:
            encoded.append(Encoded(ids, False))
        elif special_tokens and ids and ids[-1] == eos:
            encoded.append(Encoded(ids[: max_length - 1] + [eos], True))
        else:
            encoded.append(Encoded(ids[:max_length], True))
    return encoded


def read_lines(path, what: str) -> list[str]:
    """Non-empty stripped lines of a text file (CRLF tolerated), e.g. prompt files."""
    import pathlib

    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise ValueError(f"{what} file {path} has no lines")
    return lines

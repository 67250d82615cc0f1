"""Turning texts into token ids with head-keeping truncation that is recorded, not silent.

Two tokenisation styles (docs/metrics.md, "Tokenisation around special tokens"):
- `fast`: the tokenizer as loaded (transformers 5 ships only the `tokenizers`-backed
  classes); whitespace next to a special token such as `<mask_1>` becomes its own `▁` piece.
- `slow`: what the sentencepiece-based slow tokenizers of transformers 4.x (e.g. the
  `PegasusTokenizer` of 4.4 that CTRLEval ran) produce: the text is cut at special tokens,
  whitespace next to them is dropped, and each remaining piece is whitespace-normalised the
  way sentencepiece does (ends stripped, runs collapsed) before it is encoded.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

TOKENIZATION_STYLES = ("slow", "fast")

# Head-keeping tokenisation reads only a text's head (docs/metrics.md, "Tokenising only the
# head"): a text longer than (max_length + HEAD_MARGIN) * HEAD_CHARS_PER_TOKEN characters is cut
# at a whitespace before that bound and tokenised; when the cut text still yields more than
# max_length + HEAD_MARGIN ids, its first max_length ids (and its truncated flag) are those of
# the whole text, else the bound grows 4-fold (at last: the whole text).
HEAD_CHARS_PER_TOKEN = 32
HEAD_MARGIN = 8
_WHITESPACE = (" ", "\n", "\t", "\r")


def text_head(text: str, bound: int) -> str:
    """`text` cut to at most `bound` characters, at the last whitespace of the bound's second
    half when there is one (pre-tokenisers split there, so the ids before the cut are those
    of the whole text), else at the bound itself."""
    if len(text) <= bound:
        return text
    window = text[:bound]
    at = max(window.rfind(space, bound // 2) for space in _WHITESPACE)
    return window[:at] if at > 0 else window


def tokenize_heads(tokenize: Callable[[list[str]], Sequence[Sequence[int]]], texts: Sequence[str],
                   max_length: int) -> tuple[list[list[int]], list[str]]:
    """`tokenize(texts)` for texts of any length without reading more than their heads (see
    `HEAD_CHARS_PER_TOKEN`): per text, the ids of its head, of which the first `max_length`
    equal those of the whole text and which number more than `max_length` exactly when the whole
    text's do; and the heads themselves."""
    ids: list[list[int] | None] = [None] * len(texts)
    heads = list(texts)
    bound = (int(max_length) + HEAD_MARGIN) * HEAD_CHARS_PER_TOKEN
    pending = list(range(len(texts)))
    while pending:
        cut = [text_head(texts[i], bound) for i in pending]
        encoded = tokenize(cut) if cut else []
        retry = []
        for index, head, row in zip(pending, cut, encoded):
            if len(head) == len(texts[index]) or len(row) > max_length + HEAD_MARGIN:
                ids[index], heads[index] = list(row), head
            else:
                retry.append(index)
        pending, bound = retry, bound * 4
    return ids, heads  # type: ignore[return-value]


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    truncated: bool


def encode_texts(tokenizer, texts: Sequence[str], max_length: int, special_tokens: bool = True, style: str = "fast") -> list[Encoded]:
    """Tokenise (in the `fast` or `slow` style, module docstring) only the texts' heads
    (`tokenize_heads`) and keep the first `max_length` ids. With
    special tokens, a trailing end token survives truncation (the same ids as the
    tokenizer's own `truncation=True, max_length=...`)."""
    if not texts:
        return []
    if style == "slow":
        batch, _ = tokenize_heads(lambda heads: slow_style_ids(tokenizer, heads, add_eos=special_tokens), texts, max_length)
    elif style == "fast":
        batch, _ = tokenize_heads(lambda heads: tokenizer(heads, add_special_tokens=special_tokens)["input_ids"], texts, max_length)
    else:
        raise ValueError(f"tokenization style must be one of {list(TOKENIZATION_STYLES)}, not {style!r}")
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


def encode_ragged(tokenizer, texts: Sequence[str], max_length: int, special_tokens: bool = True,
                  style: str = "fast") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`encode_texts` for many (often repeated) texts in Arrow's list layout: flat `int32` ids,
    `int32` offsets (len(texts) + 1) and a truncated flag per text. Each distinct text is
    tokenised once."""
    unique: dict[str, int] = {}
    owners = np.fromiter((unique.setdefault(text, len(unique)) for text in texts), dtype=np.int64, count=len(texts))
    encoded = encode_texts(tokenizer, list(unique), max_length, special_tokens, style=style)
    unique_lengths = np.fromiter((len(e.ids) for e in encoded), dtype=np.int64, count=len(encoded))
    unique_offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(unique_lengths, out=unique_offsets[1:])
    unique_values = np.fromiter((i for e in encoded for i in e.ids), dtype=np.int32, count=int(unique_offsets[-1]))
    truncated = np.fromiter((e.truncated for e in encoded), dtype=bool, count=len(encoded))[owners]
    lengths = unique_lengths[owners]
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    within = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lengths)
    values = unique_values[np.repeat(unique_offsets[owners], lengths) + within]
    return values, offsets.astype(np.int32), truncated


def id_lists(values: np.ndarray, offsets: np.ndarray, row_offsets: np.ndarray | None = None) -> "pa.Array":
    """An Arrow `list<int32>` array of token id sequences (flat values + offsets), or, with
    `row_offsets`, `list<list<int32>>`: sequences grouped per row."""
    import pyarrow as pa

    sequences = pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(values, type=pa.int32()))
    if row_offsets is None:
        return sequences
    return pa.ListArray.from_arrays(pa.array(row_offsets, type=pa.int32()), sequences)


def slow_style_ids(tokenizer, texts: Sequence[str], add_eos: bool) -> list[list[int]]:
    """Token ids as a transformers-4.x slow sentencepiece tokenizer gives them (with `</s>`
    appended when `add_eos`): special tokens cut out with the whitespace around them, each
    piece between them encoded on its own after sentencepiece-style whitespace
    normalisation."""
    cutter = _special_token_cutter(tuple(sorted(set(tokenizer.all_special_tokens), key=lambda t: (-len(t), t))))
    plans: list[list[int | str]] = []  # per text: special-token ids and pieces of text
    pieces: list[str] = []
    for text in texts:
        plan: list[int | str] = []
        for position, part in enumerate(cutter.split(text)):
            if position % 2 == 1:
                plan.append(tokenizer.convert_tokens_to_ids(part))
                continue
            normalised = " ".join(part.split())
            if normalised:
                plan.append(normalised)
                pieces.append(normalised)
        plans.append(plan)
    encoded = iter(tokenizer(pieces, add_special_tokens=False)["input_ids"] if pieces else [])
    result = []
    for plan in plans:
        ids: list[int] = []
        for item in plan:
            if isinstance(item, str):
                ids.extend(next(encoded))
            else:
                ids.append(item)
        if add_eos:
            ids.append(tokenizer.eos_token_id)
        result.append(ids)
    return result


@functools.lru_cache(maxsize=8)
def _special_token_cutter(specials: tuple[str, ...]) -> re.Pattern:
    """A pattern that splits text at (and captures) the special tokens, longest first."""
    return re.compile("(" + "|".join(re.escape(token) for token in specials) + ")")


def read_lines(path, what: str) -> list[str]:
    """Non-empty stripped lines of a text file (CRLF tolerated, a leading BOM dropped), e.g.
    prompt files. FileNotFoundError when it is no file; a UsageError naming the file when it is
    not UTF-8 (the line and byte too) or has no line."""
    import pathlib

    from scoring.errors import UsageError
    from scoring.utf8_text import decode_utf8

    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    text = decode_utf8(path.read_bytes(), f"{what} file {path}", UsageError, encoding="utf-8-sig")
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise UsageError(f"{what} file {path} has no lines")
    return lines

"""Inverse word frequency tables for CTRLEval's NISF weights (CTRLEval Eq. 5-7).

IWF(w) = log(1 + |C|) / f_w, with |C| the number of corpus sentences and f_w the number of
sentences whose token ids contain w; a token that never occurs gets 0 (as in the shipped
pegasus-large table, `iwf_full.txt`, one float per token id).
"""

from __future__ import annotations

import math
import pathlib
from typing import Iterable

import numpy as np

from scoring.errors import UsageError
from scoring.local_files import refuse_device
from scoring.utf8_text import decode_utf8


def compute_iwf(tokenizer, sentences: Iterable[str], vocab_size: int | None = None) -> np.ndarray:
    """IWF per token id from a sentence corpus, tokenised the way the scorer tokenises
    (special tokens included, so `</s>` counts like in the original table)."""
    sentences = list(sentences)
    size = vocab_size or len(tokenizer)
    sentence_frequency = np.zeros(size, dtype=np.int64)
    for sentence in sentences:
        ids = set(tokenizer(sentence).input_ids)
        sentence_frequency[list(ids)] += 1
    table = np.zeros(size, dtype=np.float64)
    seen = sentence_frequency > 0
    table[seen] = math.log(1 + len(sentences)) / sentence_frequency[seen]
    # the shipped table has 0 for pad, </s> and the mask/unk specials
    for token_id in tokenizer.all_special_ids:
        if 0 <= token_id < size:
            table[token_id] = 0.0
    return table


def save_iwf(table: np.ndarray, path: str | pathlib.Path) -> None:
    """Write one float per line, line i = token id i (the `iwf_full.txt` format)."""
    pathlib.Path(path).write_text("".join(f"{value!r}\n" for value in table.tolist()))


def load_iwf(path: str | pathlib.Path) -> np.ndarray:
    """Read an IWF table: one float per line (LF or CRLF), line i = token id i. Every value is
    finite and >= 0 (CTRLEval Eq. 5: log(1 + |C|) / f_w): a NaN, infinite or negative weight
    would make every NISF-weighted score NaN or meaningless without a row error. A blank line is
    allowed only at the end (inside the table it would shift every later token id). A ValueError
    names the file and line; a device is refused (it may never end)."""
    path = pathlib.Path(path)
    refuse_device(path, error=UsageError)
    lines = decode_utf8(path.read_bytes(), path, ValueError).splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    values = []
    for line_number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            raise ValueError(f"{path}:{line_number}: a blank line inside the table (every later token id would shift)")
        try:
            value = float(line)
        except ValueError:
            raise ValueError(f"{path}:{line_number}: not a float: {line[:80]!r}") from None
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"{path}:{line_number}: {line[:80]!r} is no IWF weight (finite and >= 0)")
        values.append(value)
    if not values:
        raise ValueError(f"{path}: empty IWF table")
    return np.asarray(values, dtype=np.float64)

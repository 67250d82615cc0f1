"""A deterministic sentence splitter for CTRLEval coherence.

The original uses NLTK punkt, whose trained parameters are a separate download. This splitter
breaks after `.`, `!` or `?` (and any closing quotes or brackets) when whitespace follows
and the next word does not start with a lowercase letter. It does not know abbreviations
("Dr. Smith" splits), which punkt sometimes does; on the CTRLEval sets the two agree on
ordinary prose.
"""

from __future__ import annotations

import re

_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[^a-z\s])")


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`, stripped, none empty (a text without a boundary is one sentence)."""
    pieces = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.start() + len(match.group(0).rstrip())
        pieces.append(text[start:end])
        start = match.end()
    pieces.append(text[start:])
    return [piece.strip() for piece in pieces if piece.strip()]

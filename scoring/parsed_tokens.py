"""Special-token strings in the data of a metric that reproduces an original: scored as the
original scored them, and said so in the row's `warning` (docs/security.md, "Special tokens
in data").

BARTScore, CTRLEval, BERTScore, the CoDI-Eval classifiers and `attribute_accuracy` tokenise a
text as their originals did, special tokens parsed, so their numbers match the originals'. A
generation dump decoded without `skip_special_tokens` still holds `</s>`, `<pad>` or `<s>`, and
a `<mask_1>` in a CTRLEval text is one more mask: the row is scored on those control ids. The
score stays as the original gives it; the row's warning names the field and the strings
(`text holds '</s>' (parsed as a special token, as the original does)`).

The strings are the tokenizer's control tokens, `scoring.literal_tokens.control_tokens` (every
special token but the unknown token), found with one compiled pattern
(`literal_tokens.control_pattern`): one scan per field of a row, a small cost beside
tokenising it. A string that only looks like one (`< /s>`) is not one. A warning never changes
a number or a signature.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from scoring.display_names import quoted_list
from scoring.literal_tokens import control_pattern, control_tokens

#: the strings of one field a warning names; more are counted (`and N more`)
SHOWN = 3
#: the warnings of one row are joined by this, in the order the metric gives them
SEPARATOR = "; "


class ParsedTokens:
    """The control-token strings of one tokenizer, found in texts (module docstring)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        try:
            controls = control_tokens(tokenizer)
        except AttributeError:  # a stand-in without special tokens (a test's hand-made scorer) has none
            controls = {}
        self.pattern = control_pattern(controls) if controls else None

    def found(self, texts: Iterable[str | None]) -> list[str]:
        """The distinct control-token strings written in `texts`, in order of first occurrence
        (a tokenizer's left-to-right, longest-first match)."""
        if self.pattern is None:
            return []
        seen: dict[str, None] = {}
        for text in texts:
            if text and self.pattern.search(text) is not None:  # most texts hold none: one scan
                seen.update(dict.fromkeys(self.pattern.findall(text)))
        return list(seen)

    def note(self, fields: Sequence[tuple[str, Iterable[str | None]]]) -> str | None:
        """The warning for one row: per field (name, its texts as tokenised) the strings found,
        or None when no field holds one."""
        return note_of([(field, self.found(texts)) for field, texts in fields])


def kept_for(holder, tokenizer) -> ParsedTokens:
    """`ParsedTokens` of `tokenizer`, built once and kept on `holder` (a metric or classifier)
    while its tokenizer stays that one."""
    kept = holder.__dict__.get("_parsed_tokens")
    if kept is None or kept.tokenizer is not tokenizer:
        kept = holder.__dict__["_parsed_tokens"] = ParsedTokens(tokenizer)
    return kept


def note_of(found: Sequence[tuple[str, Sequence[str]]]) -> str | None:
    """`text holds '</s>', source holds '<s>', '<pad>' (parsed as special tokens, as the
    original does)` from (field, strings) pairs; None when none holds a string."""
    held = [(field, strings) for field, strings in found if strings]
    if not held:
        return None
    count = sum(len(strings) for _, strings in held)
    clauses = ", ".join(f"{field} {'hold' if field == 'references' else 'holds'} {quoted_list(strings, SHOWN)}"
                        for field, strings in held)
    return f"{clauses} (parsed as {'a special token' if count == 1 else 'special tokens'}, as the original does)"


def joined(*warnings: str | None) -> str | None:
    """The row's warning: the given ones that are set, in the given order, or None."""
    present = [warning for warning in warnings if warning]
    return SEPARATOR.join(present) if present else None

"""Rule checks of CoDI-Eval: response clean-up, length intervals, keyword matching.

Definitions: docs/codi-eval.md (response clean-up, length, keyword).

Lemmatiser
----------
The original evaluation lemmatises every word with spaCy ``en_core_web_md``: it runs the
pipeline on the single word and keeps ``doc[0].lemma_``. spaCy models are not installable
from the registries here, so we use **lemminflect** (a dictionary + rules lemmatiser on
PyPI; its version goes into the metric signature). Differences, on purpose and documented:

* No POS tagger. spaCy tags the lone word with its statistical tagger and lemmatises for that
  one POS; lemminflect's ``getAllLemmas`` gives the lemmas for every POS the word can have.
  A word therefore has a *set* of lemmas (its lower-cased surface form plus all dictionary
  lemmas, or for out-of-vocabulary words the NOUN and VERB rule lemmas), and a keyword is
  present iff its lemma set meets the lemma set of some response word. This is more lenient
  for POS-ambiguous forms ("leaves" matches both "leaf" and "leave"; "better" matches
  "good"/"well"), where spaCy's single tag could miss an intended match or pick the other
  reading. Anti-keywords use the same test, so they are equally lenient.
* "First token" as in spaCy: a keyword or word is reduced to its first ``\\w+`` piece
  (spaCy splits hyphens and spaces into tokens and the original keeps ``doc[0]``), so
  "come back" -> "come", "hand-covering" -> "hand", and a response word "well-known"
  counts as "well". This keeps the original's behaviour for multi-word keywords.
"""

from __future__ import annotations

import math
import re
import reprlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

WORD_PATTERN = re.compile(r"\w+(?:-\w+)*")
_PIECE = re.compile(r"\w+")
MAX_WORDS = 10000  # the "at least" upper bound of the original sets
LONG_WORD = 64  # characters: a longer word's lemmas are not cached (`word_lemmas`)

LENGTH_MODES = ("equal to", "around", "at most", "at least", "between")


def lemmatizer_name() -> str:
    """The lemmatiser identity that goes into signatures."""
    from scoring.signature import library_versions

    return f"lemminflect-{library_versions('lemminflect')['lemminflect']}:all-pos-lemma-sets"


# ----- clean-up and length ------------------------------------------------------------------
def clean_response(text: str) -> str:
    """Drop everything up to and including the first ":\\n\\n" or ":\\n", then strip.

    Both separators start at the first ":\\n"; whether the second newline is dropped makes no
    difference after strip(), so this is the first ":\\n" and the rest."""
    index = text.find(":\n")
    if index >= 0:
        text = text[index + 2 :]
    return text.strip()


def count_words(text: str) -> int:
    """Words = whitespace-separated tokens (spec: Length)."""
    return len(text.split())


def round_half_even(value: float) -> int:
    """numpy.round semantics on the float product (Python's round() is half-to-even)."""
    return int(round(value))


def length_interval(mode: str, n: float, n2: float | None = None) -> tuple[int, int]:
    """Closed word interval for a length instruction (spec: Length).

    equal to -> [n, n]; around -> [round(0.9n), round(1.1n)] half-to-even; at most -> [1, n];
    at least -> [n, 10000]; between -> [n, n2]."""
    if mode == "equal to":
        return int(n), int(n)
    if mode == "around":
        return round_half_even(0.9 * n), round_half_even(1.1 * n)
    if mode == "at most":
        return 1, int(n)
    if mode == "at least":
        return int(n), MAX_WORDS
    if mode == "between":
        if n2 is None:
            raise ValueError("length mode 'between' needs two numbers")
        return int(n), int(n2)
    raise ValueError(f"unknown length mode {mode!r}; known: {', '.join(LENGTH_MODES)}")


def check_length_label(interval) -> tuple[float, float]:
    """A length label [lo, hi]: two finite non-negative numbers with lo <= hi. ValueError naming
    the problem otherwise (an inverted [20, 3] would make every response fail silently, and an
    upper bound of 1e309, read as infinity, every one pass)."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2:
        raise ValueError(f"length constraint 'label' must be [lo, hi], got {short_repr(interval)}")
    lo, hi = interval
    for value in (lo, hi):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(f"length constraint 'label' must hold two numbers, both finite, got {short_repr(list(interval))}")
    if lo < 0:
        raise ValueError(f"length constraint 'label' {list(interval)!r} has a negative lower bound")
    if lo > hi:
        raise ValueError(f"length constraint 'label' {list(interval)!r} is inverted: lower bound {lo} > upper bound {hi}")
    return lo, hi


def short_repr(value) -> str:
    """`repr(value)` cut to a few items and characters (a label may be anything a dump holds)."""
    short = reprlib.Repr()
    short.maxlist = short.maxdict = 4
    short.maxstring = short.maxother = short.maxlong = 40
    return short.repr(value)


def check_length(words: int, interval: Sequence[float]) -> bool:
    """Success iff lo <= words <= hi (interval as stored in the instruction set)."""
    lo, hi = check_length_label(interval)
    return lo <= words <= hi


# ----- keywords ----------------------------------------------------------------------------
def _lemmas(word: str) -> frozenset[str]:
    """Lemmas of the first \\w+ piece of `word`, lower-cased (see module docstring)."""
    from lemminflect import getAllLemmas, getAllLemmasOOV

    match = _PIECE.search(word.lower())
    if match is None:
        return frozenset()
    piece = match.group(0)
    lemmas = {piece}
    found = getAllLemmas(piece)
    if not found:
        found = {**getAllLemmasOOV(piece, "NOUN"), **getAllLemmasOOV(piece, "VERB")}
    for forms in found.values():
        lemmas.update(form.lower() for form in forms)
    return frozenset(lemmas)


lemma_set = lru_cache(maxsize=200_000)(_lemmas)  # the lemmas of words up to LONG_WORD characters, cached


def word_lemmas(word: str) -> frozenset[str]:
    """`lemma_set(word)`; a word longer than LONG_WORD characters (no dictionary word is) is not
    cached: a dump of rows each holding one unique 1 MB word would keep them all in memory."""
    return _lemmas(word) if len(word) > LONG_WORD else lemma_set(word)


def response_lemmas(text: str) -> frozenset[str]:
    """Union of the lemma sets of the response's words (regex \\w+(?:-\\w+)*, lower-cased)."""
    lemmas: set[str] = set()
    for word in WORD_PATTERN.findall(text.lower()):
        lemmas |= word_lemmas(word)
    return frozenset(lemmas)


def keyword_alternatives(item: str) -> list[str]:
    """An item "a or b" is satisfied by either word; other items are one keyword."""
    parts = [part.strip() for part in item.split(" or ")]
    return [part for part in parts if part]


@dataclass
class KeywordResult:
    success: bool
    found: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    anti_present: bool = False


def check_keywords(text: str, label: Sequence[str], anti_label: str | None = None) -> KeywordResult:
    """Easy: every keyword present. Hard: every item present (an "a or b" item by either
    word) and the anti-keyword absent (spec: Keyword)."""
    lemmas = response_lemmas(text)
    found, missing = [], []
    for item in label:
        alternatives = keyword_alternatives(item)
        if not alternatives:
            raise ValueError(f"empty keyword item in {list(label)!r}")
        if any(word_lemmas(word) & lemmas for word in alternatives):
            found.append(item)
        else:
            missing.append(item)
    anti_present = bool(anti_label) and bool(word_lemmas(anti_label) & lemmas)
    return KeywordResult(not missing and not anti_present, found, missing, anti_present)

"""Sentence splitting for CTRLEval coherence (docs/metrics.md, "Sentence splitting").

Two named splitters; the choice enters the CTRLEval signature as `sentence_splitter`:

- `punkt` (default): NLTK's Punkt sentence tokenizer with the English parameters, i.e. what
  `nltk.sent_tokenize(text)` returns, which is what the original CTRLEval calls. The
  parameters are shipped in NLTK's own `punkt_tab` text format under
  `scoring/resources/punkt_tab/english/` (provenance and licence in the README there), so no
  download is needed; NLTK's tokenizer class runs on them.
- `regex`: a deterministic rule without any trained parameters: break after `.`, `!` or `?`
  (and any closing quotes or brackets) when whitespace follows and the next word does not
  start with a lowercase letter. It knows no abbreviations, so "Mr. Smith", "U.S. troops"
  and initials split where Punkt does not; on the shipped corpora it disagrees with Punkt on
  a few per cent of texts (docs/fidelity.md lists the counts).
"""

from __future__ import annotations

import functools
import re

from scoring.resources import PUNKT_ENGLISH_DIR

SPLITTERS = ("punkt", "regex")
DEFAULT_SPLITTER = "punkt"
# signature values: the splitter and what fixes its behaviour
SPLITTER_IDS = {"punkt": "punkt-english(nltk)", "regex": "regex-v1"}

_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[^a-z\s])")


def check_splitter(name: str) -> str:
    """The splitter name if it is known; ValueError naming the choices otherwise."""
    if name not in SPLITTERS:
        raise ValueError(f"sentence_splitter must be one of {list(SPLITTERS)}, not {name!r}")
    return name


def split_sentences(text: str, splitter: str = DEFAULT_SPLITTER) -> list[str]:
    """Sentences of `text` (a text without a boundary is one sentence)."""
    if check_splitter(splitter) == "punkt":
        return punkt_english().tokenize(text)
    return split_sentences_regex(text)


def split_sentences_regex(text: str) -> list[str]:
    """The `regex` splitter: sentences stripped, none empty."""
    pieces = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.start() + len(match.group(0).rstrip())
        pieces.append(text[start:end])
        start = match.end()
    pieces.append(text[start:])
    return [piece.strip() for piece in pieces if piece.strip()]


@functools.lru_cache(maxsize=1)
def punkt_english():
    """NLTK's Punkt sentence tokenizer (the class `nltk.sent_tokenize` uses) with the shipped
    English parameters, read from the four `punkt_tab` files here rather than through
    `nltk.data` (which only opens files under its own data roots)."""
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    params = PunktParameters()
    params.abbrev_types = set(_lines("abbrev_types.txt"))
    params.sent_starters = set(_lines("sent_starters.txt"))
    params.collocations = {tuple(line.split("\t")) for line in _lines("collocations.tab")}
    for line in _lines("ortho_context.tab"):
        word, flags = line.split("\t")
        params.ortho_context[word] = int(flags)
    return PunktSentenceTokenizer(params)


def _lines(file_name: str) -> list[str]:
    """Lines of one punkt_tab file without their newline (a line may end in a space)."""
    text = (PUNKT_ENGLISH_DIR / file_name).read_text(encoding="utf-8")
    return [line for line in text.split("\n") if line]

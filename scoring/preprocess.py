"""Named text preprocessing applied before scoring (docs/metrics.md, "Preprocessing").

- `none`: texts are scored as given.
- `moses_detok`: English Moses detokenisation of every text the metric reads (source,
  references, hypothesis), case kept, as the original BARTScore does for its summarisation
  and data-to-text sets, whose texts are stored tokenised ("team 's", "burnley ."). The text
  is split on single spaces and the tokens handed to the `sacremoses` detokenizer (the
  Python port of the Moses `detokenizer.perl` the original calls).

The step's name and the sacremoses version enter the metric's signature.
"""

from __future__ import annotations

import functools
from typing import Callable

from scoring.params import check_choice

PREPROCESSORS = ("none", "moses_detok")


def check_preprocess(name: str) -> str:
    return check_choice("preprocess", name, PREPROCESSORS)


@functools.lru_cache(maxsize=1)
def _moses_english():
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang="en")


def moses_detokenize(text: str) -> str:
    """Moses-detokenise one tokenised English text (tokens separated by single spaces)."""
    return _moses_english().detokenize(text.split(" "))


def preprocessor(name: str) -> Callable[[str], str] | None:
    """The function for a named step, or None for `none`."""
    return moses_detokenize if check_preprocess(name) == "moses_detok" else None


def signature_value(name: str) -> str:
    """What the signature records for a step: its name and the library that defines it."""
    if check_preprocess(name) == "none":
        return "none"
    from importlib import metadata

    return f"moses_detok(sacremoses={metadata.version('sacremoses')},lang=en)"

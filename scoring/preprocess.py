"""Named text preprocessing applied before scoring (docs/metrics.md, "Preprocessing").

- `none`: texts are scored as given.
- `moses_detok`: English Moses detokenisation of every text the metric reads (source,
  references, hypothesis), case kept, as the original BARTScore does for its summarisation
  and data-to-text sets, whose texts are stored tokenised ("team 's", "burnley ."). The text
  is split on single spaces and the tokens handed to the `sacremoses` detokenizer (the
  Python port of the Moses `detokenizer.perl` the original calls).
- `moses_detok_perl`: the same step through Moses' own `detokenizer.perl` (`-q -b -l en`),
  the copy the `mosestokenizer` package ships, run by `perl` as one long-lived process per
  worker that reads one text per line, as the original does. It differs from sacremoses on
  an opening quote after sentence punctuation (`Sunday. 'Just` against `Sunday.'Just`).

The step's name and the library version (and the Perl script's hash) enter the signature.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable

from scoring.params import check_choice

PREPROCESSORS = ("none", "moses_detok", "moses_detok_perl")


def check_preprocess(name: str) -> str:
    return check_choice("preprocess", name, PREPROCESSORS)


@functools.lru_cache(maxsize=1)
def _moses_english():
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang="en")


def moses_detokenize(text: str) -> str:
    """Moses-detokenise one tokenised English text (tokens separated by single spaces)."""
    return _moses_english().detokenize(text.split(" "))


def perl_script() -> str:
    """Path of the `detokenizer.perl` shipped by the `mosestokenizer` package."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("mosestokenizer")
    if spec is None or not spec.submodule_search_locations:
        from scoring.errors import UsageError

        raise UsageError("preprocess moses_detok_perl needs the mosestokenizer package (it ships detokenizer.perl)")
    return os.path.join(list(spec.submodule_search_locations)[0], "detokenizer.perl")


class PerlDetokenizer:
    """One `perl detokenizer.perl -q -b -l LANG` process fed one text per line."""

    def __init__(self, lang: str = "en"):
        import shutil
        import subprocess

        perl = shutil.which("perl")
        if perl is None:
            from scoring.errors import UsageError

            raise UsageError("preprocess moses_detok_perl needs perl on the PATH")
        self.process = subprocess.Popen([perl, perl_script(), "-q", "-b", "-l", lang], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, encoding="utf-8", bufsize=1)
        self.lock = threading.Lock()

    def __call__(self, text: str) -> str:
        if "\n" in text or "\r" in text:
            raise ValueError("text holds a line break; detokenizer.perl reads one text per line")
        line = " ".join(text.split(" "))
        if not line.strip():
            return ""
        with self.lock:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
            return self.process.stdout.readline().rstrip("\n")


@functools.lru_cache(maxsize=1)
def _perl_english() -> PerlDetokenizer:
    return PerlDetokenizer("en")


def moses_detokenize_perl(text: str) -> str:
    """Moses-detokenise one tokenised English text with Moses' own Perl script."""
    return _perl_english()(text)


def preprocessor(name: str) -> Callable[[str], str] | None:
    """The function for a named step, or None for `none`."""
    return {"none": None, "moses_detok": moses_detokenize, "moses_detok_perl": moses_detokenize_perl}[check_preprocess(name)]


def signature_value(name: str) -> str:
    """What the signature records for a step: its name and the library that defines it."""
    name = check_preprocess(name)
    if name == "none":
        return "none"
    from importlib import metadata

    if name == "moses_detok_perl":
        from scoring.models import file_digest

        return (f"moses_detok_perl(mosestokenizer={metadata.version('mosestokenizer')},"
                f"detokenizer.perl=sha256:{file_digest(perl_script())},lang=en)")
    return f"moses_detok(sacremoses={metadata.version('sacremoses')},lang=en)"

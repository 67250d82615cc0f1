"""ROUGE baseline (Lin 2004) as the `rouge-score` package computes it, per row over the row's
ragged `references`.

ROUGE-n F = 2PR/(P+R) with P = matched n-grams / hypothesis n-grams and R = matched n-grams /
reference n-grams; ROUGE-L uses the longest common subsequence instead of n-gram matches.
Tokens are rouge-score's (lower-cased alphanumerics, Porter-stemmed with `use_stemmer`). With
several references each ROUGE type takes the reference with the best F (rouge-score's
`score_multi`), and reports that reference's P, R and F.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from scoring.errors import UsageError
from scoring.metric import RowMetric
from scoring.signature import Signature, library_versions

VERSION = "1"
TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


# ROUGE-L fills a (text tokens x reference tokens) table of Python lists per reference; past
# this many cells a row is an error (10^7: seconds and about 100 MB; a summary pair is ~10^4)
MAX_LCS_CELLS = 10_000_000
_TOKEN = re.compile(r"[a-z0-9]+")  # rouge-score's tokens: alphanumeric runs of the lower-cased text


def _tokens(text: str) -> int:
    return sum(1 for _ in _TOKEN.finditer(text.lower()))


def lcs_problem(text: str, references: Sequence[str]) -> str | None:
    """Why ROUGE-L's tables for this row would be too large (MAX_LCS_CELLS), or None."""
    words = _tokens(text)
    reference_words = sum(_tokens(reference) for reference in references)
    if words * reference_words <= MAX_LCS_CELLS:
        return None
    return (f"rougeL: text ({words} words) x references ({reference_words} words) is {words * reference_words} cells "
            f"of the longest common subsequence table, more than {MAX_LCS_CELLS}")


class RougeMetric(RowMetric):
    """ROUGE-1/2/L of `text` against `references` (rouge-score, stemmer on): columns
    `<type>_f`, `<type>_p`, `<type>_r`, best F over the references."""

    name = "rouge"
    required_columns = ("text", "references")

    def __init__(self, types: Sequence[str] = ("rouge1", "rouge2", "rougeL"), use_stemmer: bool = True,
                 split_summaries: bool = False):
        if isinstance(types, str):
            types = [types]
        unknown = [t for t in types if t not in TYPES]
        if unknown or not types:
            raise UsageError(f"types: unknown ROUGE types {unknown}; choose from {list(TYPES)}")
        from rouge_score.rouge_scorer import RougeScorer

        self.types = tuple(dict.fromkeys(types))
        self.use_stemmer = bool(use_stemmer)
        self.split_summaries = bool(split_summaries)
        self.scorer = RougeScorer(list(self.types), use_stemmer=self.use_stemmer, split_summaries=self.split_summaries)
        self.output_columns = tuple(f"{t}_{part}" for t in self.types for part in ("f", "p", "r"))

    def signature(self) -> Signature:
        return Signature(self.name, VERSION, {"types": list(self.types), "stemmer": self.use_stemmer,
                                              "split_summaries": self.split_summaries,
                                              "rouge_score": library_versions("rouge-score")["rouge-score"]})

    def validate(self, row: dict[str, Any]) -> str | None:
        reason = super().validate(row)
        if reason is None and any(not isinstance(r, str) for r in row["references"]):
            return "null reference in 'references'"
        if reason is None and {"rougeL", "rougeLsum"} & set(self.types):
            return lcs_problem(row["text"], row["references"])
        return reason

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        results = []
        for row in rows:
            best = self.scorer.score_multi(list(row["references"]), row["text"])
            result = {}
            for rouge_type in self.types:
                score = best[rouge_type]
                result[f"{rouge_type}_f"] = float(score.fmeasure)
                result[f"{rouge_type}_p"] = float(score.precision)
                result[f"{rouge_type}_r"] = float(score.recall)
            results.append(result)
        return results

"""ROUGE baseline (Lin 2004) as the `rouge-score` package computes it, per row over the row's
ragged `references`.

ROUGE-n F = 2PR/(P+R) with P = matched n-grams / hypothesis n-grams and R = matched n-grams /
reference n-grams; ROUGE-L uses the longest common subsequence instead of n-gram matches.
Tokens are rouge-score's (lower-cased alphanumerics, Porter-stemmed with `use_stemmer`). With
several references each ROUGE type takes the reference with the best F (rouge-score's
`score_multi`), and reports that reference's P, R and F.
"""

from __future__ import annotations

from typing import Any, Sequence

from scoring.errors import UsageError
from scoring.metric import RowMetric
from scoring.signature import Signature, library_versions

VERSION = "1"
TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


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

"""A cheap model-free metric: word count and distinct-n ratios of one text.

Useful as a baseline, for Dist-n in CompMCTG reports, and for benchmarking the job layer
without a model in the way.
"""

from __future__ import annotations

from typing import Any, Sequence

from scoring.metric import RowMetric
from scoring.signature import Signature

VERSION = "1"


def distinct_n(tokens: Sequence[str], n: int) -> float:
    """Distinct-n: unique n-grams / all n-grams of one token sequence (0 when there are none)."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


class TextStatsMetric(RowMetric):
    name = "text_stats"
    required_columns = ("text",)
    output_columns = ("text_stats_words", "text_stats_dist1", "text_stats_dist2", "text_stats_dist3")

    def signature(self) -> Signature:
        return Signature(self.name, VERSION, {"tokenizer": "whitespace"})

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        results = []
        for row in rows:
            tokens = row["text"].split()
            results.append(
                {
                    "text_stats_words": float(len(tokens)),
                    "text_stats_dist1": distinct_n(tokens, 1),
                    "text_stats_dist2": distinct_n(tokens, 2),
                    "text_stats_dist3": distinct_n(tokens, 3),
                }
            )
        return results

"""Defaults shared by every command that resamples (no heavy imports: the CLI reads them while
building its parser)."""

from __future__ import annotations

import math

#: resamples (bootstrap) and trials (permutation) when none are asked for: `meta`, `compare`,
#: `leaderboard` and the demo's report all use this, raised by `resamples_for` under a correction
DEFAULT_RESAMPLES = 1000


def resamples_for(n_pairs: int, alpha: float = 0.05, correction: str = "none") -> int:
    """The resample count for a block of `n_pairs` tests at `alpha`: `DEFAULT_RESAMPLES`, or more
    under a multiple-comparison correction. Holm and Benjamini-Hochberg compare the smallest p
    with alpha / m, and a resampled p is never below 1 / (N + 1), so N is raised until that floor
    is at most half of alpha / m: N + 1 >= 2 m / alpha."""
    if correction == "none" or n_pairs <= 1:
        return DEFAULT_RESAMPLES
    return max(DEFAULT_RESAMPLES, math.ceil(2 * n_pairs / alpha) - 1)

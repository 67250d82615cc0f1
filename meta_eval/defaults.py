"""Defaults shared by every command that resamples (no heavy imports: the CLI reads them while
building its parser)."""

from __future__ import annotations

import math

#: resamples (bootstrap) and trials (permutation) when none are asked for: `meta`, `compare`,
#: `leaderboard` and the demo's report all use this, raised by `resamples_for` under a correction
DEFAULT_RESAMPLES = 1000
#: the most resamples, trials or draws any command runs: p-values to 1e-6, enough for Holm or
#: Benjamini-Hochberg over 25,000 pairs at alpha 0.05; 10**9 would hold gigabytes per column
MAX_RESAMPLES = 1_000_000


def check_counts(seed: int | None = None, seed_name: str = "seed", **counts: int) -> None:
    """A usage error (exit 2) for a negative seed (numpy's seed sequences take none) or a count of
    resamples, trials or draws above `MAX_RESAMPLES`; lower bounds stay with each command."""
    from scoring.errors import UsageError

    if seed is not None and seed < 0:
        raise UsageError(f"{seed_name} {seed}: must be >= 0")
    for name, value in counts.items():
        if value is not None and value > MAX_RESAMPLES:
            raise UsageError(f"{name} {value:,}: at most {MAX_RESAMPLES:,}")


def resamples_for(n_pairs: int, alpha: float = 0.05, correction: str = "none") -> int:
    """The resample count for a block of `n_pairs` tests at `alpha`: `DEFAULT_RESAMPLES`, or more
    under a multiple-comparison correction. Holm and Benjamini-Hochberg compare the smallest p
    with alpha / m, and a resampled p is never below 1 / (N + 1), so N is raised until that floor
    is at most half of alpha / m: N + 1 >= 2 m / alpha."""
    if correction == "none" or n_pairs <= 1:
        return DEFAULT_RESAMPLES
    return max(DEFAULT_RESAMPLES, math.ceil(2 * n_pairs / alpha) - 1)

"""Attribute Compound Divergence (spec `splits.md`, "Divergence"; Keysers et al. 2020 MCD).

F_S(k) = count of compound k over the combinations of side S / total compound count of S.
Chernoff coefficient C_α(P‖Q) = Σ_k P(k)^α Q(k)^(1-α) with P = F_seen, Q = F_unseen, α = 0.1.
D = 1 − C_α; an empty side gives D = 1.

Two implementations:
- `divergence(universe, seen)`: from scratch with Counters over compound names (the
  reference, independent of the incidence matrices);
- `CountTerms` + `move_gains`: the count-space form used inside the climb. With both side sizes
  fixed (every move swaps one seen combo for one unseen combo), the totals T_s = |S|·m and
  T_u = |U|·m are constant, so C_α = T_s^-α T_u^-(1-α) Σ_k c_s(k)^α c_u(k)^(1-α) and a move
  changes only the terms of the ≤ 2m compounds of the two swapped combos. The change of Σ for
  every (seen s, unseen u) pair is A(s) + B(u) − Σ_{k∈s∩u} (a_k + b_k), where a_k (b_k) is the
  change of term k when one carrier moves seen→unseen (unseen→seen).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping

import numpy as np

DEFAULT_ALPHA = 0.1


def chernoff_coefficient(p: Mapping, q: Mapping, alpha: float = DEFAULT_ALPHA) -> float:
    """C_α = Σ_k p(k)^α q(k)^(1-α) over keys present (non-zero) in both distributions."""
    return float(sum((p[k] ** alpha) * (q[k] ** (1.0 - alpha)) for k in p if p[k] > 0 and q.get(k, 0) > 0))


def compound_distribution(universe, combos: Iterable[int]) -> dict:
    """F(k): compound counts over the given combinations, normalised by their total."""
    counts: Counter = Counter()
    for i in combos:
        counts.update(universe.compounds_of(i))
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def divergence(universe, seen: Iterable[int], alpha: float = DEFAULT_ALPHA) -> float:
    """D = 1 − C_α(F_seen ‖ F_unseen), recomputed from scratch; 1 when a side is empty."""
    seen = list(seen)
    unseen = universe.unseen_of(seen)
    if not seen or not unseen:
        return 1.0
    p = compound_distribution(universe, seen)
    q = compound_distribution(universe, unseen)
    return 1.0 - chernoff_coefficient(p, q, alpha)


def divergence_of_dicts(universe, seen: Iterable[Mapping[str, str]], alpha: float = DEFAULT_ALPHA) -> float:
    return divergence(universe, [universe.index_of(c) for c in seen], alpha)


class CountTerms:
    """Term table t[i, j] = i^α j^(1-α) for compound counts i (seen), j (unseen) in 0..N."""

    def __init__(self, n_combos: int, alpha: float = DEFAULT_ALPHA):
        self.alpha = alpha
        grid = np.arange(n_combos + 2, dtype=np.float64)
        self.table = np.power(grid, alpha)[:, None] * np.power(grid, 1.0 - alpha)[None, :]
        self.table[0, :] = 0.0
        self.table[:, 0] = 0.0

    def sum_terms(self, cs: np.ndarray, cu: np.ndarray) -> np.ndarray:
        """Σ_k t[c_s(k), c_u(k)] along the last axis."""
        return self.table[cs, cu].sum(axis=-1)

    def deltas(self, cs: np.ndarray, cu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """a_k: term change when one carrier of k moves seen→unseen; b_k: unseen→seen.
        (Values where the move is impossible, e.g. c_s(k) = 0 for a_k, are never used.)"""
        base = self.table[cs, cu]
        a = self.table[np.maximum(cs - 1, 0), cu + 1] - base
        b = self.table[cs + 1, np.maximum(cu - 1, 0)] - base
        return a, b


def scale(n_seen: int, n_unseen: int, m: int, alpha: float = DEFAULT_ALPHA) -> float:
    """1 / (T_s^α T_u^(1-α)): converts Σ_k c_s^α c_u^(1-α) into C_α."""
    return 1.0 / ((n_seen * m) ** alpha * (n_unseen * m) ** (1.0 - alpha))


def divergence_from_counts(terms: CountTerms, cs: np.ndarray, cu: np.ndarray, n_seen: int, n_unseen: int, m: int) -> np.ndarray:
    """D from compound count vectors (any leading batch axes)."""
    if n_seen == 0 or n_unseen == 0:
        return np.ones(cs.shape[:-1])
    return 1.0 - terms.sum_terms(cs, cu) * scale(n_seen, n_unseen, m, terms.alpha)


def move_gains(terms: CountTerms, compound_matrix: np.ndarray, seen_idx: np.ndarray, unseen_idx: np.ndarray,
               cs: np.ndarray, cu: np.ndarray) -> np.ndarray:
    """Change of Σ_k c_s^α c_u^(1-α) for every swap (seen_idx[i] → unseen, unseen_idx[j] → seen).

    Batched: seen_idx (B, k), unseen_idx (B, N−k), cs/cu (B, K) → (B, k, N−k).
    Incremental: O(k·(N−k)·m) work per batch member instead of recomputing D per move.
    """
    a, b = terms.deltas(cs, cu)  # (B, K)
    ms = compound_matrix[seen_idx]  # (B, k, K)
    mu = compound_matrix[unseen_idx]  # (B, u, K)
    gain_s = np.matmul(ms, a[:, :, None])[:, :, 0]
    gain_u = np.matmul(mu, b[:, :, None])[:, :, 0]
    shared = np.matmul(ms * (a + b)[:, None, :], mu.transpose(0, 2, 1))
    return gain_s[:, :, None] + gain_u[:, None, :] - shared

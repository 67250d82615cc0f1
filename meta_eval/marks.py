"""One rule for every metric-against-metric mark: a two-sided test whose interval says the same.

See `docs/meta_eval.md`, "Marks and intervals". Given N resampled (or permuted) values of a
difference d = stat_A - stat_B, with c_le = #(d <= 0) and c_ge = #(d >= 0):

* p = min(1, 2 * (min(c_le, c_ge) + 1) / (N + 1)), the two-sided Monte-Carlo p-value with the
  (N + 1) rule (Davison & Hinkley 1997, §4.4.1: p = (1 + #)/(N + 1), reject at level a when p <= a);
* the interval is [d_(k), d_(N+1-k)] with k = floor(a * (N + 1) / 2), the order statistics the
  same rule inverts to. d_(k) > 0 exactly when c_le + 1 <= k, and d_(N+1-k) < 0 exactly when
  c_ge + 1 <= k, so "significant" (p <= a) and "the interval excludes 0" are one statement.

With a multiple-comparison correction (Holm 1979, or Benjamini & Hochberg 1995) over the pairs of
one block, each pair is tested at its effective level a * p / p_adjusted (p_adjusted <= a exactly
when p <= that level), and its interval is drawn at that level, so the two still agree.
Undefined comparisons (a constant metric: no resample has both correlations) get no p-value,
no interval and no mark.
"""

from __future__ import annotations

import math

import numpy as np

from meta_eval.results import Interval, PairComparison

CORRECTIONS = ("none", "holm", "bh")
CORRECTION_NAMES = {"none": "none", "holm": "Holm (1979) step-down", "bh": "Benjamini-Hochberg (1995) FDR"}
FEW_UNITS = 30  # below this many resampled units a resampling interval means little (warned)
MANY_PAIRS = 10  # above this many pairs tested at alpha without correction, warn about false marks


def order_rank(alpha: float, n: int) -> int:
    """k = floor(alpha * (n + 1) / 2): the order statistic of the two-sided (1 - alpha) interval."""
    return int(math.floor(alpha * (n + 1) / 2 + 1e-9))


def counts(diff: np.ndarray) -> tuple[int, int, int]:
    """(N finite values, c_le = #(d <= 0), c_ge = #(d >= 0))."""
    d = diff[np.isfinite(diff)]
    return len(d), int((d <= 0).sum()), int((d >= 0).sum())


def two_sided_p(diff: np.ndarray) -> float | None:
    """min(1, 2 (min(c_le, c_ge) + 1) / (N + 1)); None when no value is finite (undefined)."""
    n, c_le, c_ge = counts(diff)
    if n == 0:
        return None
    return min(1.0, 2 * (min(c_le, c_ge) + 1) / (n + 1))


def order_interval(diff: np.ndarray, alpha: float) -> Interval:
    """[d_(k), d_(N+1-k)], k = floor(alpha (N + 1) / 2); NaN bounds when k < 1 (too few values)."""
    d = np.sort(diff[np.isfinite(diff)])
    k = order_rank(alpha, len(d))
    if k < 1:
        return Interval(math.nan, math.nan, 1 - alpha)
    return Interval(float(d[k - 1]), float(d[len(d) - k]), 1 - alpha)


def direction(diff: np.ndarray, alpha: float) -> int:
    """+1 when A is significantly better (c_le + 1 <= k), -1 when B is, 0 otherwise."""
    n, c_le, c_ge = counts(diff)
    k = order_rank(alpha, n)
    if n and c_le + 1 <= k:
        return 1
    if n and c_ge + 1 <= k:
        return -1
    return 0


def adjust(p_values: list[float | None], method: str) -> list[float | None]:
    """Holm or Benjamini-Hochberg adjusted p-values over the defined ones (None stays None)."""
    if method not in CORRECTIONS:
        raise ValueError(f"correction {method!r}: use one of {', '.join(CORRECTIONS)}")
    defined = [(p, i) for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = list(p_values)
    m = len(defined)
    if method == "none" or not m:
        return out
    order = sorted(defined)
    if method == "holm":
        running = 0.0
        for rank, (p, i) in enumerate(order):
            running = max(running, min(1.0, (m - rank) * p))
            out[i] = running
    else:
        running = 1.0
        for rank in range(m - 1, -1, -1):
            p, i = order[rank]
            running = min(running, min(1.0, m * p / (rank + 1)))
            out[i] = running
    return out


def effective_alpha(alpha: float, p: float | None, p_adjusted: float | None) -> float:
    """The per-pair level of a corrected test: alpha * p / p_adjusted (alpha when uncorrected)."""
    if p is None or p_adjusted is None or p_adjusted <= 0:
        return alpha
    return alpha * p / p_adjusted


def block_warnings(n_units: int, n_pairs: int, correction: str, alpha: float, unit: str) -> tuple[str, ...]:
    """Warnings printed above a block's table: too few units, many pairs without correction."""
    out = []
    if n_units < FEW_UNITS:
        out.append(f"only {n_units} {unit}s are resampled: with fewer than {FEW_UNITS} the intervals and "
                   "p-values are rough; read the marks as indications")
    if correction == "none" and n_pairs > MANY_PAIRS:
        out.append(f"{n_pairs} pairs are tested at alpha {alpha:g} each: about {n_pairs * alpha:.1f} marks are "
                   "expected by chance alone; pass --correction holm (or bh)")
    return tuple(out)


def pair_comparisons(names, point, test: str, alpha: float, correction: str, p_of, interval_of, n_of,
                     metric_ci=None, sided: str = "two-sided") -> tuple[PairComparison, ...]:
    """Both directions of every metric pair: p_of(i, j) -> p or None (undefined), adjusted over
    the block's pairs; interval_of(i, j, level_alpha) -> Interval of stat_i - stat_j at the
    pair's effective level; the mark is read off that interval (above 0: i better, below: j)."""
    m = len(names)
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    raw = [p_of(i, j) for i, j in pairs]
    adjusted = adjust(raw, correction)
    out = []
    for (i, j), p, p_adj in zip(pairs, raw, adjusted):
        defined = p is not None and math.isfinite(point[i]) and math.isfinite(point[j])
        level_alpha = effective_alpha(alpha, p, p_adj) if correction != "none" else alpha
        ci = interval_of(i, j, level_alpha) if defined else Interval(math.nan, math.nan, 1 - level_alpha)
        up = bool(defined and ci.low > 0)
        down = bool(defined and ci.high < 0)
        for x, y, sig, ci_xy in ((i, j, up, ci), (j, i, down, Interval(-ci.high, -ci.low, ci.level))):
            out.append(PairComparison(
                a=names[x], b=names[y], corr_a=float(point[x]), corr_b=float(point[y]),
                diff=float(point[x] - point[y]), test=test, significant=sig, p_value=p,
                ci_a=metric_ci[x] if metric_ci else None, ci_b=metric_ci[y] if metric_ci else None,
                ci_diff=ci_xy, n_valid=n_of(i, j), sided=sided, alpha=alpha,
                p_adjusted=p_adj if correction != "none" else None, alpha_effective=level_alpha,
                defined=defined))
    return tuple(out)

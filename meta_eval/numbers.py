"""Scores near the ends of float64's range, computed without overflow (`docs/meta_eval.md`,
"Numbers at the ends of float64").

Every statistic of `meta_eval` is unchanged when a score column is multiplied by a positive
number (correlations, ranks, KS, preference labels, win fractions, the permutation and
bootstrap tests), and a system mean scales with its column. Multiplying by a power of two,
2**-k, is exact in binary floating point unless a value falls below the normal range. A column
whose largest magnitude is outside [2**-10, 2**512] is brought to one in [0.5, 1) before any
sum: a sum, a mean, a variance or a difference of scores near 1e308 stays finite, and the
per-system means, rounded to 12 decimals so that equal means tie, keep the order of scores of
1e-15 (which would all round to 0). Columns inside that range are left as they are.

A mean or an interval brought back to the column's units with `unscaled` is at most the
column's largest magnitude, so it is finite; a difference of two means may exceed 1.8e308 and
comes back infinite (it is beyond float64), never as a wrong finite number.
"""

from __future__ import annotations

import numpy as np

#: a column whose largest magnitude lies in [LOW, HIGH] is left as it is (k = 0), so ordinary scores
#: give bit-for-bit the numbers they always gave: sums of up to 2**500 such values do not overflow,
#: and a mean rounded to 12 decimals keeps at least 9 significant digits
LOW, HIGH = 2.0 ** -10, 2.0 ** 512


def exponent(values, axis=None) -> np.ndarray | int:
    """k with max |finite value| * 2**-k in [0.5, 1) when that maximum lies outside [LOW, HIGH],
    else 0 (also where no value is finite and non-zero). With `axis`, one k per column along that
    axis (e.g. axis=0: per column of a 2-D array)."""
    v = np.abs(np.asarray(values, dtype=float))
    v = np.where(np.isfinite(v), v, 0.0)
    top = v.max(axis=axis, initial=0.0)
    k = np.where((top > 0) & ((top < LOW) | (top > HIGH)), np.frexp(top)[1], 0)
    return k if axis is not None else int(k)


def scaled(values, axis=None) -> tuple[np.ndarray, np.ndarray | int]:
    """(values * 2**-k, k): the values with their largest finite magnitude in [0.5, 1), per
    column with `axis=0`; NaN and infinities stay as they are."""
    v = np.asarray(values, dtype=float)
    k = exponent(v, axis)
    return np.ldexp(v, -np.asarray(k) if axis is not None else -k), k


def conditioned(values, axis=None) -> np.ndarray:
    """`scaled` without the exponent: for statistics that do not depend on the scale."""
    return scaled(values, axis)[0]


def centred(values) -> np.ndarray:
    """Finite values minus their median, scaled (`conditioned` before and after): the difference
    of two scores within a factor of two of each other is exact in floating point (Sterbenz), so
    scores that differ only in their last bits (1 + 2**-52 beside 1) keep those differences
    instead of losing them to the rounding of a mean near 1. For Pearson's r, which does not
    depend on shift or scale."""
    v = conditioned(values)
    return conditioned(v - np.median(v))


def unscaled(values, k) -> np.ndarray:
    """Values computed on `scaled` numbers, back in the column's units (inf beyond float64)."""
    with np.errstate(over="ignore"):
        return np.ldexp(np.asarray(values, dtype=float), k)


def finite_mean(values) -> float:
    """Mean of the finite values without overflow (NaN when there is none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return float("nan")
    s, k = scaled(v)
    return float(unscaled(s.mean(), k))

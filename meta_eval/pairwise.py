"""Pairwise agreement of a metric with humans, as the WMT metrics task now ranks metrics
(`docs/pairwise_accuracy.md`):

* soft pairwise accuracy (SPA; Thompson et al. 2024, WMT24), system level: for every pair of
  systems (i, j), the one-sided p-value that i is better than j under a paired permutation test
  over the units, once for the humans and once for the metric;
  SPA = mean over pairs of 1 - |p_human(i, j) - p_metric(i, j)|  (Eq. 1 of the doc);
* tie-calibrated pairwise accuracy (acc_eq; Deutsch et al. 2023), segment level: over the pairs
  of rows that share a unit (the same input given to two systems), the share where metric and
  humans agree, a tie agreeing only with a tie, the metric's tie being |m_a - m_b| <= epsilon
  with epsilon chosen to maximise the accuracy (Eqs. 2-3); per unit, then averaged over units
  as WMT24 does (Eq. 4), or over all pairs pooled (Eq. 5).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from meta_eval.numbers import conditioned, scaled, unscaled

MAX_PAIRS = 5_000_000  # acc_eq over more row pairs than this is not computed (NaN): ~40 MB per array
EXACT_UNITS = 12  # up to this many units the permutation test enumerates all 2^n sign flips
_SALT = 0x5350  # separates the SPA permutation stream from other seeded streams


def flip_signs(n_units: int, trials: int, seed: int) -> tuple[np.ndarray, bool]:
    """(signs, exact): every one of the 2^n sign vectors when n <= EXACT_UNITS, else `trials`
    seeded random ones (+1 keeps a unit's pair as it is, -1 swaps the two systems there)."""
    if n_units <= EXACT_UNITS:
        return np.array(list(itertools.product((1.0, -1.0), repeat=n_units))).reshape(-1, n_units), True
    rng = np.random.default_rng(np.random.SeedSequence([seed, _SALT]))
    return np.where(rng.random((trials, n_units)) < 0.5, -1.0, 1.0), False


PAIR_CELLS = 1 << 22  # resampled differences held at once: 32 MiB, whatever the number of systems


def pair_chunks(n_pairs: int, n_draws: int) -> list[slice]:
    """Slices of the pairs whose (draws x pairs) differences hold at most `PAIR_CELLS` values, so
    the memory follows systems x draws and the pairs themselves, not pairs x draws."""
    width = max(1, PAIR_CELLS // max(1, n_draws))
    return [slice(start, min(start + width, n_pairs)) for start in range(0, n_pairs, width)]


def one_sided_p(grid: np.ndarray, signs: np.ndarray, exact: bool) -> np.ndarray:
    """(systems, systems) P[i, j]: one-sided permutation p-value of "i is better than j" on a
    (units x systems) grid, the statistic being the mean per-unit difference d = x_i - x_j:
    exact: #{s : mean(s * d) >= mean(d)} / 2^n; sampled: (1 + #{...}) / (T + 1)."""
    n_sys = grid.shape[1]
    first, second = np.triu_indices(n_sys, k=1)
    upper, lower = np.zeros(len(first), np.int64), np.zeros(len(first), np.int64)
    for part in pair_chunks(len(first), max(len(signs), len(grid))):  # (trials x pairs) a slice at a time
        diffs = grid[:, first[part]] - grid[:, second[part]]  # (units, pairs)
        observed = diffs.mean(axis=0)
        null = signs @ diffs / len(grid)  # (trials, pairs)
        slack = 1e-12 * np.maximum(1.0, np.abs(observed))  # equal means in another summation order
        upper[part] = (null >= observed - slack).sum(axis=0)  # i better than j
        lower[part] = (null <= observed + slack).sum(axis=0)  # j better than i (the flips are symmetric)
    if exact:
        p_ij, p_ji = upper / len(signs), lower / len(signs)
    else:
        p_ij, p_ji = (1 + upper) / (len(signs) + 1), (1 + lower) / (len(signs) + 1)
    out = np.full((n_sys, n_sys), np.nan)
    out[first, second], out[second, first] = p_ij, p_ji
    return out


def soft_pairwise_accuracy(metric: np.ndarray, human: np.ndarray, trials: int = 1000, seed: int = 0) -> float:
    """SPA of a metric on complete (units x systems) grids of the metric and the human scores
    (the same units and systems in both); the same sign flips serve both. NaN under 2 systems."""
    metric, human = np.asarray(metric, float), np.asarray(human, float)
    if metric.shape != human.shape or metric.ndim != 2:
        raise ValueError(f"metric and human grids differ in shape: {metric.shape} vs {human.shape}")
    if metric.shape[1] < 2 or metric.shape[0] < 1:
        return math.nan
    if metric.shape[0] > EXACT_UNITS and trials < 1:
        raise ValueError(f"soft pairwise accuracy over {metric.shape[0]} units needs trials >= 1, got {trials}")
    metric, human = conditioned(metric), conditioned(human)  # differences of scores near 1e308 stay finite
    signs, exact = flip_signs(metric.shape[0], trials, seed)
    first, second = np.triu_indices(metric.shape[1], k=1)
    p_metric = one_sided_p(metric, signs, exact)[first, second]
    p_human = one_sided_p(human, signs, exact)[first, second]
    return float(np.mean(1.0 - np.abs(p_human - p_metric)))


def unit_pairs(groups, with_group: bool = False):
    """Indices (a, b), a < b, of every pair of rows in the same group; with `with_group`, also
    each pair's group as a code 0..G-1 (a, b, group)."""
    codes = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)[1].reshape(-1)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    firsts, seconds, owners = [], [], []
    for members in np.split(order, bounds):
        a, b = np.triu_indices(len(members), k=1)
        firsts.append(members[a])
        seconds.append(members[b])
        owners.append(np.full(len(a), codes[members[0]] if len(members) else 0, dtype=int))
    if not firsts:
        empty = np.empty(0, int)
        return (empty, empty, empty) if with_group else (empty, empty)
    pairs = np.concatenate(firsts), np.concatenate(seconds)
    return (*pairs, np.concatenate(owners)) if with_group else pairs


AVERAGING = ("item", "pool")  # tie-calibrated accuracy: WMT24's mean over items, or all pairs pooled


def tie_calibrated_accuracy(metric, human, groups=None, average: str = "item") -> tuple[float, float]:
    """(acc_eq, epsilon) over the pairs of rows sharing a group (`groups`: the item, i.e. the
    document or segment, of each row; None: every pair of rows, one item).

    For one item, acc_eq(eps) = (C(eps) + T_hm(eps)) / N (Eq. 2), C the pairs both order the same
    way with the metric's difference above eps, T_hm the pairs both tie (human difference 0,
    metric difference at most eps), N the item's pairs. `average="item"` (WMT24's metrics task,
    the default) averages that over the items with at least one pair (Eq. 4); `"pool"` counts
    all pairs as one item (Eq. 5). One eps serves every item; it ranges over 0 and every
    |metric difference| (Eq. 3), and the smallest eps of the largest accuracy is returned.
    (NaN, NaN) without pairs, or with more than `MAX_PAIRS`."""
    if average not in AVERAGING:
        raise ValueError(f"unknown averaging {average!r} (use one of {AVERAGING})")
    # a power-of-two scale (`meta_eval.numbers`): differences of scores near 1e308 stay finite,
    # and epsilon comes back in the metric's units
    (metric, k_metric), human = scaled(metric), conditioned(human)
    sizes = np.unique(np.asarray(groups, dtype=object).astype(str), return_counts=True)[1] if groups is not None \
        else np.array([len(metric)])
    if int((sizes * (sizes - 1) // 2).sum()) > MAX_PAIRS:
        return math.nan, math.nan  # e.g. a large dump without documents: every row paired with every row
    if groups is None:
        a, b = np.triu_indices(len(metric), k=1)
        item = np.zeros(len(a), int)
    else:
        a, b, item = unit_pairs(groups, with_group=True)
    if not len(a):
        return math.nan, math.nan
    dm, dh = metric[a] - metric[b], human[a] - human[b]
    gap = np.abs(dm)
    human_tie = dh == 0
    agrees = ~human_tie & (np.sign(dm) == np.sign(dh))  # counts while the metric's gap exceeds eps
    candidates = np.unique(np.concatenate([[0.0], gap]))
    order = np.argsort(gap, kind="stable")
    k = np.searchsorted(gap[order], candidates, side="right")  # pairs with gap <= eps
    if average == "pool" or groups is None:
        # integer counts: the accuracy of every eps is exact, so is the first maximum
        ties_below = np.concatenate([[0], np.cumsum(human_tie[order])])  # human ties among the k smallest gaps
        agree_below = np.concatenate([[0], np.cumsum(agrees[order])])
        correct = ties_below[k] + (agree_below[-1] - agree_below[k])
        best = int(np.argmax(correct))  # the first maximum: the smallest epsilon
        return float(correct[best] / len(a)), float(unscaled(candidates[best], k_metric))
    # per item: a pair of an item with N pairs weighs 1/N; the mean over items of (C + T_hm) / N
    # is (sum of agreeing weights above eps + sum of tie weights at or below eps) / items
    pairs_per_item = np.bincount(item)
    weight = 1.0 / pairs_per_item[item]
    items = int(np.count_nonzero(pairs_per_item))
    ties_below = np.concatenate([[0.0], np.cumsum((human_tie * weight)[order])])
    agree_below = np.concatenate([[0.0], np.cumsum((agrees * weight)[order])])
    accuracy = (ties_below[k] + (agree_below[-1] - agree_below[k])) / items
    # the first eps within rounding of the maximum (sums of 1/N in another order differ in the last bits)
    best = int(np.flatnonzero(accuracy >= accuracy.max() - 1e-12)[0])
    # its value from integer counts per item, so that a perfect metric scores exactly 1
    eps = candidates[best]
    hits = np.where(gap <= eps, human_tie, agrees).astype(int)
    present = pairs_per_item > 0
    shares = np.bincount(item, weights=hits)[present] / pairs_per_item[present]
    return float(math.fsum(shares) / items), float(unscaled(eps, k_metric))

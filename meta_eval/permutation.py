"""PERM-BOTH: the permutation test of Deutsch, Dror & Roth (TACL 2021) for two metrics' system-level
correlations with the humans, as the WMT metrics task uses it (Freitag et al. 2022, 2023).

See `docs/meta_eval.md`, "PERM-BOTH". Scores form (system x input) matrices: X for metric A, Y for
metric B, Z for the humans (cell = mean over the rows of that system and doc_id). X and Y are
first standardised (z-scores over their defined cells), since the two metrics have different
scales. Under H0 (A and B agree with the humans equally) the two metrics' scores of any cell are
exchangeable, so each trial swaps X and Y independently in every cell with probability 1/2 and
recomputes delta = r(X, Z) - r(Y, Z), r = the correlation (or pairwise accuracy) of per-system
means over the inputs. Two-sided p = (1 + #(|delta_t| >= |delta|)) / (N + 1).

The interval: the swap distribution is symmetric about 0, so the test rejects at level a exactly
when |delta| > q, q = the m-th largest |delta_t| with m = floor(a (N + 1)); the report shows
delta +/- q, which excludes 0 exactly when the test rejects (`meta_eval.marks` convention).
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from meta_eval import marks
from meta_eval.correlation import MEAN_DECIMALS, correlate
from meta_eval.numbers import conditioned
from meta_eval.results import Interval, MetricInterval, SignificanceBlock

VERSION = "1"
TRIALS = 1000


def cell_means(values: np.ndarray, doc, system) -> tuple[np.ndarray, list, list]:
    """(columns, systems, inputs) means per (system, doc_id) cell, NaN where a system lacks an input."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    sys_codes, systems = pd.factorize(pd.Series(np.asarray(system, dtype=object)), sort=True)
    doc_codes, docs = pd.factorize(pd.Series(np.asarray(doc, dtype=object)), sort=True)
    sums = np.zeros((values.shape[1], len(systems), len(docs)))
    counts = np.zeros((len(systems), len(docs)))
    for c in range(values.shape[1]):
        np.add.at(sums[c], (sys_codes, doc_codes), values[:, c])
    np.add.at(counts, (sys_codes, doc_codes), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / np.where(counts > 0, counts, np.nan), list(systems), list(docs)


def standardise(cells: np.ndarray) -> np.ndarray:
    """z-scores over the defined cells (a constant matrix stays 0)."""
    mean = np.nanmean(cells)
    std = np.nanstd(cells)
    return (cells - mean) / std if std > 0 else cells - mean


def system_statistic(cells: np.ndarray, human_means: np.ndarray, method: str, variant: str = "b") -> float:
    """r of the per-system means (over the inputs each system has) with the human means."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a system without any input: NaN mean, left out by correlate
        means = np.round(np.nanmean(cells, axis=-1), MEAN_DECIMALS)
    return correlate(means, human_means, method, variant)


def trial_masks(shape: tuple[int, int], n_trials: int, seed: int):
    """The swap masks, one (systems, inputs) boolean array per trial, from `default_rng(seed)`."""
    rng = np.random.default_rng(seed)
    for _ in range(n_trials):
        yield rng.random(shape) < 0.5


SIGN_MATRIX_UNITS = 256  # above this many systems, pairwise accuracy and Kendall per trial in O(n log n)


def batched_statistic(means: np.ndarray, human_means: np.ndarray, method: str, variant: str = "b") -> np.ndarray:
    """`correlate(means[t], human_means)` for every row t: Pearson and Spearman through scipy with
    axis=1, pairwise accuracy and Kendall tau-b through sign matrices, tau-c one row at a time."""
    means = np.round(means, MEAN_DECIMALS)
    keep = np.isfinite(human_means) & np.isfinite(means).all(axis=0)
    x, y = means[:, keep], human_means[keep]
    constant = (x == x[:, :1]).all(axis=1) | bool((y == y[0]).all()) if x.shape[1] else np.ones(len(x), bool)
    if x.shape[1] < 2 or (method == "kendall" and variant != "b") or \
            (method in ("pairwise_accuracy", "kendall") and x.shape[1] > SIGN_MATRIX_UNITS):
        return np.array([correlate(row, y, method, variant) for row in x])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method in ("pairwise_accuracy", "kendall"):
            upper = np.triu_indices(x.shape[1], k=1)
            sx = np.sign(x[:, :, None] - x[:, None, :])[:, upper[0], upper[1]]
            sy = np.sign(y[:, None] - y[None, :])[upper]
            if method == "pairwise_accuracy":
                values = (sx == sy).mean(axis=1)
            else:  # tau-b = sum(sx sy) / sqrt(#pairs untied in x * #pairs untied in y)
                values = (sx * sy).sum(axis=1) / np.sqrt((sx != 0).sum(axis=1) * (sy != 0).sum())
        else:
            if method == "spearman":
                x, y = stats.rankdata(x, axis=1), stats.rankdata(y)
            values = stats.pearsonr(x, np.broadcast_to(y, x.shape), axis=1).statistic
    return np.where(constant, np.nan, values)


def perm_both_deltas(x: np.ndarray, y: np.ndarray, z: np.ndarray, method: str = "spearman", variant: str = "b",
                     n_trials: int = TRIALS, seed: int = 0, block: int = 250) -> tuple[float, np.ndarray]:
    """(delta, the N swapped deltas) for standardised cell matrices x, y and human cells z; the
    trials' masks come from `trial_masks` in order and are evaluated `block` at a time."""
    human_means = np.round(np.nanmean(z, axis=-1), MEAN_DECIMALS)
    delta = system_statistic(x, human_means, method, variant) - system_statistic(y, human_means, method, variant)
    masks = trial_masks(x.shape, n_trials, seed)
    # the sign matrices of pairwise accuracy and Kendall hold block x systems^2 values: keep them near 2**24
    block = max(1, min(block, (1 << 24) // max(1, min(x.shape[0], SIGN_MATRIX_UNITS) ** 2)))
    out = []
    for start in range(0, n_trials, block):
        swap = np.stack([next(masks) for _ in range(min(block, n_trials - start))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            xs = np.nanmean(np.where(swap, y, x), axis=-1)
            ys = np.nanmean(np.where(swap, x, y), axis=-1)
        out.append(batched_statistic(xs, human_means, method, variant)
                   - batched_statistic(ys, human_means, method, variant))
    return delta, np.concatenate(out) if out else np.empty(0)


def perm_p(delta: float, deltas: np.ndarray) -> float | None:
    """(1 + #(|delta_t| >= |delta|)) / (N + 1); None when delta is undefined."""
    if not math.isfinite(delta):
        return None
    finite = deltas[np.isfinite(deltas)]
    return (1 + int((np.abs(finite) >= abs(delta) - 1e-12).sum())) / (len(finite) + 1)


def perm_interval(delta: float, deltas: np.ndarray, alpha: float) -> Interval:
    """delta +/- q, q = the m-th largest |delta_t|, m = floor(alpha (N + 1)) (NaN when m < 1)."""
    size = np.sort(np.abs(deltas[np.isfinite(deltas)]))[::-1]
    m = int(math.floor(alpha * (len(size) + 1) + 1e-9))
    if m < 1 or not math.isfinite(delta):
        return Interval(math.nan, math.nan, 1 - alpha)
    q = float(size[m - 1]) + 1e-12  # the test counts |delta_t| >= |delta| within 1e-12
    return Interval(float(delta - q), float(delta + q), 1 - alpha)


def compare_metrics(metrics: np.ndarray, names: Sequence[str], human: np.ndarray, human_name: str,
                    method: str = "spearman", variant: str = "b", doc=None, system=None,
                    n_trials: int = TRIALS, seed: int = 0, alpha: float = 0.05,
                    correction: str = "none") -> SignificanceBlock:
    """PERM-BOTH for every metric pair at system level; metrics (n, M) oriented higher-is-better."""
    from scoring.errors import UsageError
    from scoring.signature import Signature, library_versions

    if doc is None or system is None:
        raise UsageError("PERM-BOTH permutes (system, doc_id) cells: doc_id and system columns are required")
    metrics = np.asarray(metrics, dtype=float)
    if metrics.ndim == 1:
        metrics = metrics[:, None]
    names = list(names)
    # scaled by powers of two (`meta_eval.numbers`): cell sums of scores near 1e308 stay finite, and the
    # means are rounded relative to each column's largest value
    metrics, human = conditioned(metrics, axis=0), conditioned(human)
    cells, systems, docs = cell_means(np.column_stack([metrics, human]), doc, system)
    z = cells[-1]
    human_means = np.round(np.nanmean(z, axis=-1), MEAN_DECIMALS)
    std = [standardise(cells[j]) for j in range(len(names))]
    point = np.array([system_statistic(cells[j], human_means, method, variant) for j in range(len(names))])
    results: dict[tuple[int, int], tuple[float, np.ndarray]] = {}

    def run(i, j):
        if (i, j) not in results:
            results[i, j] = perm_both_deltas(std[i], std[j], z, method, variant, n_trials, seed)
        return results[i, j]

    def p_of(i, j):
        if not (math.isfinite(point[i]) and math.isfinite(point[j])):
            return None
        return perm_p(*run(i, j))

    comparisons = marks.pair_comparisons(
        names, point, "perm_both", alpha, correction, p_of=p_of,
        interval_of=lambda i, j, a: perm_interval(point[i] - point[j], run(i, j)[1], a),
        n_of=lambda i, j: int(np.isfinite(run(i, j)[1]).sum()) if (i, j) in results else 0)
    intervals = tuple(MetricInterval(name, float(point[j]), Interval(math.nan, math.nan))
                      for j, name in enumerate(names))
    sig = Signature("perm-both", VERSION, {
        "level": "system", "method": method, "kendall_variant": f"tau-{variant}", "trials": n_trials, "seed": seed,
        "cells": f"{len(systems)} systems x {len(docs)} inputs", "standardise": "z-score per metric",
        "p": "two-sided (1+#(|d_t|>=|d|))/(N+1)", "ci_diff": "d +/- q, q = m-th largest |d_t|, m=floor(alpha(N+1))",
        "alpha": alpha, "correction": correction, **library_versions("scipy", "numpy")})
    n_pairs = len(names) * (len(names) - 1) // 2
    return SignificanceBlock(human=human_name, level="system", method=method, test="perm_both", alpha=alpha,
                             n_rows=len(human), metrics=tuple(names), intervals=intervals, comparisons=comparisons,
                             signature=str(sig), resamples=n_trials, correction=correction, n_units=len(systems),
                             warnings=marks.block_warnings(len(systems), n_pairs, correction, alpha, "system"))

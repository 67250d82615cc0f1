"""Metric-human correlations at sample, document and system level, and WMT DARR Kendall-like tau.

See `docs/meta_eval.md`, "Correlations" (BARTScore §4.1.2, CTRLEval §4.4):
* sample level: one correlation over all rows;
* document level (SummEval convention): per `doc_id` over its systems, then averaged
  (documents whose correlation is undefined, e.g. a constant column, are skipped and counted);
* system level: per-system means of metric and human, then one correlation of the means, and
  the pairwise accuracy of the means (Kocmi et al. 2021; system level only);
* soft pairwise accuracy at system level and tie-calibrated pairwise accuracy at sample
  (segment) level, the WMT metrics task's measures (`meta_eval.pairwise`).
Every statistic comes from scipy (`pearsonr`, `spearmanr`, `kendalltau(variant=...)`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats

from meta_eval.numbers import centred, conditioned
from meta_eval.results import Correlation, DarrTau

RESAMPLED = ("pearson", "spearman", "kendall", "pairwise_accuracy")  # what significance tests can compare
#: the WMT metrics task's pairwise measures (meta_eval.pairwise, docs/pairwise_accuracy.md)
PAIRWISE = ("soft_pairwise_accuracy", "tie_calibrated_accuracy")
METHODS = RESAMPLED + PAIRWISE
SYSTEM_ONLY = ("pairwise_accuracy", "soft_pairwise_accuracy")  # O(n^2) in the units: system level only
SAMPLE_ONLY = ("tie_calibrated_accuracy",)  # pairs of rows that share a document
LEVELS = ("sample", "document", "system")


def correlate(x, y, method: str = "spearman", variant: str = "b") -> float:
    """One scipy correlation coefficient; NaN when undefined (fewer than 2 rows, constant input,
    a non-finite value for Pearson). Pearson runs on the columns centred on their medians and
    scaled by a power of two (`meta_eval.numbers.centred`), so scores near 1e308 do not overflow
    its sums of squares and scores that differ in their last bits keep their differences."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "pearson":
            if not (np.isfinite(x).all() and np.isfinite(y).all()):
                return float("nan")
            return float(stats.pearsonr(centred(x), centred(y)).statistic)
        if method == "spearman":
            return float(stats.spearmanr(x, y).statistic)
        if method == "kendall":
            return float(stats.kendalltau(x, y, variant=variant).statistic)
        if method == "pairwise_accuracy":
            return pairwise_accuracy(x, y)
    raise ValueError(f"unknown correlation method {method!r} (use one of {METHODS})")


def _tied_pairs(*columns) -> int:
    """Pairs of rows equal in every one of the columns."""
    codes = pd.MultiIndex.from_arrays(columns).factorize()[0] if len(columns) > 1 else pd.factorize(columns[0])[0]
    sizes = np.bincount(codes).astype(np.int64)
    return int((sizes * (sizes - 1) // 2).sum())


def pairwise_accuracy(x, y) -> float:
    """Share of unit pairs i < j where sign(x_i - x_j) = sign(y_i - y_j) (Kocmi et al. 2021, the WMT
    system-level pairwise accuracy); a tie matches only a tie. NaN under two units or with a
    non-finite value.

    From counts, in O(n log n) time and O(n) memory rather than n x n sign matrices: with P pairs,
    T_x, T_y the pairs tied in x, in y, T_xy in both, and C, D the concordant and discordant
    pairs, C + D = P - T_x - T_y + T_xy and C - D = tau_b sqrt((P - T_x)(P - T_y)) (scipy's
    Kendall tau-b), so the agreeing pairs are C + T_xy."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n = len(x)
    if n < 2 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return float("nan")
    pairs = n * (n - 1) // 2
    tied_x, tied_y, tied_both = _tied_pairs(x), _tied_pairs(y), _tied_pairs(x, y)
    untied = pairs - tied_x - tied_y + tied_both  # C + D
    if tied_x == pairs or tied_y == pairs:  # a constant side: no pair is concordant
        concordant = 0
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tau = stats.kendalltau(x, y, variant="b").statistic
        difference = tau * math.sqrt(float(pairs - tied_x) * float(pairs - tied_y))  # C - D
        concordant = int(round((untied + difference) / 2))
    return (concordant + tied_both) / pairs


def _clean(frame: pd.DataFrame, metric: str, human: str, extra: list[str], condition: bool = True) -> pd.DataFrame:
    """The named columns on rows where metric and human are finite and groups are present;
    metric and human scaled by a power of two (`meta_eval.numbers`: no overflow in sums and
    means, per-system means rounded relative to the column's largest value) unless `condition`
    is off (a statistic in the column's units)."""
    for col in [metric, human, *extra]:
        if col not in frame:
            raise KeyError(f"column {col!r} not in the score table")
    x = frame[metric].to_numpy(dtype=float)
    y = frame[human].to_numpy(dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    for col in extra:
        keep &= frame[col].notna().to_numpy()
    x, y = x[keep], y[keep]
    data = {metric: conditioned(x) if condition else x, human: conditioned(y) if condition else y}
    data.update({col: frame[col].to_numpy()[keep] for col in extra})
    return pd.DataFrame(data)


def _variant(method: str, variant: str) -> str | None:
    return f"tau-{variant}" if method == "kendall" else None


def sample_level(frame, metric, human, method="spearman", variant="b") -> Correlation:
    sub = _clean(frame, metric, human, [])
    return Correlation(metric, human, "sample", method, correlate(sub[metric], sub[human], method, variant),
                       int(len(sub)), _variant(method, variant))


def per_document(frame, metric, human, method="spearman", variant="b", doc_col="doc_id") -> pd.Series:
    """Correlation within each document (over its systems); NaN where undefined.

    When every document has the same number of rows, Pearson and Spearman run batched
    (`scipy.stats.rankdata(axis=1)` + `scipy.stats.pearsonr(axis=1)`); otherwise one scipy call
    per document.
    """
    sub = _clean(frame, metric, human, [doc_col])
    codes, docs = pd.factorize(sub[doc_col], sort=True)
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=len(docs))
    x = sub[metric].to_numpy(dtype=float)[order]
    y = sub[human].to_numpy(dtype=float)[order]
    if method in ("pearson", "spearman") and len(docs) and (sizes == sizes[0]).all() and sizes[0] >= 2:
        xs, ys = x.reshape(len(docs), -1), y.reshape(len(docs), -1)
        if method == "spearman":
            xs, ys = stats.rankdata(xs, axis=1), stats.rankdata(ys, axis=1)
        constant = (xs == xs[:, :1]).all(axis=1) | (ys == ys[:, :1]).all(axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = stats.pearsonr(xs, ys, axis=1).statistic
        values = np.where(constant, np.nan, values)
    else:
        bounds = np.cumsum(sizes)[:-1]
        values = [correlate(a, b, method, variant) for a, b in zip(np.split(x, bounds), np.split(y, bounds))]
    return pd.Series(np.asarray(values, dtype=float), index=docs)


def document_level(frame, metric, human, method="spearman", variant="b", doc_col="doc_id") -> Correlation:
    per_doc = per_document(frame, metric, human, method, variant, doc_col)
    valid = per_doc.dropna()
    value = float(valid.mean()) if len(valid) else float("nan")
    return Correlation(metric, human, "document", method, value, int(len(valid)), _variant(method, variant),
                       n_undefined=int(per_doc.isna().sum()))


MEAN_DECIMALS = 12


def system_means(frame, columns: list[str], system_col="system") -> pd.DataFrame:
    """Per-system means, rounded to `MEAN_DECIMALS` so that mathematically equal means tie
    whatever the summation order (rank correlations of means depend on ties). The statistics
    call it on columns scaled to a largest magnitude in [0.5, 1) (`_clean`), so the rounding is
    relative to the column: scores of 1e-15 keep their order, scores of 1e308 do not overflow."""
    return frame.groupby(system_col, sort=True)[columns].mean().round(MEAN_DECIMALS)


def system_level(frame, metric, human, method="spearman", variant="b", system_col="system") -> Correlation:
    sub = _clean(frame, metric, human, [system_col])
    means = system_means(sub, [metric, human], system_col)
    return Correlation(metric, human, "system", method, correlate(means[metric], means[human], method, variant),
                       int(len(means)), _variant(method, variant))


def soft_pairwise(frame, metric, human, doc_col="doc_id", system_col="system", trials=1000,
                  seed=0) -> Correlation:
    """SPA over the systems, on the documents every system has (`meta_eval.pairwise`)."""
    from meta_eval.pairwise import soft_pairwise_accuracy

    sub = _clean(frame, metric, human, [doc_col, system_col])
    grids = [sub.pivot_table(index=doc_col, columns=system_col, values=col, aggfunc="mean") for col in (metric, human)]
    complete = grids[0].notna().all(axis=1) & grids[1].notna().all(axis=1)
    metric_grid, human_grid = (g[complete].to_numpy(dtype=float) for g in grids)
    value = soft_pairwise_accuracy(metric_grid, human_grid, trials=trials, seed=seed)
    return Correlation(metric, human, "system", "soft_pairwise_accuracy", value, int(metric_grid.shape[1]))


def tie_calibrated(frame, metric, human, doc_col="doc_id", average="item") -> Correlation:
    """acc_eq over the pairs of rows that share a document (all pairs when there is no document
    column), per document then averaged (`average="item"`, WMT24) or pooled (`"pool"`), with its
    tie threshold epsilon (`meta_eval.pairwise`)."""
    from meta_eval.pairwise import tie_calibrated_accuracy

    grouped = doc_col in frame and frame[doc_col].notna().any()
    sub = _clean(frame, metric, human, [doc_col] if grouped else [], condition=False)  # epsilon: metric units
    value, epsilon = tie_calibrated_accuracy(sub[metric], sub[human], sub[doc_col] if grouped else None, average=average)
    return Correlation(metric, human, "sample", "tie_calibrated_accuracy", value, int(len(sub)), epsilon=epsilon)


def at_level(frame, metric, human, level, method="spearman", variant="b",
             doc_col="doc_id", system_col="system", trials=1000, seed=0, tie_average="item") -> Correlation:
    """One statistic at one level; `trials` and `seed` are SPA's permutations, `tie_average` the
    tie-calibrated accuracy's averaging ("item" or "pool")."""
    if method == "soft_pairwise_accuracy" and level == "system":
        return soft_pairwise(frame, metric, human, doc_col, system_col, trials=trials, seed=seed)
    if method == "tie_calibrated_accuracy" and level == "sample":
        return tie_calibrated(frame, metric, human, doc_col, average=tie_average)
    if level == "sample":
        return sample_level(frame, metric, human, method, variant)
    if level == "document":
        return document_level(frame, metric, human, method, variant, doc_col)
    if level == "system":
        return system_level(frame, metric, human, method, variant, system_col)
    raise ValueError(f"unknown level {level!r} (use one of {LEVELS})")


def darr_kendall(frame, metric, better_col="human_darr_better", pair_col="doc_id") -> DarrTau:
    """WMT DARR Kendall-like tau = (Concordant - Discordant) / (Concordant + Discordant).

    Each `pair_col` group holds one better (`better_col` == 1) and one worse (0) row; a pair is
    concordant when score(better) > score(worse); a metric tie counts as discordant (WMT19).
    """
    sub = _clean(frame, metric, better_col, [pair_col], condition=False)  # 0/1 stays 0/1; only signs count
    sides = sub.pivot_table(index=pair_col, columns=better_col, values=metric, aggfunc="first")
    if not {0.0, 1.0} <= set(sides.columns.astype(float)):
        raise ValueError(f"{better_col!r} must hold 1 (better) and 0 (worse) rows per {pair_col!r}")
    sides = sides.rename(columns=float).dropna(subset=[0.0, 1.0])
    concordant = int((sides[1.0] > sides[0.0]).sum())
    discordant = int(len(sides) - concordant)
    total = concordant + discordant
    tau = (concordant - discordant) / total if total else float("nan")
    return DarrTau(metric, float(tau), concordant, discordant, total)


def correlation_table(frame, metrics, humans, levels=LEVELS, methods=METHODS, variant="b",
                      doc_col="doc_id", system_col="system", trials=1000, seed=0,
                      tie_average="item") -> list[Correlation]:
    """One `Correlation` for every combination that applies.

    Levels whose grouping column is missing or empty are skipped (e.g. CTRLEval has no system).
    """
    rows = []
    for level in levels:
        group_col = {"document": doc_col, "system": system_col}.get(level)
        if group_col and (group_col not in frame or frame[group_col].isna().all()):
            continue
        for human in humans:
            for metric in metrics:
                for method in methods:
                    if method in SYSTEM_ONLY and level != "system" or method in SAMPLE_ONLY and level != "sample":
                        continue
                    rows.append(at_level(frame, metric, human, level, method, variant, doc_col, system_col,
                                         trials=trials, seed=seed, tie_average=tie_average))
    return rows

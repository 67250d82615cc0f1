"""The BARTScore paper's significance test: 80 % subsamples without replacement, win counting.

Procedure of the BARTScore repository's `analysis.py` (`sig_test_two`; see `docs/meta_eval.md`,
"The BARTScore subsample test"): a Python `random.Random(666)` shuffles the list of units
(documents) in place 1,000 times, each shuffle continuing from the previous order; each draw
keeps the first int(0.8 * n) units. On each draw both metrics' correlations with the human
column are computed; metric A wins the draw when its correlation is strictly higher. A is
significantly better than B when it wins more than 950 of the 1,000 draws, i.e. more than
(1 - alpha) * draws with alpha = 0.05.

Per level, as in the original:
* document: per-document Spearman (or the method asked), averaged over the drawn documents
  where neither metric nor the human column is constant (a pair of metrics skips a document
  when either metric is constant there);
* sample: one correlation over the drawn rows (the original's data-to-text and factuality sets
  hold one row per unit);
* darr: the WMT DARR Kendall-like tau over the drawn better/worse pairs;
* system (not in the original): per-system means over the drawn documents, then correlated.
Units are taken in order of first appearance in the table (the original's dictionary order).
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Sequence

import numpy as np
import pandas as pd

from meta_eval import marks
from meta_eval.correlation import MEAN_DECIMALS, correlate, per_document
from meta_eval.numbers import conditioned
from meta_eval.results import Interval, MetricInterval, SignificanceBlock

VERSION = "1"
DRAWS = 1000
FRACTION = 0.8
SEED = 666


def subsample_positions(n_units: int, draws: int = DRAWS, fraction: float = FRACTION, seed: int = SEED) -> np.ndarray:
    """(draws, int(fraction * n_units)) unit positions: the first part of a list shuffled in
    place by `random.Random(seed)` once per draw (shuffles accumulate, as in the original)."""
    rng = random.Random(seed)
    order = list(range(n_units))
    keep = int(fraction * n_units)
    out = np.empty((draws, keep), dtype=np.int64)
    for r in range(draws):
        rng.shuffle(order)
        out[r] = order[:keep]
    return out


def _first_appearance(values) -> np.ndarray:
    return pd.unique(pd.Series(np.asarray(values, dtype=object)))


def _document_tables(metrics, human, doc, method, variant):
    """Per-document correlations (D, M) in first-appearance order of the documents."""
    frame = pd.DataFrame({f"m{j}": metrics[:, j] for j in range(metrics.shape[1])})
    frame["h"] = human
    frame["doc_id"] = np.asarray(doc, dtype=object)
    docs = _first_appearance(doc)
    columns = [per_document(frame, f"m{j}", "h", method, variant).reindex(docs).to_numpy(dtype=float)
               for j in range(metrics.shape[1])]
    return np.column_stack(columns)


def _pairwise_document_means(table: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """(M, M): entry [i, j] = mean of metric i's per-document correlations over the chosen
    documents where both i and j are defined."""
    valid = np.isfinite(table[chosen]).astype(float)
    values = np.where(valid > 0, table[chosen], 0.0)
    total = values.T @ valid
    count = valid.T @ valid
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.where(count > 0, count, 1), np.nan)


def _system_statistics(metrics, human, doc, system, method, variant, positions):
    docs = _first_appearance(doc)
    doc_codes = pd.Index(docs).get_indexer(np.asarray(doc, dtype=object))
    sys_codes, _ = pd.factorize(pd.Series(np.asarray(system, dtype=object)), sort=True)
    values = np.column_stack([metrics, human])
    sums = np.zeros((len(docs), sys_codes.max() + 1, values.shape[1]))
    np.add.at(sums, (doc_codes, sys_codes), values)
    counts = np.zeros((len(docs), sys_codes.max() + 1))
    np.add.at(counts, (doc_codes, sys_codes), 1.0)
    out = np.full((len(positions), metrics.shape[1]), np.nan)
    for r, chosen in enumerate(positions):
        rows = counts[chosen].sum(axis=0)
        present = rows > 0
        means = np.round(sums[chosen].sum(axis=0)[present] / rows[present, None], MEAN_DECIMALS)
        for j in range(metrics.shape[1]):
            out[r, j] = correlate(means[:, j], means[:, -1], method, variant)
    return out


def _darr_signs(metrics, better, pair) -> np.ndarray:
    """(pairs, M) +1 where the better translation scores higher, else -1, first-appearance order."""
    frame = pd.DataFrame(metrics, columns=[f"m{j}" for j in range(metrics.shape[1])])
    frame["better"] = np.asarray(better, dtype=float)
    frame["pair"] = np.asarray(pair, dtype=object)
    order = _first_appearance(pair)
    wide = frame.pivot_table(index="pair", columns="better", values=list(frame.columns[:-2]), aggfunc="first")
    wide = wide.reindex(order).dropna()
    if not len(wide):
        from scoring.errors import InputError

        raise InputError("the DARR level needs one better (1) and one worse (0) row per pair")
    return np.column_stack([np.where(wide[(f"m{j}", 1.0)] > wide[(f"m{j}", 0.0)], 1.0, -1.0)
                            for j in range(metrics.shape[1])])


def compare_metrics(metrics: np.ndarray, names: Sequence[str], human: np.ndarray, human_name: str,
                    level: str = "document", method: str = "spearman", variant: str = "b", doc=None, system=None,
                    draws: int = DRAWS, fraction: float = FRACTION, seed: int = SEED,
                    alpha: float = 0.05, correction: str = "none") -> SignificanceBlock:
    """Every ordered pair of metric columns by the subsample test (see the module doc).

    metrics: (n, M) finite scores oriented so that higher is better. The intervals are the
    percentile intervals of each metric's correlation over the draws.
    """
    from scoring.errors import UsageError
    from scoring.signature import Signature, library_versions

    metrics = np.asarray(metrics, dtype=float)
    if metrics.ndim == 1:
        metrics = metrics[:, None]
    human = np.asarray(human, dtype=float)
    if level != "darr":  # scaled by powers of two (`meta_eval.numbers`): no overflow in sums; DARR keeps 0/1
        metrics, human = conditioned(metrics, axis=0), conditioned(human)
    names = list(names)
    m = metrics.shape[1]
    if level != "sample" and doc is None:
        raise UsageError(f"the subsample test at level {level!r} draws documents: a doc_id column is required")
    if level == "document":
        table = _document_tables(metrics, human, doc, method, variant)
        positions = subsample_positions(len(table), draws, fraction, seed)
        per_draw = np.full((draws, m), np.nan)
        diffs = np.zeros((draws, m, m))
        for r, chosen in enumerate(positions):
            pairwise = _pairwise_document_means(table, chosen)
            diffs[r] = pairwise - pairwise.T
            per_draw[r] = np.diag(pairwise)
        n_units = len(table)
        point = np.array([np.nanmean(table[:, j]) if np.isfinite(table[:, j]).any() else math.nan for j in range(m)])
    else:
        if level == "sample":
            positions = subsample_positions(len(human), draws, fraction, seed)
            per_draw = np.array([[correlate(metrics[rows, j], human[rows], method, variant) for j in range(m)]
                                 for rows in positions])
            point = np.array([correlate(metrics[:, j], human, method, variant) for j in range(m)])
            n_units = len(human)
        elif level == "system":
            if system is None:
                raise UsageError("system-level correlation needs a system column")
            n_units = len(_first_appearance(doc))
            positions = subsample_positions(n_units, draws, fraction, seed)
            per_draw = _system_statistics(metrics, human, doc, system, method, variant, positions)
            point = _system_statistics(metrics, human, doc, system, method, variant, np.arange(n_units)[None, :])[0]
        elif level == "darr":
            signs = _darr_signs(metrics, human, doc)
            n_units = len(signs)
            positions = subsample_positions(n_units, draws, fraction, seed)
            per_draw = np.stack([signs[rows].mean(axis=0) for rows in positions])
            point = signs.mean(axis=0)
        else:
            raise UsageError(f"unknown level {level!r} for the subsample test (use sample, document, system or darr)")
        diffs = per_draw[:, :, None] - per_draw[:, None, :]
    diffs = np.nan_to_num(diffs, nan=0.0)  # a draw where either is undefined: neither wins
    wins = (diffs > 0).sum(axis=0)
    threshold = (1 - alpha) * draws
    intervals = []
    for j, name in enumerate(names):
        col = per_draw[:, j][np.isfinite(per_draw[:, j])]
        low, high = np.percentile(col, [2.5, 97.5]) if len(col) else (math.nan, math.nan)
        intervals.append(MetricInterval(name, float(point[j]), Interval(float(low), float(high))))
    defined_pairs = np.isfinite(per_draw).any(axis=0)

    def p_of(i, j):
        if not (defined_pairs[i] and defined_pairs[j]):
            return None
        return min(draws - wins[i, j], draws - wins[j, i]) / draws

    comparisons = marks.pair_comparisons(
        names, point, "bartscore_subsample", alpha, correction, p_of=p_of,
        interval_of=lambda i, j, a: subsample_interval(diffs[:, i, j], a), n_of=lambda i, j: draws,
        metric_ci=[i.interval for i in intervals], sided="one-sided each way")
    comparisons = tuple(dataclasses.replace(c, wins=int(wins[names.index(c.a), names.index(c.b)]), draws=draws,
                                            p_value=None if c.p_value is None else
                                            (draws - wins[names.index(c.a), names.index(c.b)]) / draws)
                        for c in comparisons)
    sig = Signature("bartscore-subsample", VERSION, {
        "level": level, "method": method, "kendall_variant": f"tau-{variant}", "draws": draws, "fraction": fraction,
        "seed": seed, "rng": "python random.shuffle, cumulative", "units": n_units,
        "unit": {"sample": "row", "darr": "better/worse pair"}.get(level, "document"),
        "better": f"wins > {threshold:g} of {draws}", "correction": correction,
        "ci_diff": "order statistics k=draws-floor((1-alpha)draws)", **library_versions("scipy", "numpy")})
    return SignificanceBlock(human=human_name, level=level, method=method, test="bartscore_subsample", alpha=alpha,
                             n_rows=len(human), metrics=tuple(names), intervals=tuple(intervals),
                             comparisons=comparisons, signature=str(sig), resamples=draws, sided="one-sided each way",
                             correction=correction, n_units=n_units,
                             warnings=marks.block_warnings(n_units, m * (m - 1) // 2, correction, alpha,
                                                           {"sample": "row", "darr": "better/worse pair"}
                                                           .get(level, "document")))


def subsample_interval(diff: np.ndarray, alpha: float) -> Interval:
    """[d_(k), d_(D+1-k)], k = D - floor((1 - alpha) D): above 0 exactly when A wins more than
    (1 - alpha) D draws, below 0 exactly when B does (the paper's rule, each direction)."""
    d = np.sort(diff)
    k = len(d) - int(math.floor((1 - alpha) * len(d) + 1e-9))
    if k < 1 or k > len(d):
        return Interval(math.nan, math.nan, 1 - 2 * alpha)
    return Interval(float(d[k - 1]), float(d[len(d) - k]), 1 - 2 * alpha)

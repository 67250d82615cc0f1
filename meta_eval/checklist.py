"""The metric preference checklist (Ni'mah et al., ACL 2023; `docs/meta_eval.md`, "Checklist").

* quality groups Lo/Mod/Hi per human aspect (rating < 3, == 3, > 3, or the stored `*_cat`);
  an aspect marked binary (the CTRL-topic `relevance_bin`) maps 0 to Lo and 1 to Hi, as the
  checklist notebooks do (other 0/1 aspects, e.g. USR's Understandable, stay all Lo by the
  rating rule, as in the notebooks);
* aspect-level evaluation: two-sample KS statistic of a column between Lo-Hi, Lo-Mod, Hi-Mod,
  and the aspect-level preference label from the group means;
* Easy / Hard system pairs from the human ranking;
* system-level evaluation: KS between two systems' per-sample scores, averaged over pairs;
* system-level preference labels ("a<b", "b<a", "a=b") and preference similarity
  S(x, y) = (|x| + |y| - 2 Lev(x, y)) / (|x| + |y|) with the `Levenshtein` package;
* pairwise win fractions per `doc_id` (paper Fig. 7); transfer tables.
KS statistics come from `scipy.stats.ks_2samp` (two-sided).
"""

from __future__ import annotations

import warnings

import Levenshtein
import numpy as np
import pandas as pd
from scipy import stats

from meta_eval.correlation import correlate
from meta_eval.numbers import conditioned, finite_mean, scaled, unscaled
from meta_eval.results import (
    AspectLevel,
    ChecklistBlock,
    PreferenceLabels,
    PreferenceSimilarity,
    SystemKS,
    WinFractions,
)

GROUPS = ("lo", "mod", "hi")
BINARY = "binary"  # category source of a 0/1 aspect: 0 -> lo, 1 -> hi
_CAT_TO_GROUP = {"poor": "lo", "moderate": "mod", "high": "hi"}
CATEGORIES = tuple(_CAT_TO_GROUP)  # the stored quality categories


def quality_groups(frame: pd.DataFrame, aspect: str, cat_col: str | None = None) -> pd.Series:
    """'lo' / 'mod' / 'hi' per row: the stored category if given; for `cat_col` = BINARY 0 -> lo,
    1 -> hi; else rating <3, ==3, >3."""
    if cat_col == BINARY:
        rating = frame[aspect].to_numpy(dtype=float)
        bad = ~np.isin(rating, (0.0, 1.0)) & np.isfinite(rating)
        if bad.any():
            row = frame.index[np.flatnonzero(bad)[0]]
            raise ValueError(f"row {row}: binary aspect {aspect!r} = {frame.at[row, aspect]!r} is not 0 or 1")
        return pd.Series(np.select([rating == 0, rating == 1], ["lo", "hi"], None), index=frame.index)
    if cat_col:
        groups = frame[cat_col].map(_CAT_TO_GROUP)
        if groups.isna().any():
            bad = frame.index[groups.isna()][0]
            raise ValueError(f"row {bad}: {cat_col!r} = {frame.at[bad, cat_col]!r} is not poor/moderate/high")
        return groups
    rating = frame[aspect].to_numpy(dtype=float)
    return pd.Series(np.select([rating < 3, rating == 3, rating > 3], ["lo", "mod", "hi"], None),
                     index=frame.index)


def ks(x, y) -> float:
    """Two-sided two-sample KS statistic D = sup |F1 - F2| (scipy); NaN if a sample is empty."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if not x.size or not y.size:
        return float("nan")
    with warnings.catch_warnings():  # "exact calculation unsuccessful" only changes the p-value
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ks_2samp(x, y).statistic)


def preference_label(mean_a: float, mean_b: float, lower_is_better: bool = False,
                     names: tuple[str, str] = ("a", "b")) -> str | None:
    """'a<b' if a scores worse than b, 'b<a' if better, 'a=b' if equal (sign flipped if lower is
    better); None (undefined) when either mean is not a finite number: a side without any finite
    score is no evidence of equality."""
    if not (np.isfinite(mean_a) and np.isfinite(mean_b)):
        return None
    if lower_is_better:
        mean_a, mean_b = -mean_a, -mean_b
    a, b = names
    if mean_a < mean_b:
        return f"{a}<{b}"
    if mean_a > mean_b:
        return f"{b}<{a}"
    return f"{a}={b}"


def aspect_level(frame, column, aspect, cat_col=None, lower_is_better=False) -> AspectLevel:
    """KS of `column` between quality groups of `aspect`, and the preference label of lo vs hi."""
    groups = quality_groups(frame, aspect, cat_col)
    values = {g: frame.loc[groups == g, column].to_numpy(dtype=float) for g in GROUPS}
    means = {g: finite_mean(v) for g, v in values.items()}  # finite scores only, as KS
    label = None
    if len(values["lo"]) and len(values["hi"]):
        label = preference_label(means["lo"], means["hi"], lower_is_better, ("lo", "hi"))
    return AspectLevel(human=aspect, column=column, ks_lo_hi=ks(values["lo"], values["hi"]),
                       ks_lo_mod=ks(values["lo"], values["mod"]), ks_hi_mod=ks(values["hi"], values["mod"]),
                       preference=label, size_lo=len(values["lo"]), size_mod=len(values["mod"]),
                       size_hi=len(values["hi"]))


def human_ranking(frame, aspect, system_col="system") -> list[str]:
    """Systems sorted by mean human score, ascending, stable (ties keep name order)."""
    means = group_means(frame, aspect, system_col)
    return list(means.sort_values(kind="stable").index)


def easy_hard_pairs(frame, aspects, system_col="system") -> tuple[list, list]:
    """Easy / Hard pairs from each aspect's ranking r0..rL, accumulated, ordered, de-duplicated.

    Easy (> 4 systems): (r0,rL), (r0,rL-1), (r1,rL), (r1,rL-1).
    Hard (> 6 systems): (r0,r1), (r_n//2, r_n//2+1), (rL-1,rL).
    """
    easy, hard = [], []
    for aspect in aspects:
        r = human_ranking(frame, aspect, system_col)
        n, last = len(r), len(r) - 1
        if n > 4:
            for pair in [(r[0], r[last]), (r[0], r[last - 1]), (r[1], r[last]), (r[1], r[last - 1])]:
                if pair not in easy:
                    easy.append(pair)
        if n > 6:
            for pair in [(r[0], r[1]), (r[n // 2], r[n // 2 + 1]), (r[last - 1], r[last])]:
                if pair not in hard:
                    hard.append(pair)
    return easy, hard


def system_level_ks(frame, column, pairs, system_col="system") -> dict:
    """KS between the per-sample scores of the two systems of each pair, and its mean."""
    per_pair = []
    for a, b in pairs:
        per_pair.append(ks(frame.loc[frame[system_col] == a, column], frame.loc[frame[system_col] == b, column]))
    return {"mean": float(np.mean(per_pair)) if per_pair else float("nan"), "per_pair": per_pair}


def group_means(frame, column, group_col="system") -> pd.Series:
    """Per-group means of the finite values of `column` (NaN for a group without one), computed
    on the column scaled by a power of two (`meta_eval.numbers`) so that scores near 1e308 do not
    overflow the sums; in the column's units."""
    values, k = scaled(frame[column].to_numpy(dtype=float))
    values = pd.Series(np.where(np.isfinite(values), values, np.nan), index=frame.index)
    means = values.groupby(frame[group_col].to_numpy(), sort=True).mean()
    return pd.Series(unscaled(means.to_numpy(), k), index=means.index)


def system_preferences(frame, column, pairs, lower_is_better=False, system_col="system") -> list[str | None]:
    """The preference label of each pair's system means (None where a system has no finite score)."""
    means = group_means(frame, column, system_col)
    missing = [s for pair in pairs for s in pair if s not in means.index]
    if missing:
        raise KeyError(f"system(s) {sorted(set(missing))} not found in column {system_col!r}")
    return [preference_label(means[a], means[b], lower_is_better) for a, b in pairs]


def preference_similarity(x: str, y: str) -> float:
    """S(x, y) = (|x| + |y| - 2 Lev(x, y)) / (|x| + |y|) (paper §4.3; Levenshtein package)."""
    total = len(x) + len(y)
    if total == 0:
        return 1.0
    return (total - 2 * Levenshtein.distance(x, y)) / total


def mean_preference_similarity(labels_x: list[str | None], labels_y: list[str | None]) -> float:
    """Mean S over the pairs whose labels are both defined (a pair where a system has no finite
    score is left out, as a NaN score is elsewhere); NaN when no pair is left."""
    if len(labels_x) != len(labels_y):
        raise ValueError("preference label lists differ in length")
    scores = [preference_similarity(a, b) for a, b in zip(labels_x, labels_y) if a is not None and b is not None]
    return float(np.mean(scores)) if scores else float("nan")


def win_fractions(frame, column, lower_is_better=False, system_col="system", doc_col="doc_id") -> pd.DataFrame:
    """W[i][j] = share of same-`doc_id` comparisons that system i wins against j (ties count).

    Several rows per (doc, system), e.g. one per annotator, are averaged first.
    """
    scaled_frame = frame[[doc_col, system_col]].assign(**{column: conditioned(frame[column].to_numpy(dtype=float))})
    grid = scaled_frame.pivot_table(index=doc_col, columns=system_col, values=column, aggfunc="mean")
    values = grid.to_numpy(dtype=float)  # scaled by a power of two: a cell of scores near 1e308 stays finite
    if lower_is_better:
        values = -values
    n_sys = values.shape[1]
    wins, games = np.zeros((n_sys, n_sys)), np.zeros((n_sys, n_sys))
    for row in values:  # one document at a time: memory follows the (systems x systems) output
        finite = np.isfinite(row)
        both = finite[:, None] & finite[None, :]
        with np.errstate(invalid="ignore"):
            wins += (row[:, None] > row[None, :]) & both
        games += both
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(games > 0, wins / games, np.nan)
    np.fill_diagonal(share, np.nan)
    return pd.DataFrame(share, index=grid.columns, columns=grid.columns)


def transfer_table(frame, metrics, human, group_col="dataset", method="spearman", variant="b") -> pd.DataFrame:
    """Sample-level correlation of each metric with `human` per dataset group (rows: metrics),
    over the rows where both are finite (NaN with fewer than two such rows)."""
    out = {}
    for group, sub in frame.groupby(group_col, sort=True):
        values = {}
        for m in metrics:
            pair = sub[[m, human]].to_numpy(dtype=float)
            pair = pair[np.isfinite(pair).all(axis=1)]
            values[m] = correlate(pair[:, 0], pair[:, 1], method, variant) if len(pair) >= 2 else np.nan
        out[group] = values
    return pd.DataFrame(out).reindex(metrics)


def run_checklist(table, pairs: str = "given") -> ChecklistBlock:
    """Every checklist number for a `meta_eval.io.Table` (needs a system column for the system parts).

    pairs: "given" uses the table's stored Easy/Hard pairs when it has them, else the ranking;
    "ranking" always derives them from the human ranking.
    """
    frame = table.frame
    columns = table.humans + table.metrics
    lower = {c: c in table.lower_is_better for c in columns}
    aspects = tuple(aspect_level(frame, c, aspect, table.cat_columns.get(aspect), lower[c])
                    for aspect in table.humans for c in columns if c != aspect)
    block = ChecklistBlock(columns=tuple(columns), lower_is_better=tuple(sorted(c for c in columns if lower[c])),
                           aspect_level=aspects)
    if not table.has_systems:
        return block
    if pairs == "given" and (table.easy_pairs is not None or table.hard_pairs is not None):  # given, even if one is empty
        easy, hard = list(map(tuple, table.easy_pairs)), list(map(tuple, table.hard_pairs or []))
        pairs_from = "given"
    else:
        easy, hard = easy_hard_pairs(frame, table.humans)
        pairs_from = "human ranking"
    kinds = [(name, pl) for name, pl in (("easy", easy), ("hard", hard)) if pl]
    system_ks = tuple(SystemKS(name, c, system_level_ks(frame, c, pl)["mean"]) for name, pl in kinds for c in columns)
    labels, similarity = [], []
    for name, pl in kinds:
        by_column = {c: system_preferences(frame, c, pl, lower[c]) for c in columns}
        labels += [PreferenceLabels(name, c, tuple(by_column[c])) for c in columns]
        similarity += [PreferenceSimilarity(name, c, h, mean_preference_similarity(by_column[c], by_column[h]))
                       for c in columns for h in table.humans]
    wins = ()
    if "doc_id" in frame and frame["doc_id"].notna().any():
        wins = []
        for c in columns:
            grid = win_fractions(frame, c, lower[c])
            wins.append(WinFractions(c, tuple(map(str, grid.index)),
                                     tuple(tuple(float(v) for v in row) for row in grid.to_numpy(dtype=float))))
        wins = tuple(wins)
    return ChecklistBlock(columns=block.columns, lower_is_better=block.lower_is_better, aspect_level=aspects,
                          pairs_from=pairs_from, easy_pairs=tuple(map(tuple, easy)), hard_pairs=tuple(map(tuple, hard)),
                          system_ks=system_ks, preference_labels=tuple(labels),
                          preference_similarity=tuple(similarity), win_fractions=wins)

"""The BARTScore paper's subsample significance test against a by-hand run of its procedure."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats

from meta_eval import subsample


def _small_table(seed=0, docs=12, systems=5):
    rng = np.random.default_rng(seed)
    doc = np.repeat([f"doc{k:02d}" for k in rng.permutation(docs)], systems)  # not sorted: order matters
    human = rng.integers(1, 6, docs * systems).astype(float)
    good = human + rng.normal(0, 1.0, len(human))
    noisy = human + rng.normal(0, 2.5, len(human))
    noisy[:systems] = 3.0  # a constant metric on the first document: that document is skipped for this pair
    return doc, human, good, noisy


def _by_hand(doc, human, m1, m2, draws):
    """The original's `sig_test_two` loop, written out from its description."""
    rows = {}
    for k, d in enumerate(doc):
        rows.setdefault(d, []).append(k)
    doc_ids = list(rows)  # first appearance, like the original's dict
    rng = random.Random(666)
    better = 0
    for _ in range(draws):
        rng.shuffle(doc_ids)
        corr1, corr2 = [], []
        for d in doc_ids[: int(0.8 * len(doc_ids))]:
            idx = rows[d]
            target, pred1, pred2 = human[idx], m1[idx], m2[idx]
            if len(set(pred1)) == 1 or len(set(pred2)) == 1 or len(set(target)) == 1:
                continue
            corr1.append(stats.spearmanr(target, pred1)[0])
            corr2.append(stats.spearmanr(target, pred2)[0])
        if np.mean(corr1) > np.mean(corr2):
            better += 1
    return better


def test_document_level_wins_equal_the_original_procedure():
    doc, human, good, noisy = _small_table()
    block = subsample.compare_metrics(np.column_stack([good, noisy]), ["good", "noisy"], human, "human_x",
                                      level="document", doc=doc, draws=300)
    forward = block.comparison("good", "noisy")
    backward = block.comparison("noisy", "good")
    assert forward.wins == _by_hand(doc, human, good, noisy, 300)
    assert backward.wins == _by_hand(doc, human, noisy, good, 300)
    assert forward.significant == (forward.wins > 0.95 * 300) == (forward.ci_diff.low > 0)
    assert forward.test == "bartscore_subsample" and forward.draws == 300
    assert forward.p_value == (300 - forward.wins) / 300  # share of draws "good" does not win


def test_a_perfect_metric_wins_every_draw():
    doc, human, _, noisy = _small_table(seed=1)
    exact = human * 2 + 1  # per-document Spearman 1 wherever human is not constant
    block = subsample.compare_metrics(np.column_stack([exact, noisy]), ["exact", "noisy"], human, "h",
                                      level="document", doc=doc)
    assert block.comparison("exact", "noisy").wins == 1000 and block.comparison("exact", "noisy").significant
    assert block.comparison("noisy", "exact").wins == 0
    assert "draws:1000" in block.signature and "seed:666" in block.signature


def test_draws_are_cumulative_shuffles_of_the_first_appearance_order():
    rng = random.Random(666)
    units = list(range(10))
    expected = []
    for _ in range(3):
        rng.shuffle(units)
        expected.append(units[:8])
    assert subsample.subsample_positions(10, draws=3).tolist() == expected


def test_sample_and_darr_levels_by_hand():
    rng = np.random.default_rng(4)
    human = rng.normal(size=40)
    a, b = human + rng.normal(0, 0.5, 40), human + rng.normal(0, 0.6, 40)
    block = subsample.compare_metrics(np.column_stack([a, b]), ["a", "b"], human, "h", level="sample",
                                      method="pearson", draws=50)
    positions = subsample.subsample_positions(40, draws=50)
    wins = sum(stats.pearsonr(a[p], human[p])[0] > stats.pearsonr(b[p], human[p])[0] for p in positions)
    assert block.comparison("a", "b").wins == wins
    # DARR: pairs p0..p9, better row first; tau = mean sign over the drawn pairs
    pair = np.repeat([f"p{k}" for k in range(10)], 2)
    better = np.tile([1.0, 0.0], 10)
    x = rng.normal(size=20)
    y = rng.normal(size=20)
    block = subsample.compare_metrics(np.column_stack([x, y]), ["x", "y"], better, "human_darr_better",
                                      level="darr", doc=pair, draws=40)
    sx = np.where(x[0::2] > x[1::2], 1, -1)
    sy = np.where(y[0::2] > y[1::2], 1, -1)
    positions = subsample.subsample_positions(10, draws=40)
    assert block.comparison("x", "y").wins == sum(sx[p].mean() > sy[p].mean() for p in positions)
    assert block.intervals[0].value == pytest.approx(sx.mean())

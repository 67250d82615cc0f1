"""Marks agree with their intervals (bootstrap, subsample test, PERM-BOTH, with and without a
correction); PERM-BOTH and pairwise accuracy equal naive references; undefined pairs have no mark."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from meta_eval import bootstrap, marks, permutation, subsample
from meta_eval.correlation import correlate, pairwise_accuracy


def _close_metrics(seed: int, n: int = 12):
    """A human column and four metrics of close quality over few rows."""
    rng = np.random.default_rng(seed)
    human = rng.normal(size=n)
    return np.column_stack([human + rng.normal(scale=s, size=n) for s in (0.3, 0.6, 1.0, 1.6)]), human


def _agrees(block):
    for c in block.comparisons:
        if not c.defined:
            continue
        excludes = c.ci_diff.low > 0 or c.ci_diff.high < 0
        p = c.p_adjusted if block.correction != "none" else c.p_value
        if block.test == "bartscore_subsample":
            p_rule = min(c.p_value, block.comparison(c.b, c.a).p_value) < c.alpha_effective
        else:
            p_rule = p <= block.alpha + 1e-12
        assert c.significant == (c.ci_diff.low > 0), c
        assert excludes == p_rule, c
        assert block.mark(c.a, c.b) in {f"{c.a} > {c.b}", f"{c.b} > {c.a}", "no"}


@pytest.mark.parametrize("correction", ["none", "holm", "bh"])
def test_bootstrap_marks_agree_with_their_intervals_where_the_old_rule_did_not(correction):
    old_disagreements = marked = 0
    for seed in range(12):
        metrics, human = _close_metrics(seed)
        block = bootstrap.compare_metrics(metrics, list("abcd"), human, "h", n_resamples=200, seed=seed,
                                          correction=correction)
        _agrees(block)
        marked += sum(c.significant for c in block.comparisons)
        # the old rule: one-sided p < alpha in each direction beside a two-sided 95% percentile interval
        dist = bootstrap.bootstrap_distribution(bootstrap.prepare(metrics, human), 200, seed)["spearman"]
        for i, j in itertools.permutations(range(4), 2):
            diff = dist[:, i] - dist[:, j]
            old_mark = (np.sum(diff <= 0) + 1) / 201 < 0.05
            low, high = np.percentile(diff, [2.5, 97.5])
            old_disagreements += old_mark and low <= 0 <= high
    assert old_disagreements > 0  # the cases sit where the old marks contradicted their intervals
    assert marked > 0 or correction != "none"


def test_subsample_and_perm_both_marks_agree_with_their_intervals():
    rng = np.random.default_rng(5)
    doc, system = np.repeat(np.arange(8), 5), np.tile(np.arange(5), 8)
    for seed in range(4):
        human = rng.normal(size=40)
        metrics = np.column_stack([human + rng.normal(scale=s, size=40) for s in (0.3, 0.8, 1.5)])
        for correction in ("none", "holm"):
            _agrees(subsample.compare_metrics(metrics, list("abc"), human, "h", level="document", doc=doc,
                                              draws=100, correction=correction))
            _agrees(permutation.compare_metrics(metrics, list("abc"), human, "h", method="pearson", doc=doc,
                                                system=system, n_trials=200, seed=seed, correction=correction))


def _naive_perm_both(x_rows, y_rows, z_rows, doc, system, method, n_trials, seed):
    """Loops over cells: cell means, z-scores, per-cell coin swaps, per-system means, scipy r."""
    systems, docs = sorted(set(system)), sorted(set(doc))

    def cells(values):
        return np.array([[np.mean([v for v, s, d in zip(values, system, doc) if s == si and d == di])
                          for di in docs] for si in systems])

    x, y, z = cells(x_rows), cells(y_rows), cells(z_rows)
    x, y = (x - x.mean()) / x.std(), (y - y.mean()) / y.std()
    human = z.mean(axis=1)

    def stat(a):
        return correlate(a.mean(axis=1), human, method)

    delta = stat(x) - stat(y)
    count = 0
    for swap in permutation.trial_masks(x.shape, n_trials, seed):
        xs, ys = x.copy(), y.copy()
        for s_i in range(len(systems)):
            for d_i in range(len(docs)):
                if swap[s_i, d_i]:
                    xs[s_i, d_i], ys[s_i, d_i] = y[s_i, d_i], x[s_i, d_i]
        count += abs(stat(xs) - stat(ys)) >= abs(delta) - 1e-12
    return delta, (count + 1) / (n_trials + 1)


@pytest.mark.parametrize("method", ["spearman", "kendall", "pairwise_accuracy", "pearson"])
def test_perm_both_equals_a_naive_reference(method):
    rng = np.random.default_rng(2)
    doc, system = np.repeat(np.arange(4), 10) % 4, np.tile(np.arange(5), 8)  # 2 rows per cell
    human = rng.normal(size=40)
    metrics = np.column_stack([human + rng.normal(scale=0.7, size=40), rng.normal(size=40) * 3 + 1])
    block = permutation.compare_metrics(metrics, ["a", "b"], human, "h", method=method, doc=doc, system=system,
                                        n_trials=120, seed=9)
    delta, p = _naive_perm_both(metrics[:, 0], metrics[:, 1], human, doc, system, method, 120, 9)
    comp = block.comparison("a", "b")
    assert comp.diff == pytest.approx(delta, abs=1e-12)
    assert comp.p_value == pytest.approx(p)
    assert comp.test == "perm_both" and comp.sided == "two-sided"
    assert "perm-both" in block.signature and "trials:120" in block.signature


def test_pairwise_accuracy_equals_a_naive_count():
    rng = np.random.default_rng(4)
    x, y = rng.integers(0, 5, 9).astype(float), rng.integers(0, 5, 9).astype(float)
    agree = [np.sign(x[i] - x[j]) == np.sign(y[i] - y[j]) for i in range(9) for j in range(i + 1, 9)]
    assert pairwise_accuracy(x, y) == pytest.approx(np.mean(agree))
    assert correlate(x, y, "pairwise_accuracy") == pairwise_accuracy(x, y)
    assert pairwise_accuracy(x, x) == 1.0


def test_holm_and_bh_equal_naive_references():
    p = [0.01, 0.04, None, 0.03, 0.5]
    defined = [0.01, 0.04, 0.03, 0.5]
    order = np.argsort(defined)
    holm = np.empty(4)
    running = 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1, (4 - rank) * defined[k]))
        holm[k] = running
    bh = np.array([min(min(1, 4 * defined[order[r]] / (r + 1)) for r in range(rank, 4))
                   for rank in range(4)])[np.argsort(order)]
    assert [v for v in marks.adjust(p, "holm") if v is not None] == pytest.approx(holm)
    assert [v for v in marks.adjust(p, "bh") if v is not None] == pytest.approx(bh)
    assert marks.adjust(p, "holm")[2] is None and marks.adjust(p, "none") == p


def test_a_constant_metric_has_no_mark():
    metrics, human = _close_metrics(0)
    metrics[:, 3] = 2.0
    block = bootstrap.compare_metrics(metrics, list("abcd"), human, "h", n_resamples=100)
    comp = block.comparison("a", "d")
    assert not comp.defined and comp.p_value is None and not comp.significant
    assert block.mark("a", "d") == block.mark("d", "a") == "–"
    assert block.mark("a", "b") != "–"
    assert any("only 12 rows" in w for w in block.warnings)


def test_p_value_never_below_its_resolution():
    metrics, human = _close_metrics(3, n=60)
    metrics[:, 1] = stats.rankdata(human)  # a perfect metric wins every resample
    block = bootstrap.compare_metrics(metrics, list("abcd"), human, "h", n_resamples=99)
    assert block.comparison("b", "a").p_value == pytest.approx(2 / 100)

"""System comparison: paired bootstrap and approximate randomisation against by-hand numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from meta_eval import compare
from meta_eval.bootstrap import block_draws
from scoring.errors import InputError, UsageError

# 6 documents x 3 systems; doc d4 has no score for C (dropped); (d1, A) has two rows (averaged).
ROWS = [
    ("d1", "A", 0.50), ("d1", "A", 0.70), ("d1", "B", 0.40), ("d1", "C", 0.10),
    ("d2", "A", 0.80), ("d2", "B", 0.75), ("d2", "C", 0.30),
    ("d3", "A", 0.20), ("d3", "B", 0.35), ("d3", "C", 0.15),
    ("d4", "A", 0.90), ("d4", "B", 0.10), ("d4", "C", None),
    ("d5", "A", 0.55), ("d5", "B", 0.50), ("d5", "C", 0.45),
    ("d6", "A", 0.65), ("d6", "B", 0.30), ("d6", "C", 0.05),
]
# per-unit values by hand (d4 dropped, d1/A = mean(0.5, 0.7))
BY_HAND = {"A": [0.60, 0.80, 0.20, 0.55, 0.65], "B": [0.40, 0.75, 0.35, 0.50, 0.30],
           "C": [0.10, 0.30, 0.15, 0.45, 0.05]}


@pytest.fixture
def table():
    return pd.DataFrame(ROWS, columns=["doc_id", "system", "score"]).assign(dataset="toy")


def test_paired_bootstrap_equals_a_by_hand_computation(table):
    n, seed = 60, 5
    res = compare.system_comparison(table, "score", dataset="toy", n_resamples=n, seed=seed,
                                    tests=("bootstrap",))
    assert res.n_units == 5 and res.n_units_dropped == 1
    # by hand: the same index draws (the documented resampling stream), loops over plain lists
    draws = np.concatenate([block_draws(5, seed, 0, 25), block_draws(5, seed, 1, 25), block_draws(5, seed, 2, 10)])
    resampled = {s: [sum(BY_HAND[s][u] for u in draw) / 5 for draw in draws] for s in BY_HAND}
    means = {s: sum(v) / 5 for s, v in BY_HAND.items()}
    assert [s.system for s in res.systems] == ["A", "B", "C"]  # best first
    assert [s.rank for s in res.systems] == [1, 2, 3]
    for score in res.systems:
        assert score.mean == pytest.approx(means[score.system], abs=1e-12)
        assert [score.interval.low, score.interval.high] == pytest.approx(
            np.percentile(resampled[score.system], [2.5, 97.5]), abs=1e-12)
    for pair in res.pairs:
        delta = means[pair.a] - means[pair.b]
        boot = [x - y for x, y in zip(resampled[pair.a], resampled[pair.b])]
        extreme = sum(abs(d - delta) >= abs(delta) - 1e-12 for d in boot)
        assert pair.diff == pytest.approx(delta, abs=1e-12)
        assert pair.p_bootstrap == pytest.approx((1 + extreme) / (n + 1))
        # the interval is the bootstrap test inverted: delta +- the (m+1)-th largest |boot - delta|,
        # m = the most resamples beyond |delta| that still give p < 0.05 (here 61 * 0.05 - 1 -> m = 2)
        half = sorted((abs(d - delta) for d in boot), reverse=True)[2]
        assert [pair.ci_diff.low, pair.ci_diff.high] == pytest.approx([delta - half, delta + half], abs=1e-11)
        assert pair.ci_diff.level == pytest.approx(0.95)
        assert pair.p_randomization is None
        assert pair.better == (pair.a if pair.p_bootstrap < 0.05 else None)
    assert [(p.a, p.b) for p in res.pairs] == [("A", "B"), ("A", "C"), ("B", "C")]


def test_approximate_randomization_converges_to_the_exact_permutation_test():
    rng = np.random.default_rng(0)
    a = rng.normal(0.5, 0.2, 9)
    b = a - rng.normal(0.12, 0.2, 9)
    frame = pd.DataFrame({"doc_id": np.tile(np.arange(9), 2), "system": ["a"] * 9 + ["b"] * 9,
                          "score": np.concatenate([a, b])})
    d = a - b
    observed = abs(d.mean())
    flips = [abs(np.mean(np.array(signs) * d)) for signs in itertools.product([1, -1], repeat=9)]
    exact = np.mean([f >= observed - 1e-12 for f in flips])  # all 512 swaps, by hand
    res = compare.system_comparison(frame, "score", tests=("randomization",), trials=20000, seed=3)
    [pair] = res.pairs
    assert 0.02 < exact < 0.5
    assert pair.p_randomization == pytest.approx(exact, abs=0.01)
    assert pair.p_bootstrap is None


def test_identical_systems_are_not_different_and_a_dominant_one_is():
    docs = np.arange(40)
    base = np.sin(docs)
    frame = pd.DataFrame({"doc_id": np.tile(docs, 3), "system": np.repeat(["same1", "same2", "best"], 40),
                          "ppl": np.concatenate([base + 5, base + 5, base + 1])})
    res = compare.system_comparison(frame, "ppl", lower_is_better=True, n_resamples=200, trials=500)
    assert res.systems[0].system == "best" and res.systems[0].rank == 1
    assert [s.rank for s in res.systems[1:]] == [2, 2]  # equal means share the rank
    by_pair = {(p.a, p.b): p for p in res.pairs}
    tie = by_pair[("same1", "same2")]
    assert tie.p_bootstrap == 1.0 and tie.p_randomization == 1.0 and tie.better is None
    win = by_pair[("best", "same1")]
    assert win.p_bootstrap == pytest.approx(1 / 201) and win.p_randomization == pytest.approx(1 / 501)
    assert win.better == "best" and win.diff == pytest.approx(-4.0)


def test_any_runner_gives_the_same_answer(table):
    def one_item_per_call(fn, shared, items):
        return [result for item in items for result in fn(shared, [item])]

    local = compare.system_comparison(table, "score", n_resamples=80, trials=90, seed=1)
    split = compare.system_comparison(table, "score", n_resamples=80, trials=90, seed=1, runner=one_item_per_call)
    assert local == split


def test_leaderboard_per_dataset_and_csv(table):
    other = table.assign(dataset="other", score=lambda f: -f["score"])
    comps = compare.compare_systems(pd.concat([table, other]), ["score"], n_resamples=30, trials=30)
    assert [(c.dataset, c.column) for c in comps] == [("other", "score"), ("toy", "score")]
    rows = compare.leaderboard(comps)
    assert [(r.dataset, r.system, r.rank) for r in rows] == [
        ("other", "C", 1), ("other", "B", 2), ("other", "A", 3), ("toy", "A", 1), ("toy", "B", 2), ("toy", "C", 3)]
    parsed = pd.read_csv(__import__("io").StringIO(compare.leaderboard_csv(rows)))
    assert list(parsed.columns) == list(compare.LEADERBOARD_FIELDS)
    assert parsed["mean"].tolist() == pytest.approx([r.mean for r in rows])
    doc = __import__("json").loads(compare.comparisons_json(comps))
    assert doc["leaderboard"][3]["system"] == "A" and len(doc["comparisons"]) == 2
    text = compare.comparison_markdown(comps)
    assert "| 1 | A |" in text and "higher is better" in text


def test_clear_errors(table):
    with pytest.raises(InputError, match="doc_id"):
        compare.system_comparison(table.drop(columns="doc_id"), "score")
    with pytest.raises(InputError, match="two or more systems"):
        compare.system_comparison(table[table.system == "A"], "score")
    with pytest.raises(InputError, match="'Z'"):
        compare.system_comparison(table, "score", systems=["A", "Z"])
    with pytest.raises(UsageError, match="unknown test"):
        compare.system_comparison(table, "score", tests=("t-test",))


def test_every_mark_agrees_with_its_interval():
    """Close systems over few units, where the percentile interval and the null-shifted p-value
    used to disagree: significant at alpha exactly when the shown interval excludes 0."""
    rng = np.random.default_rng(11)
    checked = {True: 0, False: 0}
    for trial in range(40):
        n_docs = int(rng.integers(4, 12))
        base = rng.normal(size=n_docs)
        frame = pd.DataFrame({"doc_id": np.tile(np.arange(n_docs), 4), "system": np.repeat(list("ABCD"), n_docs),
                              "m": np.concatenate([base + rng.normal(0.3 * k, 0.4, n_docs) for k in range(4)])})
        res = compare.system_comparison(frame, "m", n_resamples=int(rng.integers(40, 300)), tests=("bootstrap",),
                                        seed=trial)
        for pair in res.pairs:
            excludes = pair.ci_diff.low > 0 or pair.ci_diff.high < 0
            assert (pair.p_bootstrap < 0.05) == excludes == (pair.better is not None), pair
            checked[excludes] += 1
    assert min(checked.values()) > 10  # both outcomes were exercised


def test_too_few_resamples_give_no_interval_and_no_mark(table):
    res = compare.system_comparison(table, "score", n_resamples=10, tests=("bootstrap",))
    assert all(np.isnan(p.ci_diff.low) and p.better is None for p in res.pairs)

"""Divergence (spec `splits.md`, "Divergence") against the exhaustive oracles and brute force."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from splits.aspects import KNOWN_DATASETS, from_aspects
from splits.divergence import CountTerms, divergence, divergence_from_counts, divergence_of_dicts, move_gains


@pytest.fixture(scope="module")
def oracles(shared_data):
    return json.loads((shared_data / "compmctg" / "derived" / "definition_oracles.json").read_text())


def hand_divergence(seen, unseen, alpha=0.1):
    """Independent D: compound strings counted by hand from the dicts."""
    def dist(side):
        counts = {}
        for combo in side:
            keys = list(combo)
            for a, b in itertools.combinations(range(len(keys)), 2):
                k = (keys[a], combo[keys[a]], keys[b], combo[keys[b]])
                counts[k] = counts.get(k, 0) + 1
        total = sum(counts.values())
        return {k: v / total for k, v in counts.items()}
    if not seen or not unseen:
        return 1.0
    p, q = dist(seen), dist(unseen)
    return 1.0 - sum(p[k] ** alpha * q[k] ** (1 - alpha) for k in p if k in q)


def test_yelp_all_70_splits_match_oracle(oracles):
    yelp = from_aspects(KNOWN_DATASETS["Yelp"])
    table = oracles["Yelp_ACD_all_4v4_splits"]
    assert len(table) == 70
    for row in table:
        d = divergence_of_dicts(yelp, row["seen"])
        assert d == pytest.approx(row["D"], abs=1e-6)
        eligible = yelp.is_eligible([yelp.index_of(c) for c in row["seen"]])
        assert eligible == row["unseen_atoms_subset_of_seen"]
    # count-space form used by the search agrees too
    terms = CountTerms(yelp.n_combos)
    total = yelp.compound_matrix.sum(axis=0).astype(int)
    for row in table:
        seen = [yelp.index_of(c) for c in row["seen"]]
        cs = yelp.compound_matrix[seen].sum(axis=0).astype(int)
        d = divergence_from_counts(terms, cs, total - cs, 4, 4, yelp.compounds_per_combo)
        assert float(d) == pytest.approx(row["D"], abs=1e-6)


def test_worked_example_and_fyelp_fewshot_optimum(oracles):
    yelp = from_aspects(KNOWN_DATASETS["Yelp"])
    ex = oracles["Yelp_worked_example"]
    assert divergence_of_dicts(yelp, ex["seen"]) == pytest.approx(ex["D"], abs=1e-12) == pytest.approx(0.5)
    fyelp = from_aspects(KNOWN_DATASETS["Fyelp"])
    seen = [dict(sentiment="Positive", gender="Male", cuisine=c, tense="Present") for c in ("Asian", "American", "Mexican", "Bar")]
    seen.append(dict(sentiment="Negative", gender="Female", cuisine="dessert", tense="Past"))
    assert round(divergence_of_dicts(fyelp, seen), 4) == 0.5414


@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.9])
def test_divergence_matches_hand_computation(alpha):
    uni = from_aspects({"a": ["x", "y", "z"], "b": ["p", "q"], "c": ["1", "2"], "d": ["u", "v"]})
    rng = np.random.default_rng(7)
    for _ in range(20):
        k = int(rng.integers(1, uni.n_combos))
        seen = sorted(rng.choice(uni.n_combos, size=k, replace=False).tolist())
        unseen = uni.unseen_of(seen)
        want = hand_divergence([uni.combo_dict(i) for i in seen], [uni.combo_dict(i) for i in unseen], alpha)
        assert divergence(uni, seen, alpha) == pytest.approx(want, abs=1e-12)


def test_empty_side_is_one_and_identical_sides_zero():
    yelp = from_aspects(KNOWN_DATASETS["Yelp"])
    assert divergence(yelp, range(8)) == 1.0
    assert divergence(yelp, []) == 1.0
    # a side with the same compound distribution as the other: C = 1, D = 0 (oracle histogram has two 0.0 splits)
    seen = [yelp.index_of(dict(sentiment=s, pronoun=p, tense=t)) for s, p, t in
            [("Positive", "plural", "Present"), ("Positive", "singular", "Past"), ("Negative", "plural", "Past"), ("Negative", "singular", "Present")]]
    assert divergence(yelp, seen) == pytest.approx(0.0, abs=1e-12)


def test_incremental_move_gains_equal_recomputation():
    """Every swap's incremental gain equals the change of Σ recomputed from scratch."""
    uni = from_aspects(KNOWN_DATASETS["Fyelp"])
    n, k, m = uni.n_combos, 20, uni.compounds_per_combo
    terms = CountTerms(n)
    total = uni.compound_matrix.sum(axis=0).astype(np.int64)
    rng = np.random.default_rng(3)
    seen_sets = [np.sort(rng.choice(n, size=k, replace=False)) for _ in range(3)]
    seen_idx = np.stack(seen_sets)
    unseen_idx = np.stack([np.setdiff1d(np.arange(n), s) for s in seen_sets])
    cs = np.stack([uni.compound_matrix[s].sum(axis=0) for s in seen_sets]).astype(np.int64)
    gains = move_gains(terms, uni.compound_matrix, seen_idx, unseen_idx, cs, total - cs)
    scale = 1.0 / ((k * m) ** 0.1 * ((n - k) * m) ** 0.9)
    for b in range(3):
        d0 = divergence(uni, seen_sets[b])
        for i in range(0, k, 3):
            for j in range(0, n - k, 4):
                new = set(seen_sets[b].tolist()) - {int(seen_idx[b, i])} | {int(unseen_idx[b, j])}
                d1 = divergence(uni, new)
                # D = 1 - scale * Σ  →  ΔD = -scale * ΔΣ
                assert d1 - d0 == pytest.approx(-scale * gains[b, i, j], abs=1e-12)

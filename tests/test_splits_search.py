"""Search and protocols against the oracles in ../shared/data/compmctg/derived/ (spec `splits.md`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from splits.aspects import KNOWN_DATASETS, from_aspects
from splits.divergence import divergence
from splits.protocols import build_splits
from splits.search import ClimbProblem, exhaustive, random_eligible_start, restart_rng, select_splits


@pytest.fixture(scope="module")
def derived(shared_data):
    root = shared_data / "compmctg" / "derived"
    oracles = json.loads((root / "definition_oracles.json").read_text())
    runs = {p.stem: json.loads(p.read_text()) for p in (root / "reference_code_runs").glob("*.json")}
    return oracles, runs


def uni(name):
    return from_aspects(KNOWN_DATASETS[name], name=name)


def check_split_json(universe, split):
    seen = [universe.index_of(c) for c in split["seen"]]
    unseen = [universe.index_of(c) for c in split["unseen"]]
    assert sorted(seen + unseen) == list(range(universe.n_combos))
    assert universe.is_eligible(seen)
    assert split["divergence"] == pytest.approx(divergence(universe, seen), abs=1e-9)
    return frozenset(seen)


def test_exhaustive_matches_oracle_counts(derived):
    oracles, _ = derived
    sets, d = exhaustive(uni("Yelp"), 4)
    summary = oracles["Yelp_ACD_summary"]
    assert len(sets) == summary["n_eligible_both_directions"]
    hist = {}
    for v in np.round(d, 3):
        hist[str(float(v))] = hist.get(str(float(v)), 0) + 1
    assert hist == summary["D_histogram_eligible_rounded3"]
    for name, info in oracles["FewShot_exhaustive"].items():
        u = uni(name)
        sets, d = exhaustive(u, u.max_cardinality())
        assert len(sets) == info["n_eligible"] == len(info["eligible_splits"])
        assert sorted(set(np.round(d, 3).tolist())) == info["D_values_rounded3"]
        got = {frozenset(s.tolist()) for s in sets}
        want = {frozenset(u.index_of(c) for c in sp["seen"]) for sp in info["eligible_splits"]}
        assert got == want


def test_fyelp_fewshot_exhaustive_optimum():
    f = uni("Fyelp")
    sets, d = exhaustive(f, 5)
    assert len(sets) == 27000
    assert round(float(d.max()), 4) == 0.5414
    assert int((np.round(d, 6) == round(float(d.max()), 6)).sum()) == 40


def test_random_starts_are_eligible_and_seeded():
    for name, k in [("Fyelp", 5), ("Fyelp", 20), ("Yelp", 2), ("Amazon", 6)]:
        u = uni(name)
        for r in range(20):
            s = random_eligible_start(u, k, restart_rng(1, r))
            assert len(set(s.tolist())) == k and u.is_eligible(s)
        a = random_eligible_start(u, k, restart_rng(5, 3))
        b = random_eligible_start(u, k, restart_rng(5, 3))
        assert a.tolist() == b.tolist()


def test_coverage_moves_reach_fyelp_fewshot_optimum_original_rule_is_stuck():
    """Spec "Oracles": single-combo moves under the protected-atom rule cannot leave a
    one-carrier-per-cuisine Few-Shot split; coverage-preserving swaps reach 0.5414."""
    f = uni("Fyelp")
    stuck = ClimbProblem(f, 5, seed=11, moves="original").run_block(0, 32)
    assert all(moves == 0 for _, _, moves in stuck)
    free = ClimbProblem(f, 5, seed=11, moves="coverage").run_block(0, 32)
    assert [s for s, _, _ in free] != [s for s, _, _ in stuck]
    best = max(d for _, d, _ in free)
    assert round(best, 4) == 0.5414
    assert best > max(d for _, d, _ in stuck) or round(max(d for _, d, _ in stuck), 4) == 0.5414
    for s, d, _ in free:
        assert f.is_eligible(s) and d == pytest.approx(divergence(f, s), abs=1e-12)


def test_climb_reaches_yelp_optimum():
    y = uni("Yelp")
    res = ClimbProblem(y, 4, seed=0).run_block(0, 16)
    assert max(d for _, d, _ in res) == pytest.approx(0.5)
    assert all(y.is_eligible(s) for s, _, _ in res)


def test_fyelp_acd_climb_reaches_reference(derived):
    _, runs = derived
    ref = max(s["D"] for s in runs["Fyelp_ACD"]["max_splits_kept"])
    f = uni("Fyelp")
    result = build_splits(f, "acd", seed=0, restarts=64, search="climb")
    assert len(result.splits) == 10
    keys = {check_split_json(f, s) for s in result.to_json()["splits"]}
    assert len(keys) == 10
    assert all(len(k) == 20 for k in keys)
    assert max(s.divergence for s in result.splits) >= ref - 1e-9
    assert round(ref, 3) == 0.331


@pytest.mark.parametrize(
    "name,protocol,count,best",
    [
        ("Yelp", "holdout", 8, None), ("Fyelp", "holdout", 40, None), ("Amazon", "holdout", 12, None), ("Mixture", "holdout", 8, None),
        ("Yelp", "acd", 10, 0.5),
        ("Yelp", "fewshot", 4, 0.628),  # benchmark lists 8, but only 4 distinct eligible sets exist (oracle)
        ("Fyelp", "fewshot", 2, 0.5414),
        ("Amazon", "fewshot", 10, 1.0), ("Mixture", "fewshot", 8, 1.0),
        ("Amazon", "acd", 10, 1.0), ("Mixture", "acd", 8, 1.0),  # 2 aspects: ACD reuses Few-Shot
        ("Yelp", "original", 1, None),
    ],
)
def test_protocol_counts_and_optima(derived, name, protocol, count, best):
    _, runs = derived
    u = uni(name)
    result = build_splits(u, protocol, seed=3, restarts=32)
    data = result.to_json()
    assert len(data["splits"]) == count
    if protocol == "original":
        assert data["splits"][0]["unseen"] == [] and len(data["splits"][0]["seen"]) == u.n_combos
        return
    keys = [check_split_json(u, s) for s in data["splits"]]
    assert len(set(keys)) == len(keys)
    if protocol == "holdout":
        assert sorted(len(u.unseen_of(k)) for k in keys) == [1] * u.n_combos
        return
    top = max(s["divergence"] for s in data["splits"])
    assert round(top, 4 if best == 0.5414 else 3) == best
    ref_name = f"{name}_{'FewShot' if protocol == 'fewshot' or name in ('Amazon', 'Mixture') else 'ACD'}"
    ref = max(s["D"] for s in runs[ref_name]["max_splits_kept"])
    assert top >= ref - 1e-9
    decimals = 2 if protocol == "fewshot" or name in ("Amazon", "Mixture") else 3
    assert {round(s["divergence"], decimals) for s in data["splits"]} == {round(top, decimals)}
    sig = data["signature"]
    assert sig["protocol"] == protocol and sig["seed"] == 3 and sig["alpha"] == 0.1 and sig["version"]


def test_mindiv_and_random_are_below_acd():
    f = uni("Fyelp")
    acd = build_splits(f, "acd", seed=1, restarts=32, max_iters=300)
    low = build_splits(f, "mindiv", seed=1, restarts=32, max_iters=300)
    rnd = build_splits(f, "random", seed=1, max_splits=10)
    assert len(rnd.splits) == 10 and all(f.is_eligible(s.seen) for s in rnd.splits + low.splits)
    assert max(s.divergence for s in low.splits) < min(s.divergence for s in rnd.splits)
    assert max(s.divergence for s in rnd.splits) < min(s.divergence for s in acd.splits)


def test_select_splits_rounding_and_distinct_sets():
    cands = [((1, 2), 0.3302), ((2, 1), 0.3302), ((3, 4), 0.3304), ((5, 6), 0.3296), ((7, 8), 0.3299), ((9, 9), 0.3294)]
    out = select_splits(cands, 3, 10)
    # 0.3302, 0.3304, 0.3296 and 0.3299 round to 0.330 (0.3294 to 0.329); (1,2) and (2,1) are one set
    assert [s for s, _ in out] == [(3, 4), (1, 2), (7, 8), (5, 6)]
    assert [s for s, _ in select_splits(cands, 3, 2)] == [(3, 4), (1, 2)]
    assert select_splits(cands, 4, 10) == [((3, 4), 0.3304)]
    assert [s for s, _ in select_splits(cands, 3, 10, maximize=False)] == [(9, 9)]


def test_synthetic_five_aspects_beats_random():
    """4×4×4×4×4 = 1,024 combinations: the climb completes and clearly beats random splits."""
    u = from_aspects({f"aspect{i}": [f"v{i}_{j}" for j in range(4)] for i in range(5)})
    assert u.n_combos == 1024 and len(u.compounds) == 160
    res = build_splits(u, "acd", seed=0, restarts=2, max_iters=120, max_splits=2)
    rnd = build_splits(u, "random", seed=0, max_splits=10)
    assert all(u.is_eligible(s.seen) and len(s.seen) == 512 for s in res.splits + rnd.splits)
    best_random = max(s.divergence for s in rnd.splits)
    assert min(s.divergence for s in res.splits) > 2 * best_random
    assert res.splits[0].divergence == pytest.approx(divergence(u, res.splits[0].seen), abs=1e-9)


def test_subset_universe_holdout_skips_ineligible_and_small_seen_size_fails():
    from splits.aspects import SplitsInputError, Universe

    u = Universe(("a", "b"), {"a": ("x", "y", "z"), "b": ("p", "q")}, [("x", "p"), ("x", "q"), ("y", "p"), ("z", "q")])
    res = build_splits(u, "holdout")
    held = [u.unseen_of(s.seen) for s in res.splits]
    # (y, p) and (z, q) are the only carriers of y and z: holding them out is ineligible
    assert held == [[0], [1]] and res.stats["skipped_ineligible"] == 2
    with pytest.raises(SplitsInputError, match="cannot cover"):
        build_splits(uni("Fyelp"), "acd", seen_size=4, search="climb", restarts=2)


def test_recombination_moves_leave_blocked_exact_covers():
    """3 aspects × 3 values with some combinations missing, Few-Shot size 3: every value has
    one seen carrier, so no single swap keeps coverage; exchanging values between two seen
    combinations does, and reaches the exhaustive optimum from every start."""
    import itertools

    from splits.aspects import Universe

    vals = {"a": ("a0", "a1", "a2"), "b": ("b0", "b1", "b2"), "c": ("c0", "c1", "c2")}
    combos = [c for i, c in enumerate(itertools.product(*vals.values())) if i % 4 != 1]
    u = Universe(("a", "b", "c"), vals, combos)
    sets, d = exhaustive(u, 3)
    best = float(d.max())
    assert len(set(np.round(d, 6))) > 1  # the missing combinations make exact covers differ
    single = ClimbProblem(u, 3, seed=5, recombine=False).run_block(0, 32)
    assert all(moves == 0 for _, _, moves in single)
    assert min(dv for _, dv, _ in single) < best - 1e-6
    both = ClimbProblem(u, 3, seed=5, recombine=True).run_block(0, 32)
    for s, dv, _ in both:
        assert u.is_eligible(s) and dv == pytest.approx(divergence(u, s), abs=1e-12)
        assert dv == pytest.approx(best, abs=1e-9)

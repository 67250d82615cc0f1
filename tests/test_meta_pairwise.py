"""Soft pairwise accuracy (SPA) and tie-calibrated pairwise accuracy (acc_eq) against naive
reference implementations written from the papers' definitions (docs/pairwise_accuracy.md):
loops over pairs, every sign flip enumerated, every tie threshold tried."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from meta_eval import correlation
from meta_eval.pairwise import soft_pairwise_accuracy, tie_calibrated_accuracy


def naive_one_sided_p(x: np.ndarray, y: np.ndarray) -> float:
    """P(mean of the sign-flipped differences >= the observed mean), over all 2^n flips."""
    d = x - y
    observed = d.mean()
    hits = total = 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        total += 1
        hits += np.mean(np.array(signs) * d) >= observed - 1e-12
    return hits / total


def naive_spa(metric: np.ndarray, human: np.ndarray) -> float:
    n_sys = metric.shape[1]
    terms = []
    for i in range(n_sys):
        for j in range(i + 1, n_sys):
            p_h = naive_one_sided_p(human[:, i], human[:, j])
            p_m = naive_one_sided_p(metric[:, i], metric[:, j])
            terms.append(1 - abs(p_h - p_m))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("seed", range(4))
def test_spa_equals_the_naive_definition(seed):
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 6, size=(7, 4)).astype(float)  # ties within units and equal means happen
    metric = human + rng.normal(0, 1.5, size=human.shape)
    assert soft_pairwise_accuracy(metric, human) == pytest.approx(naive_spa(metric, human), abs=1e-12)


def test_spa_is_one_for_the_humans_themselves_and_lower_for_a_reversed_metric():
    rng = np.random.default_rng(9)
    human = rng.normal(size=(30, 5)) + np.arange(5)  # sampled flips: 30 units
    assert soft_pairwise_accuracy(human, human) == 1.0
    assert soft_pairwise_accuracy(-human, human) < 0.2


def test_spa_follows_its_seed_and_permutations():
    from meta_eval.pairwise import EXACT_UNITS

    rng = np.random.default_rng(11)
    human = rng.normal(size=(EXACT_UNITS + 8, 4)) * 0.3 + [0.0, 0.05, 0.1, 0.15]  # sampled flips, p far from 0 and 1
    metric = human + rng.normal(0, 0.3, size=human.shape)
    base = soft_pairwise_accuracy(metric, human, trials=200, seed=0)
    assert soft_pairwise_accuracy(metric, human, trials=200, seed=0) == base  # reproduces
    assert soft_pairwise_accuracy(metric, human, trials=200, seed=1) != base
    assert soft_pairwise_accuracy(metric, human, trials=300, seed=0) != base
    frame = pd.DataFrame([{"doc_id": d, "system": s, "human_x": human[d, s], "m": metric[d, s]}
                          for d in range(len(human)) for s in range(4)])

    def spa(**kwargs):
        table = correlation.correlation_table(frame, ["m"], ["human_x"], levels=["system"],
                                              methods=["soft_pairwise_accuracy"], **kwargs)
        return table[0].value

    assert spa() == soft_pairwise_accuracy(metric, human, trials=1000, seed=0)
    assert spa(trials=200, seed=1) == soft_pairwise_accuracy(metric, human, trials=200, seed=1)


def test_sampled_p_values_approach_the_exact_ones():
    from meta_eval.pairwise import EXACT_UNITS, flip_signs, one_sided_p

    rng = np.random.default_rng(4)
    units = EXACT_UNITS + 2  # above the enumeration limit: random flips
    grid = rng.normal(size=(units, 3)) + [0.0, 0.3, 0.5]
    signs, exact = flip_signs(units, 5000, 0)
    assert not exact and signs.shape == (5000, units)
    every_flip = np.array(list(itertools.product((1.0, -1.0), repeat=units)))
    sampled, truth = one_sided_p(grid, signs, False), one_sided_p(grid, every_flip, True)
    off = ~np.eye(3, dtype=bool)
    assert np.allclose(sampled[off], truth[off], atol=0.03)


def naive_acc_eq(metric, human, groups, average="pool"):
    """Every eps tried on every pair; "pool": the share of all pairs, "item": the share within
    each group that has a pair, averaged over those groups."""
    pairs = [(a, b) for a in range(len(metric)) for b in range(a + 1, len(metric)) if groups[a] == groups[b]]
    candidates = sorted({0.0} | {abs(metric[a] - metric[b]) for a, b in pairs})
    best = (-1.0, None)
    for eps in candidates:
        correct, count = {}, {}
        for a, b in pairs:
            item = groups[a] if average == "item" else "all"
            dh, dm = human[a] - human[b], metric[a] - metric[b]
            metric_tie = abs(dm) <= eps
            if dh == 0:
                hit = metric_tie
            else:
                hit = (not metric_tie) and (dm > 0) == (dh > 0)
            correct[item] = correct.get(item, 0) + hit
            count[item] = count.get(item, 0) + 1
        value = sum(correct[item] / count[item] for item in count) / len(count)
        if value > best[0] + 1e-12:
            best = (value, eps)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_tie_calibrated_accuracy_equals_the_naive_definition(seed):
    rng = np.random.default_rng(seed)
    n = 40
    groups = rng.integers(0, 6, size=n).astype(str)
    human = rng.integers(1, 4, size=n).astype(float)  # many human ties
    metric = np.round(human + rng.normal(0, 0.8, size=n), 1)  # some metric ties too
    for average in ("item", "pool"):
        value, epsilon = tie_calibrated_accuracy(metric, human, groups, average=average)
        expected, expected_eps = naive_acc_eq(metric, human, groups, average)
        assert value == pytest.approx(expected, abs=1e-12)
        assert epsilon == pytest.approx(expected_eps, abs=1e-12)


def naive_item_acc_on_grid(metric_grid, human_grid):
    """WMT24's per-item tie-calibrated accuracy written out on (items x systems) grids with
    missing cells (None): per item, the pairs of systems both have; one eps for all items."""
    items = []
    for m_row, h_row in zip(metric_grid, human_grid):
        cells = [(m, h) for m, h in zip(m_row, h_row) if m is not None and h is not None]
        pairs = [(cells[i], cells[j]) for i in range(len(cells)) for j in range(i + 1, len(cells))]
        if pairs:
            items.append(pairs)
    candidates = sorted({0.0} | {abs(a[0] - b[0]) for pairs in items for a, b in pairs})

    def accuracy(eps):
        shares = []
        for pairs in items:
            hits = 0
            for (m_a, h_a), (m_b, h_b) in pairs:
                tie = abs(m_a - m_b) <= eps
                hits += tie if h_a == h_b else (not tie and (m_a > m_b) == (h_a > h_b))
            shares.append(hits / len(pairs))
        return sum(shares) / len(shares)

    values = [accuracy(eps) for eps in candidates]
    best = max(values)
    first = next(k for k, v in enumerate(values) if v >= best - 1e-12)
    return values[first], candidates[first]


@pytest.mark.parametrize("seed", range(4))
def test_per_item_accuracy_equals_a_naive_per_item_reference_with_missing_cells(seed):
    rng = np.random.default_rng(100 + seed)
    docs, systems = 9, ["A", "B", "C", "D", "E"]
    human = rng.integers(1, 4, size=(docs, len(systems))).astype(float)  # MQM-like: many ties
    metric = np.round(human + rng.normal(0, 0.7, size=human.shape), 1)
    missing = rng.random(human.shape) < 0.3  # cells missing at random: items of 0 to 5 systems
    missing[0, 1:] = True  # an item with one system: no pair, not counted
    metric_grid = [[None if missing[d, s] else metric[d, s] for s in range(len(systems))] for d in range(docs)]
    human_grid = [[None if missing[d, s] else human[d, s] for s in range(len(systems))] for d in range(docs)]
    expected, expected_eps = naive_item_acc_on_grid(metric_grid, human_grid)
    rows = [{"doc_id": f"d{d}", "system": systems[s], "human_q": human[d, s],
             "m": np.nan if missing[d, s] else metric[d, s]}
            for d in range(docs) for s in range(len(systems)) if not (missing[d, s] and rng.random() < 0.5)]
    frame = pd.DataFrame(rows)  # half the missing cells are rows with a null score, half no row at all
    found = correlation.tie_calibrated(frame, "m", "human_q")  # the default: per item
    assert found.value == pytest.approx(expected, abs=1e-12)
    assert found.epsilon == pytest.approx(expected_eps, abs=1e-12)
    pooled = correlation.tie_calibrated(frame, "m", "human_q", average="pool")
    assert pooled.value == pytest.approx(naive_acc_eq(frame.dropna()["m"].to_numpy(), frame.dropna()["human_q"].to_numpy(),
                                                      frame.dropna()["doc_id"].to_numpy())[0], abs=1e-12)


def test_per_item_and_pooled_differ_as_worked_out_by_hand():
    # item x: 2 systems, 1 pair, ordered alike; item y: 3 systems, 3 pairs, all reversed (no ties)
    groups = ["x", "x", "y", "y", "y"]
    human = np.array([1.0, 2.0, 1.0, 2.0, 3.0])
    metric = np.array([0.1, 0.9, 0.9, 0.5, 0.1])
    # eps = 0: item x 1/1, item y 0/3 -> per item 0.5, pooled 1/4; a larger eps only loses x's pair
    assert tie_calibrated_accuracy(metric, human, groups) == (0.5, 0.0)
    assert tie_calibrated_accuracy(metric, human, groups, average="pool") == (0.25, 0.0)
    with pytest.raises(ValueError, match="unknown averaging"):
        tie_calibrated_accuracy(metric, human, groups, average="mean")


def test_ties_are_rewarded_only_with_a_threshold():
    """A metric that is the humans' ordinal score plus a little noise: without ties it cannot
    match the human ties; the calibrated epsilon absorbs the noise and reaches 1."""
    human = np.array([1, 1, 2, 2, 3, 3], dtype=float)
    metric = human + np.array([0.0, 0.01, 0.0, -0.01, 0.02, 0.0])
    value, epsilon = tie_calibrated_accuracy(metric, human)
    assert value == 1.0 and 0.01 <= epsilon < 0.97


def test_both_measures_appear_in_the_correlation_table_at_their_levels():
    rng = np.random.default_rng(2)
    rows = [{"doc_id": d, "system": s, "human_x": float(rng.integers(1, 5)), "m": float(rng.normal())}
            for d in range(8) for s in ("A", "B", "C")]
    frame = pd.DataFrame(rows)
    table = correlation.correlation_table(frame, ["m"], ["human_x"])
    found = {(c.level, c.method): c for c in table}
    assert ("system", "soft_pairwise_accuracy") in found and ("sample", "tie_calibrated_accuracy") in found
    assert ("sample", "soft_pairwise_accuracy") not in found and ("system", "tie_calibrated_accuracy") not in found
    spa = found[("system", "soft_pairwise_accuracy")]
    grid = frame.pivot_table(index="doc_id", columns="system", values=["m", "human_x"])
    assert spa.value == pytest.approx(soft_pairwise_accuracy(grid["m"].to_numpy(), grid["human_x"].to_numpy()))
    acc = found[("sample", "tie_calibrated_accuracy")]
    expected, eps = naive_acc_eq(frame["m"].to_numpy(), frame["human_x"].to_numpy(), frame["doc_id"].to_numpy())
    assert acc.value == pytest.approx(expected) and acc.epsilon == pytest.approx(eps)


def test_meta_reports_both_beside_the_correlations(tmp_path):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctgscore.testing.cli import run_cli

    rng = np.random.default_rng(3)
    docs, systems = 8, ["A", "B", "C", "D"]
    human = rng.integers(1, 5, size=docs * len(systems)).astype(float)
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({
        "id": [f"r{k}" for k in range(len(human))], "doc_id": [str(k // len(systems)) for k in range(len(human))],
        "system": systems * docs, "human_quality": human, "m1": human + rng.normal(0, 1, len(human)),
        "m2": rng.normal(size=len(human)), "error": [None] * len(human)}), path)
    out = tmp_path / "report"
    proc = run_cli(["meta", "-s", path, "-o", out, "--tasks", "0", "--resamples", "20", "--no-checklist"])
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    found = {(c["metric"], c["level"], c["method"]): c for c in results["groups"][0]["correlations"]}
    grid = pd.read_parquet(path).pivot_table(index="doc_id", columns="system", values=["m1", "human_quality"])
    spa = found[("m1", "system", "soft_pairwise_accuracy")]["value"]
    assert spa == pytest.approx(soft_pairwise_accuracy(grid["m1"].to_numpy(), grid["human_quality"].to_numpy()))
    frame = pd.read_parquet(path)
    expected, eps = naive_acc_eq(frame["m1"].to_numpy(), human, frame["doc_id"].to_numpy())
    acc = found[("m1", "sample", "tie_calibrated_accuracy")]
    assert acc["value"] == pytest.approx(expected) and acc["epsilon"] == pytest.approx(eps)
    report = (out / "report.md").read_text()
    assert "system soft_pairwise_accuracy" in report and "sample tie_calibrated_accuracy" in report


def test_too_many_pairs_is_undefined_not_a_memory_blow_up(monkeypatch):
    from meta_eval import pairwise

    metric, human = np.arange(10.0), np.arange(10.0)
    assert tie_calibrated_accuracy(metric, human) == (1.0, 0.0)  # 45 pairs, all ordered alike
    monkeypatch.setattr(pairwise, "MAX_PAIRS", 44)
    value, epsilon = tie_calibrated_accuracy(metric, human)
    assert np.isnan(value) and np.isnan(epsilon)
    assert tie_calibrated_accuracy(metric, human, groups=[0, 1] * 5)[0] == 1.0  # 2 x 10 pairs: under the cap


def test_meta_takes_the_averaging_and_spa_settings_into_its_signature(cli, tmp_path):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    systems = ["A", "B", "C", "D"]
    # 20 documents every system has (SPA's units: sampled flips), 6 more with missing cells
    rows = [(d, s) for d in range(26) for s in systems if d < 20 or rng.random() < 0.6]
    human = rng.integers(1, 4, size=len(rows)).astype(float)
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({
        "id": [f"r{k}" for k in range(len(rows))], "doc_id": [f"d{d}" for d, _ in rows], "system": [s for _, s in rows],
        "human_quality": human, "m1": np.round(human + rng.normal(0, 0.8, len(rows)), 1),
        "m2": rng.normal(size=len(rows)), "error": [None] * len(rows)}), path)
    frame = pd.read_parquet(path)
    found = {}
    for averaging, seed in (("item", "0"), ("pool", "3")):
        out = tmp_path / averaging
        proc = cli(["meta", "-s", path, "-o", out, "--tasks", "0", "--resamples", "50", "--seed", seed, "--no-checklist",
                    "--no-compare-systems", "--tie-averaging", averaging])
        assert proc.returncode == 0, proc.stderr
        results = json.loads((out / "results.json").read_text())
        assert f'tie_calibrated_accuracy:{{"average":"{averaging}"}}' in results["signature"]
        assert f'soft_pairwise_accuracy:{{"permutations":50,"seed":{seed}}}' in results["signature"]
        found[averaging] = {(c["metric"], c["method"]): c for c in results["groups"][0]["correlations"]}
    for averaging in ("item", "pool"):
        expected, eps = naive_acc_eq(frame["m1"].to_numpy(), human, frame["doc_id"].to_numpy(), averaging)
        acc = found[averaging][("m1", "tie_calibrated_accuracy")]
        assert acc["value"] == pytest.approx(expected, abs=1e-12) and acc["epsilon"] == pytest.approx(eps)
    assert found["item"][("m1", "tie_calibrated_accuracy")]["value"] != found["pool"][("m1", "tie_calibrated_accuracy")]["value"]
    # 20 complete documents: sampled flips, 50 of them from the seed given
    grid = frame.pivot_table(index="doc_id", columns="system", values=["m1", "human_quality"]).dropna()
    for averaging, seed in (("item", 0), ("pool", 3)):
        spa = found[averaging][("m1", "soft_pairwise_accuracy")]["value"]
        assert spa == soft_pairwise_accuracy(grid["m1"].to_numpy(), grid["human_quality"].to_numpy(), trials=50, seed=seed)
    assert found["item"][("m1", "soft_pairwise_accuracy")]["value"] != found["pool"][("m1", "soft_pairwise_accuracy")]["value"]


def test_an_unknown_averaging_is_a_usage_error():
    from meta_eval.pipeline import Options
    from scoring.errors import UsageError

    assert Options().tie_averaging == "item" and Options(resamples=0).spa_trials == 1000
    with pytest.raises(UsageError, match="tie averaging 'mean'"):
        Options.from_mapping({"tie_averaging": "mean"})

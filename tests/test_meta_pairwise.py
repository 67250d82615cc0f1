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


def naive_acc_eq(metric, human, groups):
    pairs = [(a, b) for a in range(len(metric)) for b in range(a + 1, len(metric)) if groups[a] == groups[b]]
    candidates = sorted({0.0} | {abs(metric[a] - metric[b]) for a, b in pairs})
    best = (-1.0, None)
    for eps in candidates:
        correct = 0
        for a, b in pairs:
            dh, dm = human[a] - human[b], metric[a] - metric[b]
            metric_tie = abs(dm) <= eps
            if dh == 0:
                correct += metric_tie
            else:
                correct += (not metric_tie) and (dm > 0) == (dh > 0)
        if correct / len(pairs) > best[0]:
            best = (correct / len(pairs), eps)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_tie_calibrated_accuracy_equals_the_naive_definition(seed):
    rng = np.random.default_rng(seed)
    n = 40
    groups = rng.integers(0, 6, size=n).astype(str)
    human = rng.integers(1, 4, size=n).astype(float)  # many human ties
    metric = np.round(human + rng.normal(0, 0.8, size=n), 1)  # some metric ties too
    value, epsilon = tie_calibrated_accuracy(metric, human, groups)
    expected, expected_eps = naive_acc_eq(metric, human, groups)
    assert value == pytest.approx(expected, abs=1e-12)
    assert epsilon == pytest.approx(expected_eps, abs=1e-12)


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

"""Hostile numbers in stored scores and human ratings (`docs/meta_eval.md`, "Numbers at the ends of
float64"): scores near 1e308 or below 1e-12, integers beyond 2**53, undefined preference labels,
extreme --seed / --resamples, and many systems. Each case failed on the code before it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from meta_eval import checklist, compare, correlation, numbers, pairwise
from meta_eval.bootstrap import compare_metrics
from meta_eval.io import read_scores
from meta_eval.pipeline import Options
from scoring.errors import InputError, UsageError

HUGE = np.array([1.0, -1.0, 1.0, -1.0, 0.5]) * 1e308


def test_pearson_of_scores_near_1e308_is_the_pearson_of_the_scaled_scores():
    """scipy's sums overflowed and the old code reported r = 0.0, a confident wrong number."""
    human = np.arange(5.0)
    want = stats.pearsonr(HUGE / 1e308, human).statistic  # -1 / sqrt(42)
    assert correlation.correlate(HUGE, human, "pearson") == pytest.approx(want, abs=1e-12)
    assert want == pytest.approx(-1 / np.sqrt(42))
    # and scores that differ only in their last bits keep those differences (the mean near 1 lost them)
    tiny = 1.0 + np.array([0, 0, 0, 1]) * 2.0**-52
    assert correlation.correlate(tiny, [1, 2, 3, 4], "pearson") == pytest.approx(np.sqrt(0.6), abs=1e-12)


def test_system_level_on_scores_near_1e308_and_near_1e_minus_15():
    # systems s1, s2, s3 with two rows each: the means of s1 (1e308 twice) overflowed to inf
    frame = pd.DataFrame({"m": [1e308, 1e308, -1e308, -1e308, 1.0, 2.0], "h": [3.0, 3.0, 1.0, 1.0, 2.0, 2.0],
                          "system": ["s1", "s1", "s2", "s2", "s3", "s3"]})
    for method in ("pearson", "spearman"):
        got = correlation.system_level(frame, "m", "h", method).value
        assert got == pytest.approx(1.0), method  # 1e308 > ~0 > -1e308 against 3 > 2 > 1
    # probabilities near 1e-15: every mean rounded to 12 decimals was 0, so "undefined"
    small = frame.assign(m=[3e-15, 3e-15, 1e-15, 1e-15, 2e-15, 2e-15])
    assert correlation.system_level(small, "m", "h", "spearman").value == pytest.approx(1.0)


def test_bootstrap_and_permutation_at_system_level_stay_defined_near_1e308():
    rng = np.random.default_rng(0)
    doc, system = np.repeat(np.arange(8), 4), np.tile(np.arange(4), 8)
    human = system + rng.normal(scale=0.1, size=32)
    metrics = np.column_stack([system * 1e307 + 1e307, -human])  # two rows' sum of 4e307 ... overflows at 8 docs
    block = compare_metrics(metrics, ["a", "b"], human, "h", "system", "spearman", doc=doc, system=system,
                            n_resamples=50, seed=1)
    comp = block.comparison("a", "b")
    assert comp.defined and comp.corr_a == pytest.approx(1.0) and comp.corr_b == pytest.approx(-1.0)
    assert comp.significant


def test_numbers_scale_only_outside_the_ordinary_range():
    assert numbers.exponent([0.3, -2.0, 100.0]) == 0  # ordinary scores are left bit-for-bit as they are
    assert numbers.exponent([np.nan, np.inf]) == 0
    values, k = numbers.scaled([1e308, -1e308, np.inf, np.nan])
    assert 0.5 <= np.nanmax(np.abs(values[:2])) < 1 and np.isinf(values[2]) and np.isnan(values[3])
    assert numbers.unscaled(values, k)[:2].tolist() == [1e308, -1e308]
    assert numbers.finite_mean([1e308, 1e308, np.inf]) == 1e308


def test_tie_calibrated_accuracy_and_spa_near_1e308():
    acc, eps = pairwise.tie_calibrated_accuracy([1e308, 1.5e308, -1e308, -1e308], [2.0, 3.0, 1.0, 1.0])
    assert (acc, eps) == (1.0, 0.0)  # every order right, the tie a tie
    metric = np.array([[1e308, -1e308, 0.0]] * 13) + np.arange(13)[:, None] * 1e306
    human = np.array([[3.0, 1.0, 2.0]] * 13)
    assert pairwise.soft_pairwise_accuracy(metric, human, trials=50) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="trials >= 1"):  # no permutations: every p was 1, SPA 1.0
        pairwise.soft_pairwise_accuracy(metric, human, trials=0)


def test_a_system_without_a_finite_mean_has_no_preference_label():
    """A NaN mean compared neither < nor > and read as "a=b": a tie claimed from no evidence."""
    assert checklist.preference_label(float("nan"), 1.0) is None
    assert checklist.preference_label(float("inf"), float("inf")) is None
    frame = pd.DataFrame({"system": ["a", "a", "b", "b", "c", "c"], "m": [np.nan, np.nan, 1.0, 2.0, 3.0, 4.0],
                          "h": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
    labels = checklist.system_preferences(frame, "m", [("a", "b"), ("b", "c")])
    assert labels == [None, "a<b"]  # b below c
    human = checklist.system_preferences(frame, "h", [("a", "b"), ("b", "c")])
    assert checklist.mean_preference_similarity(labels, human) == 1.0  # the undefined pair is left out
    assert np.isnan(checklist.mean_preference_similarity([None], ["a<b"]))
    # the means are over finite scores, without overflow
    big = pd.DataFrame({"system": ["a", "a", "b", "b"], "m": [1e308, 1e308, 1.7e308, np.inf]})
    assert checklist.group_means(big, "m").tolist() == [1e308, 1.7e308]


def write(frame: pd.DataFrame | dict, path) -> str:
    table = pa.table(frame) if isinstance(frame, dict) else pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table, path)
    return str(path)


def dump(n=24, **columns) -> dict:
    rng = np.random.default_rng(0)
    base = {"id": [f"r{i}" for i in range(n)], "doc_id": [f"d{i // 4}" for i in range(n)],
            "system": [f"s{i % 4}" for i in range(n)], "human_q": rng.normal(size=n), "m2": rng.normal(size=n)}
    return {**base, **columns}


@pytest.mark.parametrize("kind", [pa.int64(), pa.uint64()])
def test_integers_beyond_2_to_the_53_are_refused_naming_column_and_row(tmp_path, kind):
    values = pa.array([2**53 + i for i in range(24)], kind)
    path = write(dump(m=values), tmp_path / "s.parquet")
    with pytest.raises(InputError, match=r"column 'm', id 'r1': integer 9007199254740993 is beyond float64"):
        read_scores(path)
    from ctgscore.cli.compare import compare_scores

    with pytest.raises(InputError, match=r"column 'm', row 1: integer 9007199254740993"):  # was ArrowInvalid
        compare_scores(path, ["m"], None, dict(n_resamples=20, trials=20), 0, 1.0)
    exact = write(dump(m=pa.array([2**53 - i for i in range(24)], kind)), tmp_path / "ok.parquet")
    assert read_scores(exact).frame["m"].max() == 2**53  # up to 2**53 every integer is exact


def test_meta_on_scores_near_1e308_gives_numbers_and_a_report(tmp_path, cli):
    """The report's leaderboard plot could not draw an axis from -1e308 to 1e308 (LinAlgError)."""
    path = write(dump(m=[1e308 * (-1) ** i for i in range(24)]), tmp_path / "s.parquet")
    out = tmp_path / "report"
    proc = cli(["meta", "-s", path, "-o", out, "--resamples", "20", "--trials", "20", "--no-progress",
                "--methods", "pearson", "spearman"])
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    (group,) = results["groups"]
    values = {(c["metric"], c["level"], c["method"]): c["value"] for c in group["correlations"]}
    assert all(values[("m", level, "pearson")] is not None for level in ("sample", "document", "system"))
    board = next(s for s in group["systems"] if s["column"] == "m")
    assert sorted(s["mean"] for s in board["systems"]) == [-1e308, -1e308, 1e308, 1e308]


def test_extreme_seeds_and_counts_are_usage_errors(tmp_path, cli):
    path = write(dump(m=np.arange(24.0)), tmp_path / "s.parquet")
    for flags, message in ((["--seed", "-1"], "--seed -1: must be >= 0"),
                           (["--resamples", str(10**9)], "--resamples 1,000,000,000: at most 1,000,000")):
        for command in (["meta", "-s", path, "-o", str(tmp_path / "r")], ["compare", "-s", path]):
            proc = cli(command + flags)
            assert proc.returncode == 2 and message in proc.stderr, (command, flags, proc.stderr)
    with pytest.raises(UsageError, match="seed -3"):
        Options(seed=-3).validate()
    with pytest.raises(UsageError, match="trials"):
        compare.compare_units(np.ones((3, 2)), ["a", "b"], 0, column="m", trials=10**7)
    assert Options(seed=2**70).validate() is None  # any non-negative seed is a seed


def test_many_systems_memory_follows_the_output_and_a_limit_names_itself():
    rng = np.random.default_rng(3)
    values = rng.normal(size=(20, 300)) + np.arange(300) / 100
    import tracemalloc

    tracemalloc.start()
    comp = compare.compare_units(values, [f"s{k}" for k in range(300)], 0, column="m", n_resamples=200,
                                 trials=2000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # 44,850 pairs: all (trials x pairs) differences at once held 2000 x 44,850 x 8 B = 718 MB
    assert len(comp.pairs) == 44_850 and peak < 200e6, peak
    with pytest.raises(InputError, match="1,001 systems make 500,500 pairs; at most 1,000"):
        compare.compare_units(np.ones((2, 1001)), [f"s{k}" for k in range(1001)], 0, column="m")
    frame = pd.DataFrame({"doc_id": np.repeat(np.arange(50), 200), "system": np.tile(np.arange(200), 50),
                          "m": rng.normal(size=10_000)})
    tracemalloc.start()
    wins = checklist.win_fractions(frame, "m")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert wins.shape == (200, 200) and peak < 30e6, peak  # was docs x systems^2 booleans, several of them


def test_pairwise_accuracy_from_counts_equals_the_sign_definition_without_n_squared_memory():
    def by_signs(x, y):
        upper = np.triu_indices(len(x), k=1)
        return float((np.sign(x[:, None] - x[None, :])[upper] == np.sign(y[:, None] - y[None, :])[upper]).mean())

    rng = np.random.default_rng(5)
    for trial in range(400):  # ties in x, in y, in both, constant sides, scores near 1e308
        n = int(rng.integers(2, 30))
        x = rng.integers(0, int(rng.integers(1, 5)), n) * (3e307 if trial % 5 == 0 else 1.0)
        y = rng.integers(0, int(rng.integers(1, 5)), n).astype(float)
        assert correlation.pairwise_accuracy(x, y) == by_signs(x, y), (x, y)
    assert np.isnan(correlation.pairwise_accuracy([1.0, np.inf], [1.0, 2.0]))  # undefined, not a count
    import tracemalloc

    x, y = rng.normal(size=5000), rng.normal(size=5000)
    tracemalloc.start()
    correlation.pairwise_accuracy(x, y)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 5e6, peak  # the sign matrices held 5000^2 values, several times (> 200 MB)


def test_compmctg_means_leave_out_infinite_values_count_them_and_do_not_overflow():
    from meta_eval import compmctg

    frame = pd.DataFrame({"attr:s": ["a", "a", "b", "b"], "attribute_accuracy_s": [1.0, 0.0, 1.0, np.inf],
                          "perplexity": [1e308, 1e308, np.inf, 5.0]})
    splits = {"aspects": ["s"], "signature": {"protocol": "holdout"},
              "splits": [{"seen": [{"s": "a"}], "unseen": [{"s": "b"}]}]}
    (row,) = compmctg.results_table(frame, [("d", splits)])["datasets"]["d"]["protocols"]
    # before: P_iid inf (1e308 + 1e308 overflowed), A_comp inf and a gap of -inf
    assert (row["A_iid"], row["A_comp"], row["P_iid"], row["P_comp"]) == (0.5, 1.0, 1e308, 5.0)
    assert row["per_split"][0]["infinite_left_out"] == {"attribute_accuracy_s": 1, "perplexity": 1}


def test_codi_scores_nan_counts_as_unscored_and_values_out_of_range_are_named():
    from meta_eval import codi

    rows = [{"id": f"r{i}", "system": "s", "constraint": json.dumps({"task": "length"}), "text": "a b"}
            for i in range(3)]
    scores = [{"id": "r0", "codi_success": 1.0, "error": None}, {"id": "r1", "codi_success": float("nan"), "error": None},
              {"id": "r2", "codi_success": 0.0, "error": None}]
    result = codi.task_accuracy(codi._records(rows, scores))
    # a NaN success was a silent failure, not counted among the rows that could not be scored
    assert (result["n_success"], result["n_errors"], result["accuracy"]) == (1, 1, pytest.approx(1 / 3))
    for column, bad in (("codi_success", 2.0), ("codi_success", float("inf")), ("codi_toxicity", -0.5),
                        ("codi_success", "1")):
        hostile = [dict(s) for s in scores]
        hostile[2][column] = bad
        with pytest.raises(InputError, match=rf"scores row 2 \(id 'r2'\): {column} = .* is not"):
            codi._records(rows, hostile)


def test_a_column_with_too_few_finite_values_in_a_group_is_named_not_dropped_in_silence(tmp_path):
    from meta_eval.pipeline import run_meta

    values = dump(m=np.arange(24.0))
    values["m3"] = [np.inf if i % 2 else np.nan for i in range(22)] + [1.0, 2.0]  # two finite values
    table = read_scores(write(values, tmp_path / "s.parquet"))
    (group,) = run_meta(table, Options(resamples=0, methods=["spearman"], levels=["sample"])).groups
    assert "m3" not in group.metrics and group.omitted["column m3"] == "2 finite values in this group, fewer than 3"


def test_errors_quote_a_huge_id_or_value_cut_with_its_length(tmp_path):
    """An id or stored value of 100,000 characters is quoted cut, with its length, in the error
    that names it (the old messages printed its whole repr)."""
    from meta_eval import codi

    huge = "x" * 100_000
    ids = [huge] + [f"r{i}" for i in range(1, 24)]
    path = write(dump(id=ids, m=pa.array([2**53 + 1] + [0] * 23, pa.int64())), tmp_path / "s.parquet")
    with pytest.raises(InputError) as refused:
        read_scores(path)
    assert "…(100,000 characters)" in str(refused.value) and len(str(refused.value)) < 500
    rows = [{"id": huge, "constraint": "{}"}]
    for scores in ([{"id": huge, "codi_success": huge}], [{"id": "other", "codi_success": 1.0}]):
        with pytest.raises((InputError, ValueError)) as refused:
            codi.aggregate(rows, scores)
        assert "…(100,000 characters)" in str(refused.value) and len(str(refused.value)) < 500

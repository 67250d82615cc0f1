"""Paired bootstrap: resample statistics equal scipy by hand; same answer in-process and for 1 and 4 Ray tasks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from meta_eval import bootstrap

A, B, H = "human_fluency", "human_consistency", "human_coherence"


@pytest.fixture(scope="module")
def summeval(shared_data):
    return pd.read_parquet(shared_data / "corpora" / "summeval.parquet")


def _arrays(frame):
    return frame[[A, B]].to_numpy(float), frame[H].to_numpy(float)


@pytest.mark.parametrize("batch_rows", [bootstrap.BATCH_ROWS, 0], ids=["batched", "per-resample"])
def test_sample_level_resamples_equal_scipy_on_the_same_rows(summeval, monkeypatch, batch_rows):
    monkeypatch.setattr(bootstrap, "BATCH_ROWS", batch_rows)
    metrics, human = _arrays(summeval)
    prep = bootstrap.prepare(metrics, human, "sample", ("pearson", "spearman", "kendall"))
    got = bootstrap.run_blocks(prep, seed=3, blocks=[(2, 4)])
    counts = bootstrap.block_counts(len(human), 3, 2, 4)
    for r in range(4):
        rows = np.repeat(np.arange(len(human)), counts[r])
        for j in range(2):
            x, y = metrics[rows, j], human[rows]
            assert got["pearson"][r, j] == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
            assert got["spearman"][r, j] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
            assert got["kendall"][r, j] == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)


def test_resample_blocks_do_not_depend_on_grouping():
    whole = bootstrap.block_counts(50, 11, 0, 25)
    again = bootstrap.block_counts(50, 11, 0, 25)
    other_block = bootstrap.block_counts(50, 11, 1, 25)
    assert (whole == again).all() and not (whole == other_block).all()
    assert (whole.sum(axis=1) == 50).all()
    assert bootstrap.plan_blocks(60) == [(0, 25), (1, 25), (2, 10)]


def test_document_level_resamples_by_hand(summeval):
    metrics, human = _arrays(summeval)
    docs = summeval["doc_id"].to_numpy()
    prep = bootstrap.prepare(metrics, human, "document", ("kendall",), doc=docs,
                             system=summeval["system"].to_numpy())
    got = bootstrap.run_blocks(prep, seed=5, blocks=[(0, 3)])["kendall"]
    counts = bootstrap.block_counts(summeval["doc_id"].nunique(), 5, 0, 3)
    names = np.sort(summeval["doc_id"].unique())
    per_doc = {}
    for name, g in summeval.groupby("doc_id"):
        per_doc[name] = [stats.kendalltau(g[c], g[H]).statistic if g[c].nunique() > 1 and g[H].nunique() > 1
                         else np.nan for c in (A, B)]
    for r in range(3):
        drawn = np.repeat(names, counts[r])
        values = np.array([per_doc[d] for d in drawn])
        assert got[r] == pytest.approx(np.nanmean(values, axis=0), abs=1e-12)


def test_system_level_resamples_by_hand(summeval):
    metrics, human = _arrays(summeval)
    prep = bootstrap.prepare(metrics, human, "system", ("spearman",), doc=summeval["doc_id"].to_numpy(),
                             system=summeval["system"].to_numpy())
    got = bootstrap.run_blocks(prep, seed=9, blocks=[(1, 2)])["spearman"]
    counts = bootstrap.block_counts(summeval["doc_id"].nunique(), 9, 1, 2)
    names = np.sort(summeval["doc_id"].unique())
    groups = dict(tuple(summeval.groupby("doc_id")))
    for r in range(2):
        resampled = pd.concat([groups[d] for d in np.repeat(names, counts[r])])
        # system means rounded to 12 decimals so equal means tie (meta_eval.correlation.MEAN_DECIMALS)
        means = resampled.groupby("system")[[A, B, H]].mean().round(12)
        for j, col in enumerate((A, B)):
            assert got[r, j] == pytest.approx(stats.spearmanr(means[col], means[H]).statistic, abs=1e-12)


def test_p_value_and_intervals_from_the_distribution(summeval):
    metrics, human = _arrays(summeval)
    res = bootstrap.paired_bootstrap(metrics[:, 0], metrics[:, 1], human, n_resamples=60, seed=1,
                                     method="spearman")
    prep = bootstrap.prepare(metrics, human, "sample", ("spearman",))
    dist = bootstrap.bootstrap_distribution(prep, 60, seed=1)["spearman"]
    diff = dist[:, 0] - dist[:, 1]
    # two-sided, (N + 1) rule: 2 (min(#d <= 0, #d >= 0) + 1) / (N + 1)
    assert res.p_value == pytest.approx(min(1, 2 * (min(np.sum(diff <= 0), np.sum(diff >= 0)) + 1) / 61))
    # order statistics d_(k), d_(N+1-k) with k = floor(0.05 * 61 / 2) = 1
    assert [res.ci_diff.low, res.ci_diff.high] == [np.sort(diff)[0], np.sort(diff)[-1]]
    assert [res.ci_a.low, res.ci_a.high] == pytest.approx(np.percentile(dist[:, 0], [2.5, 97.5]).tolist())
    assert res.corr_a == pytest.approx(stats.spearmanr(metrics[:, 0], human).statistic)
    assert res.significant == (res.p_value <= 0.05) == (res.ci_diff.low > 0)
    assert res.sided == "two-sided" and res.alpha == 0.05
    block = bootstrap.compare_metrics(metrics, ["f", "c"], human, H, n_resamples=60, seed=1)
    assert "seed:1" in block.signature and "resamples:60" in block.signature
    assert block.comparison("f", "c").p_value == res.p_value == block.comparison("c", "f").p_value


def test_needs_finite_scores():
    with pytest.raises(ValueError, match="finite"):
        bootstrap.prepare(np.array([[1.0], [np.nan]]), np.array([1.0, 2.0]))


def test_meta_eval_never_imports_ray():
    import subprocess
    import sys

    code = ("import sys, meta_eval.bootstrap, meta_eval.pipeline, meta_eval.compare, meta_eval.report, meta_eval.codi; "
            "sys.exit(1 if 'ray' in sys.modules or 'ray_jobs' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("level", ["sample", "document"])
def test_same_answer_with_1_and_4_ray_tasks(ray_local, summeval, level):
    from ray_jobs.runners import ray_runner

    metrics, human = _arrays(summeval)
    kwargs = dict(level=level, method="kendall", n_resamples=200, seed=42,
                  doc=summeval["doc_id"].to_numpy(), system=summeval["system"].to_numpy())
    one = bootstrap.paired_bootstrap(metrics[:, 0], metrics[:, 1], human, runner=ray_runner(1), **kwargs)
    four = bootstrap.paired_bootstrap(metrics[:, 0], metrics[:, 1], human, runner=ray_runner(4), **kwargs)
    local = bootstrap.paired_bootstrap(metrics[:, 0], metrics[:, 1], human, **kwargs)
    assert one == four == local
    assert 0 < one.p_value <= 1
    assert one.ci_a.low <= one.corr_a <= one.ci_a.high
    assert one.n_valid == 200
    other_seed = bootstrap.paired_bootstrap(metrics[:, 0], metrics[:, 1], human, **{**kwargs, "seed": 43})
    assert other_seed.ci_diff != one.ci_diff


def test_darr_pairs_bootstrap_by_hand(shared_data):
    frame = pd.read_parquet(shared_data / "corpora" / "wmt19_darr_kk_en.parquet")
    words = frame["text"].str.split().str.len().to_numpy(float)
    chars = frame["text"].str.len().to_numpy(float)
    metrics = np.column_stack([words, chars])
    better = frame["human_darr_better"].to_numpy(float)
    res = bootstrap.paired_bootstrap(words, chars, better, level="darr", method="darr",
                                     doc=frame["doc_id"].to_numpy(), n_resamples=30, seed=4)
    table = pd.DataFrame({"pair": frame["doc_id"], "better": better, "w": words, "c": chars})
    wide = table.pivot(index="pair", columns="better")  # pairs sorted like pandas.factorize(sort=True)
    signs = {name: np.where(wide[(name, 1.0)] > wide[(name, 0.0)], 1, -1) for name in ("w", "c")}
    assert res.corr_a == pytest.approx(signs["w"].mean())
    assert res.corr_b == pytest.approx(signs["c"].mean())
    counts = bootstrap.block_counts(len(wide), 4, 0, 25)
    dist = bootstrap.run_blocks(bootstrap.prepare(metrics, better, "darr", ("darr",), doc=frame["doc_id"].to_numpy()),
                                4, [(0, 25)])["darr"]
    for r in range(3):
        drawn = np.repeat(np.arange(len(wide)), counts[r])
        assert dist[r, 0] == pytest.approx(signs["w"][drawn].mean())
        assert dist[r, 1] == pytest.approx(signs["c"][drawn].mean())


def test_pearson_of_ranks_is_pearsonr():
    rng = np.random.default_rng(3)
    x = stats.rankdata(rng.integers(0, 50, 2000))
    y = stats.rankdata(x + rng.normal(0, 20, 2000))
    assert bootstrap.pearson_of_ranks(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-14)
    assert np.isnan(bootstrap.pearson_of_ranks(np.full(10, 5.5), y[:10]))
    assert np.isnan(bootstrap.pearson_of_ranks(y[:10], np.full(10, 5.5)))

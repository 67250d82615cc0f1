"""Three-level correlations and WMT DARR tau against scipy applied by hand (issue 4, acceptance 2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from meta_eval import correlation

SCIPY = {
    "pearson": lambda x, y: stats.pearsonr(x, y).statistic,
    "spearman": lambda x, y: stats.spearmanr(x, y).statistic,
    "kendall": lambda x, y: stats.kendalltau(x, y).statistic,
    "kendall-c": lambda x, y: stats.kendalltau(x, y, variant="c").statistic,
}


def _by_hand(frame, metric, human, method, doc_col="doc_id", system_col="system"):
    fn = SCIPY[method]
    sample = fn(frame[metric].to_numpy(), frame[human].to_numpy())
    per_doc = []
    for _, g in frame.groupby(doc_col):
        if g[metric].nunique() > 1 and g[human].nunique() > 1:
            per_doc.append(fn(g[metric].to_numpy(), g[human].to_numpy()))
    means = frame.groupby(system_col)[[metric, human]].mean().round(12)  # equal means tie
    system = fn(means[metric].to_numpy(), means[human].to_numpy())
    return sample, float(np.mean(per_doc)), system


def _check(frame, metric, human, system_col="system"):
    for method in ("pearson", "spearman", "kendall", "kendall-c"):
        name, variant = (method.split("-") + ["b"])[:2]
        sample, document, system = _by_hand(frame, metric, human, method, system_col=system_col)
        got = {lvl: correlation.at_level(frame, metric, human, lvl, name, variant, system_col=system_col).value
               for lvl in correlation.LEVELS}
        assert got["sample"] == pytest.approx(sample, abs=1e-12), method
        assert got["document"] == pytest.approx(document, abs=1e-12), method
        assert got["system"] == pytest.approx(system, abs=1e-12), method


@pytest.fixture(scope="module")
def summeval(shared_data):
    frame = pd.read_parquet(shared_data / "corpora" / "summeval.parquet")
    frame["length"] = frame["text"].str.split().str.len().astype(float)
    return frame


def test_summeval_shape(summeval):
    assert summeval["system"].nunique() == 16
    assert summeval["doc_id"].nunique() in (100, 20)  # the full set, or the committed slice
    assert (summeval.groupby("doc_id")["system"].nunique() == 16).all()


@pytest.mark.parametrize("metric,human", [("human_fluency", "human_coherence"),
                                          ("length", "human_relevance"),
                                          ("human_consistency", "human_fluency")])
def test_summeval_three_levels_equal_scipy(summeval, metric, human):
    _check(summeval, metric, human)


@pytest.mark.parametrize("name", ["ctrleval_topic", "ctrleval_senti"])
def test_ctrleval_three_levels_equal_scipy(shared_data, name):
    frame = pd.read_parquet(shared_data / "corpora" / f"{name}.parquet")
    frame["length"] = frame["text"].str.len().astype(float)
    assert frame["system"].isna().all()  # CTRLEval has no system: group by attribute instead
    _check(frame, "length", "human_coherence", system_col="attribute")
    _check(frame, "human_relevance", "human_consistency", system_col="attribute")


def test_document_level_counts_undefined_documents():
    frame = pd.DataFrame({"doc_id": ["a"] * 3 + ["b"] * 3, "system": list("xyz") * 2,
                          "m": [1.0, 2.0, 3.0, 5.0, 5.0, 5.0], "h": [1.0, 3.0, 2.0, 1.0, 2.0, 3.0]})
    res = correlation.document_level(frame, "m", "h", "pearson")
    assert res.n == 1 and res.n_undefined == 1
    assert res.value == pytest.approx(stats.pearsonr([1, 2, 3], [1, 3, 2]).statistic)


def test_correlation_table_skips_levels_without_groups(shared_data):
    frame = pd.read_parquet(shared_data / "corpora" / "ctrleval_senti.parquet")
    rows = correlation.correlation_table(frame, ["human_relevance"], ["human_coherence"], methods=["spearman"])
    assert {r.level for r in rows} == {"sample", "document"}


def test_darr_kendall_like_tau_by_hand(shared_data):
    frame = pd.read_parquet(shared_data / "corpora" / "wmt19_darr_kk_en.parquet")
    frame["length"] = frame["text"].str.split().str.len().astype(float)
    res = correlation.darr_kendall(frame, "length")
    better = frame[frame["human_darr_better"] == 1].set_index("doc_id")["length"]
    worse = frame[frame["human_darr_better"] == 0].set_index("doc_id")["length"]
    conc = disc = 0
    for pair in better.index:
        if better[pair] > worse[pair]:
            conc += 1
        else:  # a tie counts as discordant (WMT19)
            disc += 1
    assert (res.concordant, res.discordant) == (conc, disc)
    assert res.n == frame["doc_id"].nunique() in (9728, 1000)  # the full set, or the committed slice
    assert res.value == pytest.approx((conc - disc) / (conc + disc))


def test_missing_column_is_a_clear_error(summeval):
    with pytest.raises(KeyError, match="nope"):
        correlation.sample_level(summeval, "nope", "human_coherence")


def test_transfer_table_is_a_correlation_per_dataset(shared_data):
    from meta_eval.checklist import transfer_table

    parts = [pd.read_parquet(shared_data / "corpora" / f"{n}.parquet") for n in ("summeval", "newsroom")]
    frame = pd.concat(parts, ignore_index=True)
    frame["length"] = frame["text"].str.len().astype(float)
    table = transfer_table(frame, ["length", "human_fluency"], "human_coherence", method="kendall")
    for name, part in zip(("summeval", "newsroom"), parts):
        expected = stats.kendalltau(part["text"].str.len(), part["human_coherence"]).statistic
        assert table.loc["length", name] == pytest.approx(expected)
        assert table.loc["human_fluency", name] == pytest.approx(
            stats.kendalltau(part["human_fluency"], part["human_coherence"]).statistic)

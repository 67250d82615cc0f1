"""Metric preference checklist against the original notebooks' outputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from meta_eval import checklist
from meta_eval.io import read_checklist_csv

ASPECTS = ["Understandable", "Natural", "MaintainsContext", "Engaging", "UsesKnowledge", "Overall"]


@pytest.fixture(scope="module")
def persona(shared_data):
    return read_checklist_csv(shared_data / "checklist" / "usr_persona_chat.csv")


@pytest.fixture(scope="module")
def persona_results(persona):
    return checklist.run_checklist(persona, pairs="given")


def test_system_level_ks_easy_pairs_match_notebook(persona_results):
    def ks(column):
        return persona_results.ks("easy", column)

    assert ks("human_Understandable") == pytest.approx(0.058333, abs=1e-6)
    assert ks("perplexity") == pytest.approx(0.394444, abs=1e-6)
    # further values of the notebook (Quality-Eval, system-level KS on Easy pairs)
    assert ks("human_Natural") == pytest.approx(0.215741, abs=1e-6)
    assert ks("bleu") == pytest.approx(0.236111, abs=1e-6)
    assert ks("cohere_met") == pytest.approx(0.108333, abs=1e-6)


@pytest.mark.parametrize("metric,expected", [("perplexity", 0.5556), ("bleu", 1.0), ("rouge1", 0.7778)])
def test_preference_similarity_easy_pairs_match_notebook(persona_results, metric, expected):
    for aspect in ASPECTS:
        assert round(persona_results.similarity("easy", metric, f"human_{aspect}"), 4) == expected


def test_system_preference_labels_by_hand(persona, persona_results):
    means = persona.frame.groupby("system")[["bleu", "perplexity"]].mean()
    labels = {(item.kind, item.column): item.labels for item in persona_results.preference_labels}
    for (a, b), bleu, ppl in zip(persona.easy_pairs, labels[("easy", "bleu")], labels[("easy", "perplexity")]):
        assert bleu == ("a<b" if means.loc[a, "bleu"] < means.loc[b, "bleu"] else "b<a")
        # perplexity: lower is better, so the label follows -perplexity
        assert ppl == ("a<b" if means.loc[a, "perplexity"] > means.loc[b, "perplexity"] else "b<a")


def test_pairs_from_human_ranking_equal_the_notebook_easy_pairs(persona):
    easy, hard = checklist.easy_hard_pairs(persona.frame, persona.humans)
    assert set(easy) == set(persona.easy_pairs)
    assert len(easy) == len(set(easy))
    assert hard == []  # five systems: no Hard pairs from the ranking (needs more than six)
    derived = checklist.run_checklist(persona, pairs="ranking")
    assert derived.pairs_from == "human ranking"
    assert derived.ks("easy", "perplexity") == pytest.approx(0.394444, abs=1e-6)


def test_easy_hard_pairs_rule_on_eight_systems():
    # systems s0..s7 with human means 0..7 (ranking = name order); the paper's Easy/Hard rule
    frame = pd.DataFrame({"system": [f"s{i}" for i in range(8)], "h": np.arange(8.0)})
    easy, hard = checklist.easy_hard_pairs(frame, ["h"])
    assert easy == [("s0", "s7"), ("s0", "s6"), ("s1", "s7"), ("s1", "s6")]
    assert hard == [("s0", "s1"), ("s4", "s5"), ("s6", "s7")]


def test_sequence_similarity_examples_from_the_paper():
    assert checklist.preference_similarity("cdabe", "abcde") == pytest.approx(0.2)
    assert checklist.preference_similarity("cbed", "abcde") == pytest.approx(1 / 3)
    assert checklist.preference_similarity("a<b", "a<b") == 1.0
    assert checklist.preference_similarity("a<b", "b<a") == pytest.approx(1 / 3)
    assert checklist.preference_similarity("a<b", "a=b") == pytest.approx(2 / 3)


def test_preference_labels_flip_for_lower_is_better():
    assert checklist.preference_label(1.0, 2.0) == "a<b"
    assert checklist.preference_label(1.0, 2.0, lower_is_better=True) == "b<a"
    assert checklist.preference_label(2.0, 2.0) == "a=b"


def test_raw_rating_groups_match_stored_categories(persona):
    frame = persona.frame
    for aspect in ASPECTS:
        from_raw = checklist.quality_groups(frame, f"human_{aspect}")
        stored = checklist.quality_groups(frame, f"human_{aspect}", f"cat_{aspect}")
        assert (from_raw == stored).all(), aspect


def test_aspect_level_ks_equals_scipy_by_hand(persona):
    frame = persona.frame
    res = checklist.aspect_level(frame, "bleu", "human_Overall", "cat_Overall")
    raw = frame["human_Overall"]
    lo, mod, hi = (frame.loc[raw < 3, "bleu"], frame.loc[raw == 3, "bleu"], frame.loc[raw > 3, "bleu"])
    assert res.ks_lo_hi == pytest.approx(stats.ks_2samp(lo, hi).statistic)
    assert res.ks_lo_mod == pytest.approx(stats.ks_2samp(lo, mod).statistic)
    assert res.ks_hi_mod == pytest.approx(stats.ks_2samp(hi, mod).statistic)
    assert res.preference == ("lo<hi" if lo.mean() < hi.mean() else "hi<lo")
    assert (res.size_lo, res.size_mod, res.size_hi) == (len(lo), len(mod), len(hi))


# Quality-Eval notebook, ctrl_topic, relevance_bin (0 -> Lo, 1 -> Hi): Lo-Hi KS (cell "data_ks_score_lohi")
# and the aspect-level preference labels (cell "data_sys_prefer_lohi").
NOTEBOOK_RELEVANCE_BIN = {
    "perplexity": (0.10935435815273913, "hi<lo"), "bert_f1": (0.15730668690446076, "lo<hi"),
    "coherence_unieval": (0.060706355229502205, "hi<lo"), "ctc_e_relev": (0.19879416476937348, "lo<hi"),
    "ctc_r_consisten": (0.08804143126177025, "hi<lo"), "cohere_met": (0.059673384489979484, "hi<lo"),
    "consist_met": (0.14101807347443573, "hi<lo"), "relev_met": (0.4376212159541277, "lo<hi"),
}


def test_ctrl_topic_relevance_bin_follows_the_notebooks(shared_data):
    table = read_checklist_csv(shared_data / "checklist" / "ctrl_topic.csv")
    res = checklist.run_checklist(table)
    for metric, (ks, label) in NOTEBOOK_RELEVANCE_BIN.items():
        item = res.aspect("human_relevance_bin", metric)
        assert (item.size_lo, item.size_mod, item.size_hi) == (2412, 0, 708)
        assert item.ks_lo_hi == pytest.approx(ks, abs=1e-12), metric
        assert item.preference == label, metric
        assert np.isnan(item.ks_lo_mod)
    # rating keeps its stored fluency categories (notebook: Lo-Hi KS of perplexity 0.06534)
    assert res.aspect("human_rating", "perplexity").ks_lo_hi == pytest.approx(0.06533957845433255, abs=1e-12)
    # system-level KS of the human columns on the notebook's given pairs (cells "hum_easy", "hum_hard")
    assert res.ks("easy", "human_rating") == pytest.approx(0.11510989010989012, abs=1e-12)
    assert res.ks("easy", "human_relevance_bin") == pytest.approx(0.0968986568986569, abs=1e-12)
    assert res.ks("hard", "human_rating") == pytest.approx(0.14047619047619048, abs=1e-12)
    assert res.ks("hard", "human_relevance_bin") == pytest.approx(0.018412698412698412, abs=1e-12)


def test_binary_groups_and_their_errors():
    frame = pd.DataFrame({"h": [0.0, 1.0, 1.0, 0.0], "g": [1.0, 2.0, 3.0, 4.0]})
    assert checklist.quality_groups(frame, "h", checklist.BINARY).tolist() == ["lo", "hi", "hi", "lo"]
    assert checklist.quality_groups(frame, "h").tolist() == ["lo"] * 4  # unmarked: the rating rule (< 3)
    with pytest.raises(ValueError, match="row 2"):
        checklist.quality_groups(frame.assign(h=[0.0, 1.0, 2.0, 0.0]), "h", checklist.BINARY)


def test_win_fractions_by_hand():
    frame = pd.DataFrame({
        "doc_id": ["d1"] * 3 + ["d2"] * 3 + ["d3"] * 2,
        "system": ["A", "B", "C", "A", "B", "C", "A", "B"],
        "s": [3.0, 1.0, 2.0, 1.0, 1.0, 5.0, 0.0, 2.0],
    })
    w = checklist.win_fractions(frame, "s")
    assert w.loc["A", "B"] == pytest.approx(1 / 3)  # d1 win, d2 tie, d3 loss
    assert w.loc["B", "A"] == pytest.approx(1 / 3)
    assert w.loc["A", "C"] == pytest.approx(1 / 2)  # d1 win, d2 loss (C absent on d3)
    assert w.loc["C", "B"] == pytest.approx(1.0)
    assert np.isnan(w.loc["A", "A"])
    lower = checklist.win_fractions(frame, "s", lower_is_better=True)
    assert lower.loc["C", "B"] == pytest.approx(0.0)


def test_win_fractions_average_annotator_rows(persona):
    frame = persona.frame
    w = checklist.win_fractions(frame, "human_Overall")
    means = frame.groupby(["doc_id", "system"])["human_Overall"].mean().unstack()
    a, b = "Seq2Seq", "Original Ground Truth"
    both = means[[a, b]].dropna()
    assert w.loc[a, b] == pytest.approx((both[a] > both[b]).mean())


def test_every_checklist_file_runs(shared_data):
    for name in ["usr_topical_chat", "unieval_topical_chat", "ctrl_topic", "ctrleval_topic"]:
        table = read_checklist_csv(shared_data / "checklist" / f"{name}.csv")
        res = checklist.run_checklist(table)
        assert res.aspect_level, name
        if name == "ctrleval_topic":
            assert res.system_ks == ()  # no system column in this file
        else:
            assert {k.column for k in res.system_ks if k.kind == "easy"} == set(table.humans + table.metrics)
            for a, b in table.easy_pairs:
                assert {a, b} <= set(table.frame["system"])


def test_unknown_checklist_file_is_a_clear_error(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="other.csv"):
        read_checklist_csv(path)

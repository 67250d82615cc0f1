"""BARTScore against the original code's behaviour: Moses detokenisation of every text, and
the data-to-text multi-reference F (max over references of the per-reference mean of P and R,
with prompts: max over references inside each prompt, then the mean over prompts)."""

from __future__ import annotations

import statistics

import pyarrow.parquet as pq
import pytest
from sacremoses import MosesDetokenizer

from scoring.bartscore import BARTScoreMetric, decoder_prompted, encoder_prompted
from scoring.model_limits import ModelLimits

TOL = 1e-5


@pytest.fixture(scope="module")
def summeval_rows(sample_corpus):
    return pq.read_table(sample_corpus / "summeval-00000.parquet").to_pylist()


@pytest.fixture(scope="module")
def metric(tiny_models):
    return BARTScoreMetric(model=tiny_models["bart"], token_budget=3000)


def sacremoses_detok(text: str) -> str:
    """What the original calls: MosesDetokenizer('en') on the text split at single spaces."""
    return MosesDetokenizer(lang="en").detokenize(text.split(" "))


# ----- detokenisation --------------------------------------------------------------------------
def test_moses_detok_by_hand():
    from scoring.preprocess import moses_detokenize

    assert moses_detokenize("Rome ( CNN ) Italy is coping . From Friday , a total of 8,480 .") == \
        "Rome (CNN) Italy is coping. From Friday, a total of 8,480."
    assert moses_detokenize("Italy 's coast guard can not confirm that report .") == "Italy's coast guard can not confirm that report."
    assert moses_detokenize('He said " no " twice .') == 'He said "no" twice.'


def test_detok_equals_sacremoses_on_real_summeval_rows(summeval_rows):
    from scoring.preprocess import moses_detokenize

    texts = [t for row in summeval_rows for t in [row["source"], row["text"], *row["references"]]]
    changed = sum(moses_detokenize(t) != t for t in [row["text"] for row in summeval_rows])
    assert all(moses_detokenize(t) == sacremoses_detok(t) for t in texts)
    # the shipped rows are tokenised ("team 's", "burnley ."): nearly every summary changes
    assert changed >= 0.9 * len(summeval_rows)


def test_metric_scores_detokenised_texts(tiny_models, summeval_rows):
    rows = [dict(r) for r in summeval_rows[:4]]
    for row in rows:
        row["source"] = row["source"][:400]
        row["references"] = list(row["references"][:2])
    plain = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h", "f"])
    detok = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h", "f"], preprocess="moses_detok")
    got = detok.score_rows(rows)
    scorer = plain.scorer
    for row, result in zip(rows, got):
        source, text = sacremoses_detok(row["source"]), sacremoses_detok(row["text"])
        refs = [sacremoses_detok(r) for r in row["references"]]
        assert result["bartscore_s_h"] == pytest.approx(scorer.score([source], [text])[0], abs=TOL)
        per_ref = [(scorer.score([r], [text])[0] + scorer.score([text], [r])[0]) / 2 for r in refs]
        assert result["bartscore_f"] == pytest.approx(statistics.fmean(per_ref), abs=TOL)
    assert plain.score_rows(rows)[0]["bartscore_s_h"] != pytest.approx(got[0]["bartscore_s_h"], abs=1e-4)
    assert "moses_detok(sacremoses=" in str(detok.signature()) and "preprocess:none" in str(plain.signature())
    with pytest.raises(ValueError, match="preprocess must be one of"):
        BARTScoreMetric(model=tiny_models["bart"], preprocess="moses")


# ----- multi-reference F, by hand -------------------------------------------------------------
class TableScorer:
    """Stands in for BARTScorer with hand-chosen scores per (source, target): each text is one
    token id (`tokenizer`), `pair_scores` looks the pairs up by their texts."""

    class Tokenizer:
        eos_token_id = None

        def __init__(self):
            self.texts: list[str] = []

        def __call__(self, texts, add_special_tokens=True):
            self.texts += [text for text in dict.fromkeys(texts) if text not in self.texts]
            return {"input_ids": [[self.texts.index(text)] for text in texts]}

    def __init__(self, table: dict[tuple[str, str], float]):
        self.table = table
        self.max_length = 1024
        self.tokenizer = self.Tokenizer()
        self.limits = ModelLimits("hand-chosen scores", vocabulary=None, positions=None)  # no model, no table to overrun

    def pair_scores(self, sources, targets):
        texts = self.tokenizer.texts
        return [self.table[(texts[s], texts[t])] for s, t in zip(sources.values.tolist(), targets.values.tolist())]


def hand_metric(metric, table, **options):
    metric.scorer = TableScorer(table)
    metric.__dict__.pop("_signature_string", None)
    metric.prompts = options.pop("prompts", None)
    metric.prompt_side = options.pop("prompt_side", "decoder")
    for key, value in options.items():
        setattr(metric, key, value)
    return metric


def test_data_to_text_f_is_max_over_references_of_mean_p_r(metric):
    # P_r = score(r -> y), R_r = score(y -> r): P = (-1, -3), R = (-4, -1)
    table = {("r1", "y"): -1.0, ("r2", "y"): -3.0, ("y", "r1"): -4.0, ("y", "r2"): -1.0}
    row = {"text": "y", "source": "s", "references": ["r1", "r2"]}
    table[("s", "y")] = -2.0
    m = hand_metric(metric, table, agg="max", f_reference="per_reference", prompt_order="references_first")
    result = m.score_rows([row])[0]
    assert result["bartscore_r_h"] == -1.0 and result["bartscore_h_r"] == -1.0
    assert result["bartscore_f"] == -2.0  # max((-1 - 4) / 2, (-3 - 1) / 2)
    m = hand_metric(metric, table, agg="max", f_reference="per_direction", prompt_order="references_first")
    assert m.score_rows([row])[0]["bartscore_f"] == -1.0  # (max P + max R) / 2, never lower
    m = hand_metric(metric, table, agg="mean", f_reference="per_reference", prompt_order="references_first")
    assert m.score_rows([row])[0]["bartscore_f"] == -2.25  # mean: both definitions agree
    m = hand_metric(metric, table, agg="mean", f_reference="per_direction", prompt_order="references_first")
    assert m.score_rows([row])[0]["bartscore_f"] == -2.25


@pytest.mark.parametrize("side", ["decoder", "encoder"])
def test_prompted_data_to_text_order_of_max_and_mean(metric, side):
    """Original D2T/score.py: per prompt, max over references (of P, R and (P+R)/2);
    analysis.combine_prompt: mean over prompts."""
    P = {("r1", "A"): -1.0, ("r1", "B"): -5.0, ("r2", "A"): -3.0, ("r2", "B"): -2.0}
    R = {("r1", "A"): -4.0, ("r1", "B"): -1.0, ("r2", "A"): -1.0, ("r2", "B"): -6.0}
    table = {}
    for (ref, prompt), value in P.items():
        key = (ref, decoder_prompted("y", prompt)) if side == "decoder" else (encoder_prompted(ref, prompt), "y")
        table[key] = value
    for (ref, prompt), value in R.items():
        key = ("y", decoder_prompted(ref, prompt)) if side == "decoder" else (encoder_prompted("y", prompt), ref)
        table[key] = value
    row = {"text": "y", "references": ["r1", "r2"]}
    m = hand_metric(metric, table, agg="max", f_reference="per_reference", prompt_order="references_first",
                    prompts=["A", "B"], prompt_side=side, directions=("r_h", "h_r", "f"))
    m.required_columns = ("text", "references")
    result = m.score_rows([row])[0]
    assert result["bartscore_r_h"] == pytest.approx(-1.5)  # mean(max(-1, -3), max(-5, -2))
    assert result["bartscore_h_r"] == pytest.approx(-1.0)  # mean(max(-4, -1), max(-1, -6))
    assert result["bartscore_f"] == pytest.approx(-2.5)  # mean(max(-2.5, -2), max(-3, -4))
    m = hand_metric(metric, table, agg="max", f_reference="per_reference", prompt_order="prompts_first",
                    prompts=["A", "B"], prompt_side=side, directions=("r_h", "h_r", "f"))
    result = m.score_rows([row])[0]
    assert result["bartscore_r_h"] == pytest.approx(-2.5)  # max(mean(-1, -5), mean(-3, -2))
    assert result["bartscore_h_r"] == pytest.approx(-2.5)  # max(mean(-4, -1), mean(-1, -6))
    assert result["bartscore_f"] == pytest.approx(-2.75)  # max(mean(-2.5, -3), mean(-2, -4))


def test_signature_names_reference_options(tiny_models):
    m = BARTScoreMetric(model=tiny_models["bart"], directions=["f"], agg="max")
    assert "f_reference:per_reference" in str(m.signature())
    other = BARTScoreMetric(model=tiny_models["bart"], directions=["f"], agg="max", f_reference="per_direction")
    assert other.signature().digest != m.signature().digest
    assert "f_reference" not in str(BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"]).signature())

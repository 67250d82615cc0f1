"""The example job configs for the papers' corpora turn on the original's behaviour: Moses
detokenisation for every BARTScore summarisation and data-to-text set (BARTScore SUM/score.py
and D2T/score.py detokenise source, references and hypotheses, case kept), mean over
SummEval's references, max with F per reference for the data-to-text sets, Punkt splitting
and slow-style tokenisation for CTRLEval."""

from __future__ import annotations

import pytest

from ray_jobs.config import load_config
from ray_jobs.job.metrics import metric_params

SUMMARISATION = ("summeval", "realsumm", "newsroom", "qags_cnn", "qags_xsum", "rank19")
DATA_TO_TEXT = ("bagel", "sfhot", "sfres")


def params_of(repo_root, name):
    config = load_config(repo_root / "examples" / name)
    return [(spec, metric_params(config, spec)) for spec in config.metrics]


@pytest.mark.parametrize("corpus", SUMMARISATION + DATA_TO_TEXT)
def test_bartscore_examples_detokenise_like_the_original(repo_root, tiny_models, corpus):
    from scoring.bartscore import BARTScoreMetric

    entries = params_of(repo_root, f"{corpus}_bartscore.yaml")
    assert entries and all(spec.name == "bartscore" for spec, _ in entries)
    for _, params in entries:
        assert params["preprocess"] == "moses_detok"
        if corpus in DATA_TO_TEXT:
            assert params["agg"] == "max" and params["f_reference"] == "per_reference" and "s_h" not in params["directions"]
            assert params.get("prompt_order", "references_first") == "references_first"
        elif corpus == "summeval":
            assert params["agg"] == "mean"
        # every param is one the metric accepts (model swapped for the tiny one)
        metric = BARTScoreMetric(**{**params, "model": tiny_models["bart"]})
        assert "moses_detok" in str(metric.signature())


@pytest.mark.parametrize("name", ["ctrleval_senti_ctrleval.yaml", "ctrleval_topic_ctrleval.yaml"])
def test_ctrleval_examples_split_and_tokenise_like_the_original(repo_root, tiny_models, name):
    from scoring.ctrleval import CTRLEvalMetric

    [(spec, params)] = params_of(repo_root, name)
    assert params["sentence_splitter"] == "punkt" and params["tokenization"] == "slow"
    metric = CTRLEvalMetric(**{**params, "model": tiny_models["pegasus"], "iwf": tiny_models["iwf"]})
    signature = metric.signature().params
    assert signature["sentence_splitter"].startswith("punkt") and signature["tokenization"] == "slow"

"""Parity anchors from the official READMEs, checkable only with the real weights.

Set the folders (safetensors checkpoints) to run them:
  CTGSCORE_BART_LARGE_CNN=/models/bart-large-cnn
  CTGSCORE_BARTSCORE_PARABANK=/models/bart_score_parabank.safetensors (state dict on top of bart-large-cnn)
  CTGSCORE_PEGASUS_LARGE=/models/pegasus-large  CTGSCORE_IWF_FULL=/data/iwf_full.txt
Skipped otherwise (no model hub on CI).
"""

from __future__ import annotations

import os

import pytest

BART = os.environ.get("CTGSCORE_BART_LARGE_CNN")
PARABANK = os.environ.get("CTGSCORE_BARTSCORE_PARABANK")
PEGASUS = os.environ.get("CTGSCORE_PEGASUS_LARGE")
IWF = os.environ.get("CTGSCORE_IWF_FULL")


@pytest.mark.skipif(not BART, reason="CTGSCORE_BART_LARGE_CNN not set (real bart-large-cnn weights)")
def test_bartscore_anchors():
    from scoring.bartscore import BARTScorer

    scorer = BARTScorer(BART)
    assert scorer.score(["This is interesting."], ["This is fun."])[0] == pytest.approx(-2.510652780532837, abs=1e-4)
    got = scorer.multi_ref_score(
        ["I'm super happy today.", "This is a good idea."],
        [["I feel good today.", "I feel sad today."], ["Not bad.", "Sounds like a good idea."]],
        agg="max",
    )
    assert got == pytest.approx([-2.5008113384246826, -1.626236081123352], abs=1e-4)
    if PARABANK:
        scorer.load(PARABANK)
        assert scorer.score(["This is interesting."], ["This is fun."])[0] == pytest.approx(-2.336203098297119, abs=1e-4)


@pytest.mark.skipif(not (PEGASUS and IWF), reason="CTGSCORE_PEGASUS_LARGE / CTGSCORE_IWF_FULL not set (real pegasus-large)")
def test_ctrleval_anchors():
    from scoring.ctrleval import CTRLEval
    from scoring.resources import ctrleval_task_paths

    prompts, verbalizers = ctrleval_task_paths("sentiment")
    scorer = CTRLEval(PEGASUS, iwf=IWF, prompts=str(prompts), verbalizers=str(verbalizers))
    text = ["The book is about NLP. It depicts fancy models."]
    assert scorer.score("coh", text)[0] == pytest.approx(-4.723989181567967, abs=1e-3)
    assert scorer.score("cons", text, prefix=["The book"])[0] == pytest.approx(-7.385560478830747, abs=1e-3)
    assert scorer.score("rel", text, label=["positive"])[0] == pytest.approx(0.8916258, abs=1e-4)

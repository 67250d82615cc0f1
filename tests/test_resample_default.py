"""One resample default for every command that resamples, raised under a multiple-comparison
correction until the smallest reachable p is at most half the tightest corrected threshold."""

from __future__ import annotations

import pytest

from ctgscore.cli.main import build_parser
from meta_eval.defaults import DEFAULT_RESAMPLES, resamples_for


@pytest.mark.parametrize("command", [["meta", "-s", "x", "-o", "y"], ["compare", "-s", "x"], ["leaderboard", "job.yaml"]])
def test_every_command_resamples_the_same_by_default(command):
    args = build_parser().parse_args(command)
    resamples = args.resamples if args.resamples is not None else resamples_for(1)  # meta sizes it from the data
    assert resamples == DEFAULT_RESAMPLES


def test_the_demo_report_uses_the_default():
    from ctgscore.demo import REPORT_ARGS

    assert "--resamples" not in REPORT_ARGS


@pytest.mark.parametrize("pairs", [1, 3, 10, 45, 190])
@pytest.mark.parametrize("alpha", [0.05, 0.01])
@pytest.mark.parametrize("correction", ["holm", "bh"])
def test_a_correction_gets_enough_resamples(pairs, alpha, correction):
    n = resamples_for(pairs, alpha, correction)
    assert n >= DEFAULT_RESAMPLES
    assert 1 / (n + 1) <= alpha / pairs / 2 + 1e-15  # the smallest resampled p reaches alpha / m
    if n > DEFAULT_RESAMPLES:  # and no more than that needs
        assert 1 / n > alpha / pairs / 2
    assert resamples_for(pairs, alpha, "none") == DEFAULT_RESAMPLES

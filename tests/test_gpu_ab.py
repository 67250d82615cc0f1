"""The A/B of engine variants (`benchmarks/gpu_ab.py`, `benchmarks/gpu_decide.py`): the
decision rule on synthetic timings, the recommendation and the time plan, how a variant
becomes an engine (or is unavailable), and real workloads on CPU with tiny models: every
variant's scores agree with the default's in float32, and a variant that changes the scores
is flagged and never recommended."""

from __future__ import annotations

import pytest

from benchmarks import bench_gpu, gpu_ab, gpu_decide
from benchmarks.gpu_ab import Unavailable, Variant
from benchmarks.gpu_decide import DEFAULT, decide

# seconds per call of three runs
BASE = [1.00, 1.02, 1.01]


def test_a_win_needs_agreeing_scores_three_runs_three_percent_and_apart_ranges():
    assert decide(BASE, [0.90, 0.91, 0.92], True) == {"win": True, "speedup": pytest.approx(1.01 / 0.91),
                                                        "reason": "+11.0 % faster, ranges apart"}
    # faster by far, but its scores differ: never a win
    flagged = decide(BASE, [0.50, 0.50, 0.50], False)
    assert not flagged["win"] and flagged["reason"] == "scores differ beyond tolerance" and flagged["speedup"] == pytest.approx(2.02)
    # 2 % faster with apart ranges: under the threshold
    small = decide([1.00, 1.00, 1.00], [0.980, 0.981, 0.979], True)
    assert not small["win"] and small["reason"].startswith("+2.0 %")
    # 10 % faster at the median, but one slow run reaches into the default's range
    overlap = decide(BASE, [0.90, 0.91, 1.005], True)
    assert not overlap["win"] and overlap["reason"] == "run ranges overlap" and overlap["speedup"] > 1.09
    # a slowest run equal to the default's fastest still overlaps
    assert not decide(BASE, [0.90, 0.90, 1.00], True)["win"]
    # two runs are too few, however clear
    assert decide(BASE[:2], [0.5, 0.5], True)["reason"] == "fewer than 3 runs"
    # slower: no win (and the default wins against it by the same rule)
    assert not decide(BASE, [1.2, 1.2, 1.2], True)["win"] and decide([1.2, 1.2, 1.2], BASE, True)["win"]


def _arm(variant, runs, agrees=True, changes=None):
    arm = {"variant": variant, "status": "measured", "seconds_runs": runs, "agrees": agrees, "changes": changes or [f"E.{variant}: on"]}
    if variant != DEFAULT:
        arm["decision"] = decide(BASE, runs, agrees)
        arm["loses"] = decide(runs, BASE, True)["win"]
    return arm


def _workload(case, arms):
    return {"case": case, "model": "bart", "engine": "Seq2SeqLikelihood", "arms": arms}


def test_the_recommendation_is_the_fastest_agreeing_winner_never_a_flagged_one():
    work = _workload("s->h distinct", [_arm(DEFAULT, BASE), _arm("fast", [0.9, 0.9, 0.9]), _arm("faster", [0.8, 0.8, 0.8]),
                                       _arm("fastest but wrong", [0.4, 0.4, 0.4], agrees=False),
                                       {"variant": "packed decoder+encoder flipped", "status": "unavailable", "reason": "no packed_decoder"}])
    rec = gpu_decide.recommend(work)
    assert rec["variant"] == "faster" and rec["speedup"] == pytest.approx(1.01 / 0.8) and rec["changes"] == ["E.faster: on"]
    # nothing wins: the current default, no change
    none = gpu_decide.recommend(_workload("s->h grouped", [_arm(DEFAULT, BASE), _arm("noisy", [0.8, 0.85, 1.01])]))
    assert none["variant"] == DEFAULT and none["changes"] == [] and none["speedup"] == 1.0


def test_an_engine_wide_change_wins_somewhere_and_loses_nowhere():
    workloads = [_workload("a", [_arm(DEFAULT, BASE), _arm("x", [0.9, 0.9, 0.9]), _arm("y", [0.9, 0.9, 0.9]), _arm("z", [0.9] * 3)]),
                 _workload("b", [_arm(DEFAULT, BASE), _arm("x", [1.0, 1.0, 1.0]), _arm("y", [1.2, 1.2, 1.2]),
                                 _arm("z", [1.0, 1.0, 1.0], agrees=False)])]
    wide = {e["variant"]: e for e in gpu_decide.engine_wide(workloads)}
    assert wide["x"]["default_change"] and wide["x"]["wins"] == ["a"] and wide["x"]["losses"] == []
    assert not wide["y"]["default_change"] and wide["y"]["losses"] == ["b"]  # significantly slower on b
    assert not wide["z"]["default_change"] and wide["z"]["losses"] == ["b"]  # scores differ on b


def test_a_variant_not_measured_on_every_workload_of_its_engine_is_no_engine_wide_change():
    """The H200 A/B of 2026-11-28 timed compiled layers on BART distinct only (the time limit
    skipped grouped and PEGASUS), and "engine-wide: wins on some, loses on none" recommended
    them for the whole seq2seq engine."""
    workloads = [_workload("a", [_arm(DEFAULT, BASE), _arm("x", [0.9, 0.9, 0.9]), _arm("w", [0.9] * 3)]),
                 _workload("b", [_arm(DEFAULT, BASE), _arm("w", [1.0] * 3)]),
                 _workload("c", [_arm(DEFAULT, BASE), {"variant": "x", "status": "unavailable", "reason": "no x"}, _arm("w", [1.0] * 3)])]
    wide = {e["variant"]: e for e in gpu_decide.engine_wide(workloads)}
    assert wide["x"]["wins"] == ["a"] and wide["x"]["not_measured"] == ["b", "c"] and not wide["x"]["default_change"]
    assert wide["w"]["not_measured"] == [] and wide["w"]["default_change"]
    for workload in workloads:  # what the A/B table beside the decision reads
        for arm in workload["arms"]:
            if arm["status"] == "measured":
                arm.update(score_gap={"max_rel": 0.0}, seconds=sorted(arm["seconds_runs"])[1])
    ab = {"settings": {"tolerance": {"bfloat16": 2e-3}, "dtype": "bfloat16", "min_runs": 3, "min_gain": 0.03, "rounds": 3,
                       "min_seconds": 1.0},
          "workloads": [dict(w, recommendation=gpu_decide.recommend(w)) for w in workloads], "skipped": []}
    text = "\n".join(gpu_decide.render(ab))
    assert "Not engine-wide yet" in text and "E.x: on (wins: a; not measured: b, c)" in text
    assert "measured on all): E.w: on (wins: a)." in text


def test_the_plan_keeps_priority_order_and_lists_what_does_not_fit():
    default_cost = {"distinct": 10.0, "grouped": 10.0, "prefix": 10.0, "ppl": 10.0}
    candidates = [(0, "distinct", "p0", 5.0), (0, "grouped", "p0", 5.0), (1, "distinct", "p1", 5.0), (2, "ppl", "p2", 5.0),
                  (3, "distinct", "p3", 1.0)]
    selected, skipped = gpu_ab.plan(candidates, default_cost, budget=36.0)
    # p0 on distinct (15) and grouped (15), then p1 on distinct (5) = 35; p2 would open ppl (15): skipped; p3 fits (36)
    assert selected == [("distinct", "p0"), ("grouped", "p0"), ("distinct", "p1"), ("distinct", "p3")]
    assert skipped == [("ppl", "p2")]
    assert gpu_ab.plan(candidates, default_cost, budget=0.0) == ([], [(c, v) for _, c, v, _ in sorted(candidates)])


def test_scores_gaps_treat_nan_on_both_sides_as_agreement():
    assert gpu_decide.score_gap([2.0, float("nan")], [2.002, float("nan")]) == {"max_rel": pytest.approx(1e-3), "max_abs": pytest.approx(2e-3)}
    assert gpu_decide.score_gap([2.0, 1.0], [2.0, float("nan")])["max_rel"] == float("inf")
    assert gpu_decide.score_gap([2.0], [2.0, 1.0])["max_rel"] == float("inf")
    assert gpu_ab.flat_scores([(6.0, 3), (1.0, 0)])[0] == 2.0 and gpu_ab.flat_scores([1.5]) == [1.5]


class _Head:
    vocabulary_tile = None


class _Engine:
    def __init__(self, cross_batch=False, compile_layers=False):
        self.cross_batch, self.compiled_layers, self.head, self.packed_encoder = cross_batch, 0, _Head(), False


def _make(options):
    accepted = {"cross_batch", "compile_layers"}
    return _Engine(**{k: v for k, v in options.items() if k in accepted}), [k for k in options if k not in accepted]


def test_a_variant_becomes_an_engine_with_its_one_line_changes_or_is_unavailable():
    default = _Engine(cross_batch=True)
    engine, changes = gpu_ab.variant_engine(Variant("flip", ("seq2seq",), constructor={"cross_batch": gpu_ab.FLIP}), _make, default, "large")
    assert engine.cross_batch is False and changes == ["_Engine.cross_batch: off (now on)"]
    engine, changes = gpu_ab.variant_engine(Variant("tiled", ("seq2seq",), head={"vocabulary_tile": gpu_ab.TILE}), _make, default, "tiny")
    assert engine.head.vocabulary_tile == gpu_ab.TILE_COLUMNS["tiny"] and changes == ["_Head.vocabulary_tile: 256 (now off)"]
    engine, changes = gpu_ab.variant_engine(Variant("packed", ("seq2seq",), attributes={"packed_encoder": True},
                                                    requires=("packed_encoder",)), _make, default, "tiny")
    assert engine.packed_encoder is True and changes == ["_Engine.packed_encoder: on (now off)"]
    # a setting the default already has is no change to recommend
    engine, changes = gpu_ab.variant_engine(Variant("only", ("seq2seq",), attributes={"packed_encoder": True, "cross_batch": True}),
                                            _make, default, "tiny")
    assert engine.packed_encoder is True and changes == ["_Engine.packed_encoder: on (now off)"]
    # the engine lacks the attribute (a packed decoder not landed yet), the keyword, or compiles nothing here
    with pytest.raises(Unavailable, match="has no packed_decoder"):
        gpu_ab.variant_engine(next(v for v in gpu_ab.VARIANTS if v.name == "packed decoder+encoder flipped"), _make, default, "tiny")
    with pytest.raises(Unavailable, match="has no fuse_activations"):  # a keyword to flip that the default engine lacks
        gpu_ab.variant_engine(next(v for v in gpu_ab.VARIANTS if v.name == "fused GELU flipped"), _make, default, "tiny")
    with pytest.raises(Unavailable, match="takes no layout"):
        gpu_ab.variant_engine(Variant("x", ("seq2seq",), constructor={"layout": "by_slot"}), _make, default, "tiny")
    with pytest.raises(Unavailable, match="no layer compiled"):
        gpu_ab.variant_engine(next(v for v in gpu_ab.VARIANTS if v.compiles()), _make, default, "tiny")


def test_the_variant_list_is_data_in_the_priority_order():
    names = [v.name for v in gpu_ab.VARIANTS]
    assert names == ["compiled layers", "packed decoder+encoder flipped", "packed flipped", "compiled blocks",
                     "cross-batch flipped", "packed encoder only", "tiled head", "source runs", "fused GELU flipped"]
    assert len(set(names)) == len(names)  # workloads look variants up by name
    assert {e for v in gpu_ab.VARIANTS for e in v.engines} == {"seq2seq", "causal"}


def _bench():
    args = bench_gpu.finish_args(bench_gpu.parser().parse_args(["--tiny", "--device", "cpu", "--min-seconds", "0.01"]))
    return bench_gpu.Bench(args, bench_gpu.new_report(args), lambda report: None, None)


SETTINGS = {"dtype": "float32", "rounds": 3, "min_seconds": 0.005}


@pytest.mark.timeout(240)  # 34 s alone on 2 cores, up to ~44 s beside another worker
def test_every_variant_agrees_with_the_default_on_cpu_in_float32():
    bench = _bench()
    for case in ("prefix", "ppl"):
        variants = [v for v in gpu_ab.VARIANTS if gpu_ab.engine_kind(case) in v.engines]
        work = gpu_ab.run_workload(bench, case, variants, SETTINGS)
        arms = {a["variant"]: a for a in work["arms"]}
        assert list(arms) == [DEFAULT] + [v.name for v in variants]  # every variant accounted for, in priority order
        assert arms["compiled layers" if case == "prefix" else "compiled blocks"]["status"] == "unavailable"  # CUDA only
        measured = [a for a in work["arms"] if a["status"] == "measured"]
        assert all(a["status"] in ("measured", "unavailable", "no effect") for a in work["arms"]), work["arms"]
        for arm in work["arms"]:
            if arm["status"] == "no effect":  # only a path that can be idle on these rows, with the default's counters
                assert arm["variant"] == "source runs" and arm["engine_stats_per_call"] == arms[DEFAULT]["engine_stats_per_call"]
        for arm in measured:
            assert arm["agrees"] and arm["score_gap"]["max_rel"] <= gpu_decide.TOLERANCE["float32"], arm
            assert len(arm["seconds_runs"]) == 3 and arm["engine_stats_per_call"]
            if arm["variant"] != DEFAULT:
                assert arm["decision"] == decide(arms[DEFAULT]["seconds_runs"], arm["seconds_runs"], True)
        if case == "prefix":
            assert arms["cross-batch flipped"]["engine"]["cross_batch"] is True  # the CPU default is off
            stats = arms["packed encoder only"]["engine_stats_per_call"]
            assert stats["encoder_tokens_padded"] == stats["encoder_tokens_real"] < arms[DEFAULT]["engine_stats_per_call"]["encoder_tokens_padded"]
        else:
            stats = arms["packed flipped"]["engine_stats_per_call"]
            assert stats["tokens_padded"] == stats["tokens_real"]
            # the Python GELU fused on a model of its own (the CPU default keeps it), one per block
            assert arms[DEFAULT]["engine"]["fused_activations"] == 0 < arms["fused GELU flipped"]["engine"]["fused_activations"]
        assert work["recommendation"] == gpu_decide.recommend(work)


@pytest.mark.timeout(120)
def test_a_variant_that_changes_the_scores_is_flagged_and_never_recommended():
    # soft-capping the logits changes every score: the A/B must notice, whatever its speed
    capped = Variant("soft-capped head", ("seq2seq",), head={"softcap": 0.5})
    work = gpu_ab.run_workload(_bench(), "prefix", [capped], {**SETTINGS, "rounds": 3})
    arm = work["arms"][1]
    assert arm["variant"] == "soft-capped head" and arm["status"] == "measured"
    assert not arm["agrees"] and arm["score_gap"]["max_rel"] > 1e-3
    assert arm["decision"]["win"] is False and arm["decision"]["reason"] == "scores differ beyond tolerance"
    assert work["recommendation"]["variant"] == DEFAULT
    markdown = "\n".join(gpu_decide.render({"settings": {**SETTINGS, "min_runs": 3, "min_gain": 0.03, "tolerance": gpu_decide.TOLERANCE},
                                        "workloads": [work], "skipped": []}))
    assert "**flagged**" in markdown and "| pegasus ctrleval prefix | Seq2SeqLikelihood | default | +0.0 % | none (keep the current default) |" in markdown


@pytest.mark.timeout(120)
def test_rounds_past_the_time_limit_are_not_started_and_too_few_runs_decide_nothing():
    import time

    bench = _bench()
    bench.deadline = time.monotonic() - 1  # past: only the first round runs
    work = gpu_ab.run_workload(bench, "ppl", [v for v in gpu_ab.VARIANTS if v.name == "packed flipped"], SETTINGS)
    assert work["rounds_run"] == 1
    default, packed = work["arms"]
    assert len(default["seconds_runs"]) == len(packed["seconds_runs"]) == 1 and packed["agrees"]
    assert packed["decision"]["reason"] == "fewer than 3 runs" and work["recommendation"]["variant"] == DEFAULT

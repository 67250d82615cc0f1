"""Each subcommand succeeding through a subprocess, checked against expectations computed here
(word counts by hand, scipy's correlation, the constructors' own signatures)."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from ctgscore.testing.cli import run_cli, run_cli_in_process

TEXTS = ["the cat sat on the mat", "a a a b", "one", "x y x y x y"]


@pytest.fixture
def rows_file(tmp_path):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({
        "id": ["r0", "r1", "r2", "r3"], "text": TEXTS, "system": ["s1", "s1", "s2", "s2"],
        "doc_id": ["d0", "d1", "d0", "d1"], "human_fluency": [1.0, 2.0, 3.0, 4.0], "source": ["x"] * 4,
    }), path)
    return path


def test_version_and_help():
    from ctgscore import __version__

    proc = run_cli(["--version"])
    assert proc.returncode == 0 and proc.stdout.strip() == f"ctgscore {__version__}"
    proc = run_cli(["--help"])
    assert proc.returncode == 0
    for command in ("score", "run", "metrics", "convert", "meta", "compare", "splits", "constraints", "make-tiny-models"):
        assert command in proc.stdout


def test_score_keeps_every_row_and_carried_columns(rows_file, tmp_path):
    out = tmp_path / "scores.parquet"
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", rows_file, "-o", out, "--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary == {**summary, "ok": True, "rows": 4, "errors": 0, "metric": "text_stats"}
    table = pq.read_table(out)
    assert table.column("id").to_pylist() == ["r0", "r1", "r2", "r3"]
    assert table.column("text_stats_words").to_pylist() == [6.0, 4.0, 1.0, 6.0]
    # distinct-1 by hand: "the cat sat on the mat" has 5 distinct of 6 words; "a a a b" 2 of 4
    assert table.column("text_stats_dist1").to_pylist()[:2] == [5 / 6, 2 / 4]
    assert table.column("human_fluency").to_pylist() == [1.0, 2.0, 3.0, 4.0]
    assert table.column("system").to_pylist() == ["s1", "s1", "s2", "s2"]
    assert "source" not in table.column_names  # only carried columns come through
    assert set(table.column("signature").to_pylist()) == {summary["signature"]}
    assert len(set(table.column("row_key").to_pylist())) == 4


def test_no_progress_prints_only_the_summary(rows_file, tmp_path):
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", rows_file, "-o", tmp_path / "o.parquet", "--no-progress"])
    assert proc.returncode == 0 and proc.stderr == ""
    assert len(proc.stdout.strip().splitlines()) == 1


def test_metrics_lists_constructor_parameters():
    from scoring.registry import BUILTIN_METRICS, metric_class

    proc = run_cli_in_process(["metrics", "--json"])
    assert proc.returncode == 0, proc.stderr
    listed = {m["name"]: m for m in json.loads(proc.stdout)["metrics"]}
    assert set(BUILTIN_METRICS) <= set(listed)
    for name in BUILTIN_METRICS:
        signature = inspect.signature(metric_class(name).__init__)
        expected = {p.name: p.default for p in list(signature.parameters.values())[1:]
                    if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        got = {p["name"]: p["default"] for p in listed[name]["params"]}
        assert list(got) == list(expected)
        for key, default in expected.items():
            if default is not inspect.Parameter.empty:
                assert got[key] == (list(default) if isinstance(default, tuple) else default), (name, key)
    text = run_cli_in_process(["metrics", "perplexity"]).stdout
    assert text.splitlines()[0] == "perplexity" and "model" in text and "token_budget" in text


def _find_correlations(node, found):
    if isinstance(node, dict):
        if {"metric", "human", "level", "method", "value"} <= set(node):
            found.append(node)
        for value in node.values():
            _find_correlations(value, found)
    elif isinstance(node, list):
        for value in node:
            _find_correlations(value, found)
    return found


def test_meta_report_matches_scipy(tmp_path):
    rng = np.random.default_rng(3)
    human = rng.normal(size=40)
    m1 = human + rng.normal(scale=0.5, size=40)
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(40)], "doc_id": [str(i // 4) for i in range(40)],
                             "system": [f"s{i % 4}" for i in range(40)], "human_overall": human, "m1": m1,
                             "m2": rng.normal(size=40), "error": pa.nulls(40, pa.string())}), path)
    out = tmp_path / "report"
    proc = run_cli_in_process(["meta", "-s", path, "-o", out, "--tasks", "0", "--resamples", "20", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no bars, no warnings: one JSON summary on stdout
    summary = json.loads(proc.stdout)
    assert summary["ok"] and summary["rows"] == 40 and set(summary["metrics"]) == {"m1", "m2"}
    results = json.loads((out / "results.json").read_text())
    found = [c for c in _find_correlations(results, []) if c["metric"] == "m1" and c["level"] == "sample"
             and c["method"] == "spearman"]
    assert found, "no sample-level Spearman correlation for m1 in results.json"
    assert found[0]["value"] == pytest.approx(stats.spearmanr(m1, human).statistic, abs=1e-12)



def test_meta_names_score_columns_it_leaves_out_for_holding_no_numbers(tmp_path):
    """A score column of strings, decimals, lists or booleans is no metric; picked by default,
    meta used to leave it out without a word. It is named, with its type, on the console and
    in the JSON summary; the numeric metrics are unchanged."""
    import decimal

    rng = np.random.default_rng(4)
    human = rng.normal(size=40)
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({
        "id": [f"r{i}" for i in range(40)], "doc_id": [str(i // 4) for i in range(40)],
        "system": [f"s{i % 4}" for i in range(40)], "human_overall": human, "m1": human + rng.normal(size=40),
        "judge_label": ["good" if h > 0 else "bad" for h in human],
        "judge_money": pa.array([decimal.Decimal("1.5")] * 40, pa.decimal128(5, 2)),
        "judge_flags": [[1.0, 2.0]] * 40, "judge_ok": [bool(h > 0) for h in human],
        "error": pa.nulls(40, pa.string())}), path)
    for extra in ([], ["--json"]):
        proc = run_cli_in_process(["meta", "-s", path, "-o", tmp_path / f"report{len(extra)}", "--tasks", "0",
                                   "--resamples", "20", "--no-progress", *extra])
        assert proc.returncode == 0, proc.stderr
        if extra:
            summary = json.loads(proc.stdout)
            assert summary["metrics"] == ["m1"]
            assert set(summary["columns_not_numeric"]) == {"judge_label", "judge_money", "judge_flags", "judge_ok"}
        else:
            line = next(text for text in proc.stdout.splitlines() if "not metrics" in text)
            assert all(f"{name} (" in line for name in ("judge_label", "judge_money", "judge_flags", "judge_ok"))
            assert "bool" in line and "m1" not in line

def test_splits_writes_json(tmp_path):
    out = tmp_path / "splits.json"
    aspects = {"sentiment": ["Pos", "Neg"], "tense": ["Past", "Present"], "topic": ["a", "b"]}
    proc = run_cli_in_process(["splits", "--aspects", json.dumps(aspects), "--protocol", "holdout", "-o", out, "--json"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    summary = json.loads(proc.stdout)
    assert summary["splits"] == len(data["splits"]) > 0
    for split in data["splits"]:  # Hold-Out: every combination is on exactly one side
        assert len(split["seen"]) + len(split["unseen"]) == 8



def test_splits_output_at_a_symlink_replaces_the_link_not_its_target(tmp_path):
    """A planted symlink at `-o` is replaced by the file; the file it pointed at is untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "splits.json"
    out.symlink_to(victim)
    aspects = {"sentiment": ["Pos", "Neg"], "topic": ["a", "b"]}
    proc = run_cli_in_process(["splits", "--aspects", json.dumps(aspects), "--protocol", "holdout", "-o", out])
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "keep me"
    assert not out.is_symlink() and json.loads(out.read_text())["splits"]

def test_constraints_convert(shared_data, tmp_path):
    out = tmp_path / "codi.parquet"
    proc = run_cli_in_process(["constraints", "convert", "--instructions", shared_data / "codi-eval" / "instructions",
                    "--codi-tasks", "length", "--limit", "5", "-o", out])
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(out)
    assert table.num_rows == 5
    assert all(json.loads(c)["task"] == "length" for c in table.column("constraint").to_pylist())


def test_make_tiny_models(tmp_path, tiny_models):
    from scoring.models import weights_digest

    proc = run_cli_in_process(["make-tiny-models", tmp_path / "m", "--json"])
    assert proc.returncode == 0, proc.stderr
    built = json.loads(proc.stdout)["models"]
    assert set(built) == set(tiny_models)
    assert weights_digest(built["gpt2"]) == weights_digest(tiny_models["gpt2"])  # seeded: same weights


def test_internal_error_is_one_line_and_debug_shows_traceback(rows_file, tmp_path, monkeypatch, capsys):
    from ctgscore.cli import score
    from ctgscore.cli.main import main

    def broken(path):
        raise RuntimeError("boom")

    monkeypatch.setattr(score, "read_input", broken)
    args = ["score", "-m", "text_stats", "-i", str(rows_file), "-o", str(tmp_path / "o.parquet")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.strip() == "error: internal error: RuntimeError: boom; rerun with --debug for the traceback"
    assert main([*args, "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1] == "error: internal error: RuntimeError: boom"


def test_run_flags_become_config_overrides(tmp_path):
    """`--prune`, `--max-error-rate`, `--no-progress` and `--set` reach the job config."""
    from ctgscore.cli import run
    from ctgscore.cli.main import build_parser
    from ray_jobs.config import load_config

    config = tmp_path / "job.yaml"
    config.write_text("input: data\noutput: out\nmetrics: [{name: text_stats}]\n")
    args = build_parser().parse_args(["run", str(config), "--prune", "--max-error-rate", "0.25", "--no-progress",
                                      "--set", "pool.max_size=3", "--set", "batch_size=7"])
    values = run.overrides(args)
    assert values == {"pool.max_size": "3", "batch_size": "7", "prune": "true", "max_error_rate": "0.25",
                      "progress": "false"}
    job = load_config(run.config_path(args), overrides=values)
    assert (job.prune, job.max_error_rate, job.progress, job.pool.max_size, job.batch_size) == (True, 0.25, False, 3, 7)

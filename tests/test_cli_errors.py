"""Every subcommand, through a subprocess, for each class of user mistake: the exit code (2 for
usage/config, 1 for input/storage/run failures), no traceback, and one `error:` line naming
what is wrong."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli, run_cli_in_process


@pytest.fixture
def rows_file(tmp_path):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["one two", "three"], "system": ["s1", "s1"]}), path)
    return path


@pytest.fixture
def no_text_file(tmp_path):
    path = tmp_path / "no_text.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "hyp": ["one two", "three"]}), path)
    return path


# ----- score ------------------------------------------------------------------------------
def test_score_unknown_metric_lists_known_ones(rows_file, tmp_path):
    proc = run_cli_in_process(["score", "-m", "bartscroe", "-i", rows_file, "-o", tmp_path / "o.parquet"])
    line = assert_user_error(proc, 2, "unknown metric 'bartscroe'", "bartscore", "text_stats")
    assert line.startswith("error: ")
    assert not (tmp_path / "o.parquet").exists()


def test_score_misspelled_param_is_named_before_loading(rows_file, tmp_path):
    proc = run_cli_in_process(["score", "-m", "perplexity", "--param", "modle=gpt2", "-i", rows_file, "-o", tmp_path / "o.parquet"])
    assert_user_error(proc, 2, "no parameter 'modle'", "model")


def test_score_bad_params_json(rows_file, tmp_path):
    proc = run_cli_in_process(["score", "-m", "text_stats", "--params", "{not json", "-i", rows_file, "-o", tmp_path / "o.parquet"])
    assert_user_error(proc, 2, "--params", "not valid JSON")
    proc = run_cli_in_process(["score", "-m", "text_stats", "--params", f"@{tmp_path / 'absent.json'}", "-i", rows_file,
                    "-o", tmp_path / "o.parquet"])
    assert_user_error(proc, 2, "absent.json")


def test_score_missing_column_names_file_and_column(no_text_file, tmp_path):
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", no_text_file, "-o", tmp_path / "o.parquet"])
    assert_user_error(proc, 1, "no_text.parquet", "'text'")
    assert not (tmp_path / "o.parquet").exists()


def test_score_missing_input_path(tmp_path):
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", tmp_path / "absent.parquet", "-o", tmp_path / "o.parquet"])
    assert_user_error(proc, 2, "absent.parquet", "no such file")  # a path on the command line: a usage error


def test_score_not_parquet(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_text("this is not parquet")
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", bad, "-o", tmp_path / "o.parquet"])
    assert_user_error(proc, 1, "bad.parquet", "Parquet")


def test_score_unwritable_output_fails_before_scoring(rows_file, tmp_path):
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", rows_file, "-o", "/nonexistent/dir/x.parquet"])
    assert_user_error(proc, 1, "/nonexistent/dir", "does not exist")
    assert proc.stdout == ""  # nothing was scored
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", rows_file, "-o", blocker / "x.parquet"])
    assert_user_error(proc, 1, str(blocker), "not a folder")


def test_score_missing_flag_is_a_usage_error(rows_file):
    proc = run_cli(["score", "-i", rows_file])
    assert_user_error(proc, 2, "ctgscore score", "--metric", "--output")


def test_score_error_rate_above_limit_exits_1_but_writes_every_row(tmp_path):
    path = tmp_path / "blank.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c", "d"], "text": ["", " ", "ok fine", ""]}), path)
    out = tmp_path / "o.parquet"
    proc = run_cli(["score", "-m", "text_stats", "-i", path, "-o", out, "--no-progress"])
    assert_user_error(proc, 1, "3 of 4 rows", "max error rate 0.1")
    assert pq.read_table(out).num_rows == 4  # the output is still complete
    ok = run_cli(["score", "-m", "text_stats", "-i", path, "-o", out, "--max-error-rate", "0.8", "--json"])
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout)
    assert summary["ok"] and summary["errors"] == 3 and summary["rows"] == 4
    assert summary["error_reasons"] == {"empty field 'text'": 3}
    bad_rate = run_cli(["score", "-m", "text_stats", "-i", path, "-o", out, "--max-error-rate", "2"])
    assert_user_error(bad_rate, 2, "--max-error-rate")


# ----- run --------------------------------------------------------------------------------
def test_run_bad_config_names_the_key(tmp_path, rows_file):
    config = tmp_path / "job.yaml"
    config.write_text(f"input: {rows_file.parent}\noutput: {tmp_path / 'out'}\nmetrics: [{{name: text_stats}}]\n"
                      "pool: {min_size: 1, max_sise: 2}\n")
    proc = run_cli_in_process(["run", config])
    assert_user_error(proc, 2, "max_sise")
    proc = run_cli_in_process(["run", "--config", config])
    assert_user_error(proc, 2, "max_sise")


def test_run_unknown_metric_and_missing_config(tmp_path, rows_file):
    config = tmp_path / "job.yaml"
    config.write_text(f"input: {rows_file.parent}\noutput: {tmp_path / 'out'}\nmetrics: [{{name: txt_stats}}]\n")
    assert_user_error(run_cli_in_process(["run", config]), 2, "txt_stats")
    assert_user_error(run_cli_in_process(["run", tmp_path / "absent.yaml"]), 2, "absent.yaml")
    assert_user_error(run_cli_in_process(["run"]), 2, "job config")
    assert_user_error(run_cli_in_process(["run", config, "--set", "novalue"]), 2, "--set", "KEY=VALUE")


# ----- metrics ----------------------------------------------------------------------------
def test_metrics_unknown_name():
    assert_user_error(run_cli_in_process(["metrics", "nope"]), 2, "unknown metric 'nope'", "perplexity")


# ----- convert ----------------------------------------------------------------------------
def test_convert_errors(tmp_path):
    out = tmp_path / "o.parquet"
    assert_user_error(run_cli_in_process(["convert", "-i", tmp_path / "absent.jsonl", "-o", out]), 2, "absent.jsonl")
    dump = tmp_path / "d.jsonl"
    dump.write_text(json.dumps({"hyp": "x", "uid": 1}) + "\n")
    assert_user_error(run_cli_in_process(["convert", "-i", dump, "-o", out, "--map", "hypothesis=hyp"]), 2, "'hypothesis'")
    assert_user_error(run_cli_in_process(["convert", "-i", dump, "-o", out, "--map", "text=hypo"]), 2, "'hypo'", "hyp")
    assert_user_error(run_cli_in_process(["convert", "-o", out]), 2, "-c CANDIDATES")
    cands, refs = tmp_path / "c.txt", tmp_path / "r.txt"
    cands.write_text("a\nb\nc\n")
    refs.write_text("a\nb\n")
    assert_user_error(run_cli_in_process(["convert", "-c", cands, "-r", refs, "-o", out]), 1, "r.txt", "2 lines", "3")
    assert not out.exists()


# ----- meta / compare ---------------------------------------------------------------------
@pytest.fixture
def scores_file(tmp_path):
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({
        "id": [f"r{i}" for i in range(8)], "system": ["A", "B"] * 4, "doc_id": [str(i // 2) for i in range(8)],
        "human_overall": [1.0, 2.0, 2.5, 3.0, 1.0, 4.0, 2.0, 2.0], "m1": [0.1, 0.4, 0.3, 0.5, 0.2, 0.9, 0.3, 0.2],
        "error": [None] * 8, "_bleu_stat_0": [1.0] * 8,  # an internal column, as the BLEU baseline stores
    }), path)
    return path


def test_meta_errors(scores_file, tmp_path):
    out = tmp_path / "report"
    assert_user_error(run_cli_in_process(["meta", "-s", tmp_path / "absent", "-o", out]), 2, "absent")
    line = assert_user_error(run_cli_in_process(["meta", "-s", scores_file, "-o", out, "--metrics", "m2", "--tasks", "0"]), 2,
                             "'m2'", "m1")
    assert "_bleu_stat" not in line  # internal columns are not offered
    assert_user_error(run_cli_in_process(["meta", "-s", scores_file, "-o", out, "--easy-pairs", "A-B"]), 2, "A-B")
    assert_user_error(run_cli_in_process(["meta", "-s", scores_file]), 2, "--output")
    no_human = tmp_path / "no_human.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "m1": [1.0, 2.0, 3.0]}), no_human)
    assert_user_error(run_cli_in_process(["meta", "-s", no_human, "-o", out, "--tasks", "0"]), 1, "human")


def test_compare_errors(scores_file, tmp_path):
    assert_user_error(run_cli_in_process(["compare", "-s", scores_file, "--columns", "m9"]), 2, "'m9'", "m1")
    assert_user_error(run_cli_in_process(["compare", "-s", scores_file, "--systems", "A", "Z"]), 2, "Z")
    assert_user_error(run_cli_in_process(["compare", "-s", scores_file, "-o", tmp_path / "x.txt"]), 2, "--format")
    assert_user_error(run_cli_in_process(["compare", "-s", tmp_path / "absent.parquet"]), 2, "absent.parquet")
    assert_user_error(run_cli_in_process(["compare", "-s", scores_file, "--previous", tmp_path / "last.json"]), 2, "--previous",
                      "last.json", "no such file")


# ----- splits / constraints / make-tiny-models --------------------------------------------
def test_splits_errors(tmp_path):
    out = tmp_path / "s.json"
    assert_user_error(run_cli_in_process(["splits", "--aspects", '{"sentiment": ["a", "b"]}', "--protocol", "acd", "-o", out]),
                      2, "--aspects")
    assert_user_error(run_cli_in_process(["splits", "--corpus", tmp_path / "absent.parquet", "--protocol", "acd", "-o", out]),
                      2, "absent.parquet")
    assert_user_error(run_cli_in_process(["splits", "--aspects", "Fyelp", "--protocol", "acdd", "-o", out]), 2, "acdd")


def test_constraints_errors(tmp_path, rows_file):
    assert_user_error(run_cli_in_process(["constraints", "convert", "--instructions", tmp_path / "absent", "-o", tmp_path / "o.parquet"]),
                      2, "absent")
    assert_user_error(run_cli_in_process(["constraints", "score", "-i", rows_file, "-o", tmp_path / "o.parquet", "--param", "x=1"]),
                      2, "codi", "'x'")
    assert_user_error(run_cli_in_process(["constraints", "convert", "--instructions", tmp_path, "--codi-tasks", "sentimen",
                               "-o", tmp_path / "o.parquet"]), 2, "sentimen")


def test_make_tiny_models_unwritable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_user_error(run_cli_in_process(["make-tiny-models", blocker / "models"]), 1, str(blocker))


def test_no_command_and_unknown_command():
    assert_user_error(run_cli([]), 2, "COMMAND")
    assert_user_error(run_cli(["scroe"]), 2, "scroe")


def test_unwritable_output_of_every_writer_fails_before_work(tmp_path, rows_file, scores_file):
    """An output under a regular file cannot be written (even by root): every subcommand that
    writes says so in one line, exit 1, before doing its work."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    target = blocker / "out"
    cands = tmp_path / "c.txt"
    cands.write_text("a b\n")
    commands = [
        ["convert", "-c", cands, "-o", target / "x.parquet"],
        ["splits", "--aspects", "Yelp", "--protocol", "holdout", "-o", target / "s.json"],
        ["meta", "-s", scores_file, "-o", target, "--tasks", "0"],
        ["compare", "-s", scores_file, "-o", target / "board.csv"],
        ["constraints", "score", "-i", rows_file, "-o", target / "x.parquet"],
    ]
    for command in commands:
        proc = run_cli_in_process(command)
        assert_user_error(proc, 1, str(blocker))
        assert proc.stdout == ""


def test_score_refuses_duplicate_ids(tmp_path):
    path = tmp_path / "dup.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "a"], "text": ["x", "y", "z"]}), path)
    assert_user_error(run_cli_in_process(["score", "-m", "text_stats", "-i", path, "-o", tmp_path / "o.parquet"]), 1,
                      "dup.parquet", "'a'", "more than once")


def test_score_model_that_cannot_be_loaded(rows_file, tmp_path):
    # offline (HF_HUB_OFFLINE=1): a hub id that is not cached cannot be loaded
    proc = run_cli_in_process(["score", "-m", "perplexity", "--param", "model=nobody/not-a-cached-model", "-i", rows_file,
                    "-o", tmp_path / "o.parquet"])
    assert_user_error(proc, 1, "perplexity", "nobody/not-a-cached-model")
    proc = run_cli_in_process(["score", "-m", "perplexity", "--param", f"model={tmp_path / 'absent'}", "-i", rows_file,
                    "-o", tmp_path / "o.parquet"])
    assert_user_error(proc, 2, "absent")

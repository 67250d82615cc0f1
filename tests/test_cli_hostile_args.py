"""Hostile or mistaken arguments of the report and statistics commands (`meta`, `compare`,
`leaderboard`, `splits`): each is a one-line usage error (exit 2, docs/cli.md's table) that
names the flag and the value, quoted in a bounded length, never a silent default or a huge
message."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli_in_process

HUGE = "q" * 100_000


@pytest.fixture
def scores(tmp_path):
    """Two systems on six documents with two score columns, `m` and `perplexity`, and a human rating."""
    rng = np.random.default_rng(3)
    rows = [{"id": f"{system}{doc}", "system": system, "doc_id": f"d{doc}", "dataset": "toy",
             "m": float(rng.normal()), "perplexity": float(rng.uniform(5, 30)), "human_overall": float(rng.integers(1, 6))}
            for system in ("A", "B") for doc in range(6)]
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("flags", [["--columns", "m"], []])
def test_compare_refuses_a_lower_is_better_column_it_does_not_compare(scores, flags):
    proc = run_cli_in_process(["compare", "-s", scores, *flags, "--lower-is-better", "perplexty",
                               "--resamples", "20", "--trials", "20"])
    line = assert_user_error(proc, 2, "--lower-is-better", "'perplexty'")
    assert "'m'" in line  # the compared columns are named
    assert ("'perplexity'" in line) == (not flags)


def test_compare_lower_is_better_with_a_column_it_compares_still_works(scores):
    proc = run_cli_in_process(["compare", "-s", scores, "--columns", "m", "--lower-is-better", "m",
                               "--resamples", "20", "--trials", "20", "--format", "json"])
    assert proc.returncode == 0, proc.stderr
    (comp,) = json.loads(proc.stdout)["comparisons"]
    assert comp["lower_is_better"] is True
    means = {s["system"]: s["mean"] for s in comp["systems"]}
    assert comp["systems"][0]["system"] == min(means, key=means.get)


def test_compare_quotes_a_huge_lower_is_better_name_in_a_short_line(scores):
    proc = run_cli_in_process(["compare", "-s", scores, "--columns", "m", "--lower-is-better", HUGE,
                               "--resamples", "20", "--trials", "20"])
    line = assert_user_error(proc, 2, "--lower-is-better", "100,000 characters")
    assert len(line) < 400


def test_leaderboard_refuses_a_lower_is_better_column_outside_its_columns_before_the_job(tmp_path):
    # the config does not exist: the flag check comes first, so no job (and no Ray) is started
    proc = run_cli_in_process(["leaderboard", str(tmp_path / "missing.yaml"), "-o", str(tmp_path / "board"),
                               "--columns", "m", "--lower-is-better", "m", "ppl"])
    assert_user_error(proc, 2, "--lower-is-better", "'ppl'", "'m'")
    assert not (tmp_path / "board").exists()


def test_leaderboard_shares_compare_s_check_when_its_columns_are_the_run_s(scores):
    # without --columns the leaderboard compares every numeric score column of the run, through
    # the same `compare_scores` as `compare`
    from ctgscore.cli.compare import compare_scores
    from scoring.errors import UsageError

    with pytest.raises(UsageError, match="--lower-is-better: column 'nope' is not one of the compared"):
        compare_scores(str(scores), None, ["nope"], dict(n_resamples=10, trials=10))


def test_meta_refuses_a_lower_is_better_column_that_is_no_metric(scores, tmp_path):
    for name in ("perplexty", "human_overall"):  # a typo; a human rating (it would have been negated)
        proc = run_cli_in_process(["meta", "-s", scores, "-o", str(tmp_path / "rep"), "--metrics", "m", "perplexity",
                                   "--human-columns", "human_overall", "--lower-is-better", name,
                                   "--resamples", "0", "--no-checklist", "--no-compare-systems"])
        assert_user_error(proc, 2, "--lower-is-better", repr(name), "'m', 'perplexity'")


@pytest.mark.parametrize("aspects, fragment", [
    ({HUGE: [], "b": ["1", "2"]}, "values must be a non-empty list"),
    ({HUGE: ["x", 1], "b": ["1", "2"]}, "is not a non-empty string"),
    ({HUGE: ["x", "x"], "b": ["1", "2"]}, "duplicate values"),
    ({"a": [HUGE, HUGE, "y"], "b": ["1", "2"]}, "duplicate values"),
    ({HUGE: ["x"], "b": ["1", "2"]}, "has a single value"),
    ({"a": [HUGE], "b": ["1", "2"]}, "has a single value"),
    ({HUGE: ["x", "y"]}, "at least 2 aspects"),
])
def test_splits_aspect_errors_quote_a_huge_name_in_a_short_line(tmp_path, aspects, fragment):
    proc = run_cli_in_process(["splits", "--aspects", json.dumps(aspects), "--protocol", "acd",
                               "-o", str(tmp_path / "s.json")])
    line = assert_user_error(proc, 2, "--aspects", fragment, "100,000 characters")
    assert len(line) < 600


def test_splits_corpus_errors_quote_huge_column_names_in_a_short_line(tmp_path):
    corpus = tmp_path / "corpus.parquet"
    names = [f"{HUGE}{k}" for k in range(30)]  # 30 huge string columns, one of them empty in a row
    pq.write_table(pa.table({name: ["x", "" if name == names[0] else "y"] for name in names}), corpus)
    proc = run_cli_in_process(["splits", "--corpus", corpus, "--protocol", "acd", "-o", str(tmp_path / "s.json")])
    line = assert_user_error(proc, 1, "row 1", "is empty", "100,001 characters")
    assert len(line) < 600 + len(str(corpus))
    proc = run_cli_in_process(["splits", "--corpus", corpus, "--aspect-columns", "nope,other", "--protocol", "acd",
                               "-o", str(tmp_path / "s.json")])
    line = assert_user_error(proc, 2, "--aspect-columns", "'nope', 'other'", "not found", "and 10 more")
    assert len(line) < 3000 + len(str(corpus))


def test_compmctg_refuses_a_splits_dataset_the_scores_do_not_have(tmp_path):
    from tests.test_report_hostile_more import compmctg_inputs

    args = compmctg_inputs(tmp_path)
    proc = run_cli_in_process(args + ["--splits", f"toy={tmp_path / 'split.json'}"])
    assert proc.returncode == 0, proc.stderr
    for name in ("Toy", "../../x|<b>"):  # a different case; a hostile name: each would make a table of dashes
        proc = run_cli_in_process(args + ["--splits", f"{name}={tmp_path / 'split.json'}"])
        assert_user_error(proc, 2, "--splits", repr(name), "no rows of dataset", "'toy'")


@pytest.mark.parametrize("aspects", [{"\udcff": ["a", "b"], "b": ["1", "2"]}, {"x": ["a", "b\ud800"], "b": ["1", "2"]}])
def test_splits_refuses_a_lone_surrogate_in_the_aspects(tmp_path, aspects):
    proc = run_cli_in_process(["splits", "--aspects", json.dumps(aspects), "--protocol", "acd",
                               "-o", str(tmp_path / "s.json")])
    assert_user_error(proc, 2, "--aspects", "lone surrogate")
    assert not (tmp_path / "s.json").exists()


def test_a_misnamed_system_or_column_among_thousands_is_refused_in_a_short_line(tmp_path):
    names = [f"s{i:05d}" + "x" * 300 for i in range(3000)]  # 3,000 systems of 306 characters
    rows = [{"id": f"r{i}", "system": name, "doc_id": "d0", "dataset": "toy", "m": float(i)}
            for i, name in enumerate(names)]
    path = tmp_path / "many.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    proc = run_cli_in_process(["compare", "-s", path, "--systems", names[0], "nope", "--resamples", "10", "--trials", "10"])
    line = assert_user_error(proc, 2, "--systems: 'nope' not found", "s00000xxx", "and 2,950 more")
    assert len(line) < 6000

    wide = tmp_path / "wide.parquet"
    columns = {"id": ["a", "b"], "system": ["A", "B"], "doc_id": ["d", "d"], "human_x": [1.0, 2.0]}
    columns.update({f"score_{k:04d}_" + "y" * 200: [0.5, 0.25] for k in range(1000)})
    pq.write_table(pa.table(columns), wide)
    proc = run_cli_in_process(["meta", "-s", wide, "-o", str(tmp_path / "rep"), "--metrics", "nope",
                               "--human-columns", "human_x", "--resamples", "0"])
    line = assert_user_error(proc, 2, "column 'nope' not found", "more)")
    assert len(line) < 8000
    proc = run_cli_in_process(["compare", "-s", wide, "--columns", "nope", "--resamples", "10", "--trials", "10"])
    line = assert_user_error(proc, 2, "--columns", "'nope'", "and 980 more")
    assert len(line) < 4000


def test_a_previous_board_of_thousands_of_other_datasets_is_refused_in_a_short_line(scores, tmp_path):
    others = [{"dataset": f"other{k}" + "z" * 500, "column": "m", "system": "A", "rank": 1} for k in range(2000)]
    previous = tmp_path / "previous.json"
    previous.write_text(json.dumps({"leaderboard": others}))
    proc = run_cli_in_process(["compare", "-s", scores, "--columns", "m", "--previous", previous,
                               "--resamples", "10", "--trials", "10"])
    line = assert_user_error(proc, 2, "--previous", "a leaderboard of dataset 'other", "and 1,980 more", "'toy'")
    assert len(line) < 4000
    twice = [{"dataset": "toy", "column": "m", "system": HUGE, "rank": 1}] * 2
    previous.write_text(json.dumps({"leaderboard": twice}))
    proc = run_cli_in_process(["compare", "-s", scores, "--columns", "m", "--previous", previous,
                               "--resamples", "10", "--trials", "10"])
    line = assert_user_error(proc, 2, "is ranked twice", "100,000 characters")
    assert len(line) < 600 + len(str(previous))


@pytest.fixture
def two_datasets(tmp_path):
    """Dataset `one` with systems A, B, C and dataset `two` with A and B, six documents each."""
    rng = np.random.default_rng(1)
    rows = [{"id": f"{ds}{s}{d}", "dataset": ds, "system": s, "doc_id": f"d{d}", "m": float(rng.normal()),
             "m2": float(rng.normal()), "human_x": float(rng.integers(1, 5))}
            for ds, systems in (("one", "ABC"), ("two", "AB")) for s in systems for d in range(6)]
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("pairs, fragments", [
    (["nope::A"], ["system 'nope' is not in the scores", "(systems: A, B, C)"]),
    (["A::A"], ["'A'::'A'", "two different systems"]),
    ([HUGE + "::A"], ["100,000 characters", "is not in the scores"]),
])
def test_meta_refuses_a_given_pair_of_unknown_or_equal_systems(two_datasets, tmp_path, pairs, fragments):
    proc = run_cli_in_process(["meta", "-s", two_datasets, "-o", str(tmp_path / "rep"), "--resamples", "0",
                               "--easy-pairs", *pairs])
    line = assert_user_error(proc, 2, "--easy-pairs", *fragments)
    assert len(line) < 400


def test_meta_given_pairs_apply_in_the_datasets_that_have_both_systems(two_datasets, tmp_path):
    proc = run_cli_in_process(["meta", "-s", two_datasets, "-o", str(tmp_path / "rep"), "--resamples", "0",
                               "--easy-pairs", "A::C", "--hard-pairs", "A::B"])
    assert proc.returncode == 0, proc.stderr  # was an internal error: C has no rows in dataset two
    groups = {g["name"]: g for g in json.loads((tmp_path / "rep" / "results.json").read_text())["groups"]}
    one, two = groups["one"]["checklist"], groups["two"]["checklist"]
    assert one["pairs_from"] == two["pairs_from"] == "given"
    assert one["easy_pairs"] == [["A", "C"]] and one["hard_pairs"] == [["A", "B"]]
    assert two["easy_pairs"] == [] and two["hard_pairs"] == [["A", "B"]]  # the given hard pair, not the ranking's
    assert groups["two"]["omitted"]["checklist given easy pairs"] == \
        "1 pair whose systems are not both in this dataset left out: A::C"
    assert "checklist given easy pairs" not in groups["one"]["omitted"]


@pytest.mark.parametrize("extra, fragments", [
    (["--aspect-columns", "tense,tense"], ["--aspect-columns", "'tense' is named twice"]),  # was exit 1, no split
    (["--aspect-columns", "tense,,topic"], ["--aspect-columns", "an empty column name"]),
    (["--aspect-columns", "tense,nope"], ["--aspect-columns", "'nope' not found"]),  # a flag's column: exit 2
    (["--iid-fraction", "1.5", "--partition-dir", "PARTS"], ["--iid-fraction 1.5"]),  # failed after writing
    (["--iid-fraction", "nan"], ["--iid-fraction nan"]),
    (["--exhaustive-limit", "-1"], ["--exhaustive-limit -1"]),  # silently accepted
    (["--patience", "-1"], ["--patience -1"]),
    (["--seed", "-1"], ["--seed -1"]),  # an internal error
])
def test_splits_refuses_unusable_numbers_and_columns_before_any_work(tmp_path, extra, fragments):
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(8)], "tense": ["x", "y"] * 4,
                             "topic": ["a", "a", "b", "b"] * 2, "mood": ["p"] * 4 + ["q"] * 4}), corpus)
    extra = [str(tmp_path / "parts") if e == "PARTS" else e for e in extra]
    out = tmp_path / "s.json"
    proc = run_cli_in_process(["splits", "--corpus", corpus, "--protocol", "acd", "-o", out, *extra])
    assert_user_error(proc, 2, *fragments)
    assert not out.exists() and not (tmp_path / "parts").exists()


@pytest.mark.parametrize("unit, fragment", [
    ("nope", "column 'nope' not found"),  # exit 1 before: a column named by a flag is a usage error
    ("system", "cannot be the system"),  # "nothing to compare" before
    ("m", "cannot be the system, dataset or a compared score column"),
])
def test_compare_refuses_a_unit_that_cannot_pair_rows(scores, unit, fragment):
    proc = run_cli_in_process(["compare", "-s", scores, "--columns", "m", "--unit", unit,
                               "--resamples", "10", "--trials", "10"])
    assert_user_error(proc, 2, "--unit", fragment)


@pytest.mark.timeout(120)
def test_compmctg_refuses_a_device_as_splits_file_instead_of_reading_it(tmp_path):
    """A splits file that is a symlink to /dev/zero (a pull request can hold one) is refused
    before it is read; a pipe the user names (`--splits toy=<(...)`) is read, its writer theirs."""
    import os

    from tests.test_report_hostile_more import compmctg_inputs

    args = compmctg_inputs(tmp_path)
    os.symlink("/dev/zero", tmp_path / "zero.json")
    proc = run_cli_in_process(args + ["--splits", f"toy={tmp_path / 'zero.json'}"])
    assert_user_error(proc, 1, "--splits toy=", "a device, not a file")

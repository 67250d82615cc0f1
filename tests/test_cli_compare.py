"""`ctgscore compare` against a by-hand paired bootstrap, an exact permutation test, by-hand
means and ranks, and the leaderboard files it writes."""

from __future__ import annotations

import csv
import itertools
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli_in_process

N_DOCS = 10


@pytest.fixture
def table(tmp_path):
    """Three systems on ten documents: B a little above A with noise (p near 0.4, so the
    p-values are compared away from their bounds), C clearly above both; perplexity mirrors `m`.
    One row of C has an error (that document drops out of comparisons that include C)."""
    rng = np.random.default_rng(7)
    base = rng.normal(size=N_DOCS)
    values = {"A": base, "B": base + 0.1 + rng.normal(scale=0.5, size=N_DOCS),
              "C": base + 0.5 + rng.normal(scale=0.5, size=N_DOCS)}
    rows = []
    for system, scores in values.items():
        for doc, score in enumerate(scores):
            rows.append({"id": f"{system}{doc}", "system": system, "doc_id": f"d{doc}", "dataset": "toy",
                         "m": float(score), "perplexity": float(20 - score),
                         "error": "boom" if (system, doc) == ("C", 3) else None})
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path, values


def by_hand_bootstrap(a, b, resamples, seed):
    """Koehn-style paired bootstrap on per-unit scores: resample units with replacement, the
    two-sided p of delta = 0 from the resampled deltas shifted by the observed one."""
    rng = np.random.default_rng(seed)
    delta = a.mean() - b.mean()
    idx = rng.integers(0, len(a), size=(resamples, len(a)))
    deltas = a[idx].mean(axis=1) - b[idx].mean(axis=1)
    p = (1 + np.sum(np.abs(deltas - delta) >= abs(delta))) / (resamples + 1)
    return delta, p, np.percentile(deltas, [2.5, 97.5])


def exact_permutation_p(a, b):
    """Two-sided exact p-value of the paired sign-flip test (all 2^n swaps)."""
    diffs = a - b
    observed = abs(diffs.mean())
    flips = [abs((diffs * np.array(signs)).mean()) >= observed - 1e-12
             for signs in itertools.product([1, -1], repeat=len(diffs))]
    return float(np.mean(flips))


def test_compare_matches_by_hand_bootstrap_and_exact_permutation(table):
    path, values = table
    proc = run_cli_in_process(["compare", "-s", path, "--columns", "m", "--systems", "A", "B", "--resamples", "4000",
                    "--trials", "20000", "--seed", "1", "--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    (comparison,) = summary["comparisons"]
    assert comparison["n_units"] == N_DOCS and comparison["dataset"] == "toy"
    means = {s["system"]: s["mean"] for s in comparison["systems"]}
    assert means == pytest.approx({k: float(values[k].mean()) for k in ("A", "B")}, abs=1e-12)
    (pair,) = comparison["pairs"]
    a, b = values[pair["a"]], values[pair["b"]]
    delta, p_boot, interval = by_hand_bootstrap(a, b, 4000, seed=123)
    assert pair["diff"] == pytest.approx(delta, abs=1e-12)
    assert 0.2 < p_boot < 0.6  # a comparison away from the bounds of p
    assert pair["p_bootstrap"] == pytest.approx(p_boot, abs=0.035)  # ~3 Monte Carlo standard errors
    width = interval[1] - interval[0]
    assert pair["ci_diff"]["low"] == pytest.approx(interval[0], abs=0.1 * width)
    assert pair["ci_diff"]["high"] == pytest.approx(interval[1], abs=0.1 * width)
    assert pair["p_randomization"] == pytest.approx(exact_permutation_p(a, b), abs=0.012)


def test_leaderboard_ranks_and_error_rows(table, tmp_path):
    path, values = table
    out = tmp_path / "board.csv"
    proc = run_cli_in_process(["compare", "-s", path, "-o", out, "--resamples", "200", "--trials", "200"])
    assert proc.returncode == 0, proc.stderr
    with open(out, newline="") as handle:
        board = list(csv.DictReader(handle))
    keep = [d for d in range(N_DOCS) if d != 3]  # C's doc 3 has an error: every system is paired without it
    for column, lower in (("m", False), ("perplexity", True)):
        rows = {r["system"]: r for r in board if r["column"] == column}
        means = {s: float(np.mean([values[s][d] if column == "m" else 20 - values[s][d] for d in keep]))
                 for s in "ABC"}
        for system, row in rows.items():
            assert float(row["mean"]) == pytest.approx(means[system], abs=1e-9)
            assert float(row["low"]) <= float(row["mean"]) <= float(row["high"])
            assert int(row["n_units"]) == len(keep)
            assert (row["lower_is_better"] == "True") == lower
        order = sorted(means, key=means.get, reverse=not lower)
        assert [rows[s]["rank"] for s in order] == ["1", "2", "3"]
    assert "toy / m: 1. C" in proc.stdout


def test_markdown_and_json_outputs(table, tmp_path):
    path, _ = table
    md = tmp_path / "board.md"
    assert run_cli_in_process(["compare", "-s", path, "--columns", "m", "-o", md, "--resamples", "100", "--trials", "100"]).returncode == 0
    text = md.read_text()
    assert "| rank | system |" in text and "p (bootstrap)" in text and "p (randomization)" in text
    js = tmp_path / "board.json"
    assert run_cli_in_process(["compare", "-s", path, "--columns", "m", "-o", js, "--resamples", "100", "--trials", "100"]).returncode == 0
    data = json.loads(js.read_text())
    assert {r["system"] for r in data["leaderboard"]} == {"A", "B", "C"}
    page = tmp_path / "board.html"
    assert run_cli_in_process(["compare", "-s", path, "--columns", "m", "-o", page, "--previous", js, "--resamples", "100",
                    "--trials", "100"]).returncode == 0
    html = page.read_text()
    assert html.startswith("<!doctype html>") and html.count('class="cell ') == 6  # 3 x 3 matrix less the diagonal
    assert html.count('<td class="">=</td>') == 3  # same ranks as the previous JSON: nobody moved
    stdout = run_cli_in_process(["compare", "-s", path, "--columns", "m", "--resamples", "100", "--trials", "100",
                      "--tests", "randomization"]).stdout
    assert "| rank | system |" in stdout


def test_a_dataset_that_cannot_be_compared_is_skipped_not_fatal(table, tmp_path):
    path, _ = table
    frame = pq.read_table(path).to_pandas()
    lone = frame[frame["system"] == "A"].assign(dataset="single", id=lambda f: "x" + f["id"])
    mixed = tmp_path / "mixed.parquet"
    pq.write_table(pa.Table.from_pandas(pd.concat([frame, lone], ignore_index=True), preserve_index=False), mixed)
    proc = run_cli_in_process(["compare", "-s", mixed, "--columns", "m", "perplexity", "-o", tmp_path / "b.json",
                    "--resamples", "50", "--trials", "50", "--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert [c["dataset"] for c in summary["comparisons"]] == ["toy", "toy"]
    (line,) = summary["skipped"]  # one line for the dataset, both columns in it
    assert line.startswith("dataset 'single': 2 columns (m, perplexity): ") and "found 1" in line
    text = run_cli_in_process(["compare", "-s", mixed, "--columns", "m", "perplexity", "-o", tmp_path / "b.csv",
                    "--resamples", "50", "--trials", "50"]).stdout
    assert "compare: 2 of 4 comparisons (2 datasets x 2 columns: m, perplexity)" in text
    assert text.count("skipped:") == 1
    assert_user_error(run_cli_in_process(["compare", "-s", mixed, "--systems", "A", "nosuch"]), 2, "'nosuch'", "A, B, C")
    only_lone = tmp_path / "lone.parquet"
    pq.write_table(pa.Table.from_pandas(lone, preserve_index=False), only_lone)
    assert_user_error(run_cli_in_process(["compare", "-s", only_lone, "--columns", "m"]), 1, "nothing to compare", "single")


def _moves(page) -> list[str]:
    import re

    return re.findall(r'<td class="(?:up|down|new|)">([^<]*)</td>', page.read_text())


def test_previous_reads_the_meta_reports_results_json(table, tmp_path):
    """`--previous` reads any of the three: the meta report's results.json too."""
    path, _ = table
    frame = pq.read_table(path).to_pandas()
    with_human = tmp_path / "with_human.parquet"
    frame["human_q"] = np.arange(len(frame), dtype=float) % 5
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), with_human)
    report = tmp_path / "report"
    proc = run_cli_in_process(["meta", "-s", with_human, "-o", report, "--metrics", "m", "--tasks", "0", "--resamples", "50",
                               "--trials", "50", "--no-checklist"])
    assert proc.returncode == 0, proc.stderr
    pages = {}
    for name in ("results.json", "leaderboard.json"):
        pages[name] = tmp_path / f"board-{name}.html"
        proc = run_cli_in_process(["compare", "-s", path, "--columns", "m", "-o", pages[name], "--previous", report / name,
                                   "--resamples", "50", "--trials", "50"])
        assert proc.returncode == 0, proc.stderr
    # the same ranks as the report's: nobody moved, by either file
    assert _moves(pages["results.json"]) == _moves(pages["leaderboard.json"]) == ["=", "=", "="]


def test_previous_of_another_dataset_or_kind_is_refused(table, tmp_path):
    path, _ = table
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"leaderboard": [{"dataset": "summeval", "column": "m", "system": "A", "rank": 1}]}))
    args = ["compare", "-s", path, "--columns", "m", "-o", tmp_path / "b.html", "--resamples", "20", "--trials", "20"]
    assert_user_error(run_cli_in_process(args + ["--previous", other]), 2, "--previous", "other.json",
                      "dataset 'summeval'", "dataset 'toy'")
    other.write_text(json.dumps({"leaderboard": [{"dataset": "toy", "column": "bleu", "system": "A", "rank": 1}]}))
    assert_user_error(run_cli_in_process(args + ["--previous", other]), 2, "columns 'bleu'", "'m'")
    other.write_text(json.dumps({"rows": []}))
    assert_user_error(run_cli_in_process(args + ["--previous", other]), 2, "not a leaderboard JSON")
    assert_user_error(run_cli_in_process(args + ["--previous", path]), 2, "not a leaderboard JSON", "scores.parquet")
    assert not (tmp_path / "b.html").exists()

"""Pages people read stay usable when a dump names hundreds of systems.

Before, every page showed every pair: the HTML leaderboard a matrix and a table of n(n-1)/2
pairs, the Markdown two tables of them, so a page grew with the square of the systems
(`ctgscore meta`'s leaderboard.html was 188 MB at 500 systems). Above
`meta_eval.page_pairs.ALL_PAIRS_MAX` systems a page now shows the ranking with intervals and
clusters and the pairs that matter, and says in one line how many pairs it left out and which
JSON holds them all; the JSON keeps every pair, and pages up to the bound are as they were.
"""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pandas as pd
import pytest

from ctgscore.cli.compare import render
from ctgscore.testing.cli import run_cli_in_process
from meta_eval import compare, page_pairs
from meta_eval.page_pairs import ALL_PAIRS_MAX, IN_LEADERBOARD, IN_META, pairs_that_matter
from meta_eval.report.leaderboard import leaderboard_html
from tests.test_leaderboard_clusters import _frame


def _comparison(n: int, seed: int = 1):
    """n systems whose means spread evenly over 2 (noise 1) on 12 documents: a few clusters."""
    rng = np.random.default_rng(seed)
    values = np.linspace(0, 2, n)[None, :] + rng.normal(size=(12, n))
    return compare.compare_units(values, [f"s{k:03d}" for k in range(n)], 0, column="m1", n_resamples=100,
                                 trials=100, seed=0)


@pytest.fixture(scope="module")
def boards():
    return {n: _comparison(n) for n in (ALL_PAIRS_MAX, 60, 120)}


def _names(pairs) -> set[frozenset]:
    return {frozenset((p.a, p.b)) for p in pairs}


def test_neighbours_in_rank_and_the_pair_that_opens_each_cluster():
    """'c' is too noisy to be told from 'b' and joins b's cluster; 'd' opens the next one because
    it is separated from 'b' (the first of that cluster), a pair that is not neighbours in rank."""
    frame = _frame({"a": 1.0, "b": 0.9, "c": 0.8, "d": -1.0}, {"c": 2.0}, seed=11)
    (comp,) = compare.compare_systems(frame, ["m"], n_resamples=1000, trials=1000, seed=2)
    clusters = compare.significance_clusters(comp)
    assert [clusters[s] for s in "abcd"] == [1, 2, 2, 3]
    shown = pairs_that_matter(comp, clusters)
    assert _names(shown) == {frozenset(p) for p in ("ab", "bc", "cd", "bd")}
    assert len(shown) == len(_names(shown))  # each once


def test_the_shown_pairs_explain_every_cluster_line(boards):
    comp = boards[120]
    clusters = compare.significance_clusters(comp)
    shown = pairs_that_matter(comp, clusters)
    order = [s.system for s in comp.systems]
    assert len(set(clusters.values())) > 2
    assert len(shown) <= 2 * (len(order) - 1)
    assert {frozenset(p) for p in zip(order, order[1:])} <= _names(shown)
    for k, name in enumerate(order[1:], 1):
        if clusters[name] != clusters[order[k - 1]]:  # opens a cluster: a shown pair separates it from the one before
            before = {s for s in order[:k] if clusters[s] == clusters[name] - 1}
            assert any(p.better is not None and {p.a, p.b} - {name} <= before and name in (p.a, p.b) for p in shown)


def _pair_rows(page: str) -> int:
    pairs = page.split('<table class="pairs sortable">', 1)[1].split("</table>", 1)[0]
    return pairs.count("<tr>") - 1


def test_pages_grow_linearly_above_the_bound(boards):
    """From 60 to 120 systems (1,770 to 7,140 pairs) a page at most a little more than doubles;
    every page of the old code grew about fourfold."""
    html_60, html_120 = (leaderboard_html([boards[n]]) for n in (60, 120))
    md_60, md_120 = (render([boards[n]], "md") for n in (60, 120))
    assert len(html_120) < 2.3 * len(html_60) and len(md_120) < 2.3 * len(md_60)
    assert len(html_120) < 800 * 120 and len(md_120) < 400 * 120  # about 0.3 and 0.2 KB a system here
    assert "<svg" not in html_120 and _pair_rows(html_120) == len(pairs_that_matter(
        boards[120], compare.significance_clusters(boards[120])))
    document = json.loads(render([boards[120]], "json"))  # nothing is left out of the machine output
    assert len(document["comparisons"][0]["pairs"]) == 120 * 119 // 2


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_the_page_says_how_many_pairs_are_left_out_and_where_they_all_are(boards, fmt):
    comp = boards[60]
    shown = len(pairs_that_matter(comp, compare.significance_clusters(comp)))
    for where, names in ((None, ["ctgscore compare -o FILE.json"]), (IN_LEADERBOARD, ["leaderboard.json"]),
                         (IN_META, ["leaderboard.json", "results.json"])):
        page = render([comp], fmt, pairs_in=where)
        text = html.unescape(re.sub(r"<[^>]+>", "", page)) if fmt == "html" else page.replace("`", "")
        (line,) = [t for t in text.splitlines() if "left out of this page" in t]
        assert f"{1770 - shown:,} of 1,770 system pairs are left out" in line
        assert all(name in line for name in names) and "comparisons[].pairs" in line
    if fmt == "html":  # the ranking keeps its intervals and clusters
        assert page.count('<td class="sys">s0') >= 60 and "No matrix of the 60 systems" in page
    else:
        assert "| rank | system | mean | 95% low | 95% high | cluster |" in page


def test_pages_up_to_the_bound_show_every_pair_as_before(boards, monkeypatch):
    """At `ALL_PAIRS_MAX` systems the page is byte for byte the all-pairs page (matrix and every
    pair), the page a higher bound gives."""
    comp = boards[ALL_PAIRS_MAX]
    pages = [leaderboard_html([comp]), render([comp], "md")]
    assert _pair_rows(pages[0]) == len(comp.pairs) and "<svg" in pages[0] and "left out of this page" not in pages[1]
    monkeypatch.setattr(page_pairs, "ALL_PAIRS_MAX", 10**6)
    assert [leaderboard_html([comp]), render([comp], "md")] == pages


@pytest.mark.timeout(120)
def test_meta_report_pages_name_the_json_that_keeps_every_pair(tmp_path):
    n, docs = 55, 6
    rng = np.random.default_rng(0)
    frame = pd.DataFrame([{"id": f"{s}-{k}", "dataset": "news", "system": f"sys{s:02d}", "doc_id": f"d{k}"}
                          for s in range(n) for k in range(docs)])
    frame["human_q"] = np.repeat(np.linspace(0, 3, n), docs) + rng.normal(size=len(frame))
    frame["m1"] = frame["human_q"] + rng.normal(size=len(frame))
    frame["error"] = None
    frame.to_parquet(tmp_path / "scores.parquet", index=False)
    done = run_cli_in_process(["meta", "-s", tmp_path / "scores.parquet", "-o", tmp_path / "out", "--resamples", "50",
                               "--trials", "50", "--no-checklist", "--tasks", "0", "--no-progress"])
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "out"
    total = n * (n - 1) // 2
    for page in ("report.md", "report.html", "leaderboard.html"):
        text = (out / page).read_text(encoding="utf-8")
        lines = [t for t in re.sub(r"<[^>]+>", "", text).replace("`", "").splitlines() if "left out of this page" in t]
        assert len(lines) == 2, page  # one per compared column (human_q, m1)
        assert all(f"of {total:,} system pairs" in t and "leaderboard.json" in t and "results.json" in t
                   for t in lines), page
    results = json.loads((out / "results.json").read_text())
    assert [len(c["pairs"]) for g in results["groups"] for c in g["systems"]] == [total, total]
    board = json.loads((out / "leaderboard.json").read_text())
    assert [len(c["pairs"]) for c in board["comparisons"]] == [total, total]

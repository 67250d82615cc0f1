"""A name of 200,000 characters in the data keeps every report readable and small.

Before `scoring.display_names`, a huge system, dataset or column name was shown whole in every
table cell, heading, contents link and section id: `meta`'s report.md was 13.6 MB and
leaderboard.html 9 MB for one such name of each kind, `compare`'s board 6.8 MB. Now a name is
shown in at most 120 characters (head, length and digest, tail), two different names never
read alike, the HTML carries the name in a `title` and once whole, and the machine outputs
(JSON, CSV) keep it raw.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from ctgscore.testing.cli import run_cli_in_process
from scoring.display_names import DISPLAY_MAX, TITLE_MAX, display_name, html_name, is_cut
from scoring.tables import markdown_name, markdown_table, visible

N = 200_000
LONG_DATASET = "D" * N
LONG_METRIC = "M" * N
# a huge name whose head carries every character that could end an attribute or open a tag
HOSTILE = "\"'><b>&amp;\n<script>x</script>" + "S" * N
MID_A, MID_B = "x" * 1000 + "A" + "x" * 1000, "x" * 1000 + "B" + "x" * 1000  # differ only in the middle
SYSTEMS = ["s1", HOSTILE, MID_A, MID_B]
LONG_NAMES = [LONG_DATASET, LONG_METRIC, HOSTILE, MID_A, MID_B]
RUN = re.compile(r"([A-Zx])\1{999,}")  # 1,000 repeats of one letter: a name shown whole


def csv_rows(path) -> list[dict]:
    """The rows of a CSV whose cells hold the names whole (past the csv module's cap, which is
    raised for this read only: it is process-wide)."""
    previous = csv.field_size_limit(4 * N)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    finally:
        csv.field_size_limit(previous)


def _dump(path):
    rng = np.random.default_rng(3)
    rows = [{"id": f"{d}-{s}-{k}", "dataset": dataset, "system": system, "doc_id": f"doc{k}"}
            for d, dataset in enumerate(["news", LONG_DATASET]) for s, system in enumerate(SYSTEMS) for k in range(8)]
    frame = pd.DataFrame(rows)
    frame["human_q"] = rng.normal(size=len(frame))
    frame["m1"] = frame["human_q"] + rng.normal(size=len(frame))
    frame[LONG_METRIC] = rng.normal(size=len(frame))
    frame["error"] = None
    frame.to_parquet(path, index=False)
    return path


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    scores = _dump(root / "scores.parquet")
    done = run_cli_in_process(["meta", "-s", scores, "-o", root / "meta", "--resamples", "20", "--trials", "20",
                               "--no-checklist", "--level", "sample", "--methods", "pearson", "--tasks", "0"])
    assert done.returncode == 0, done.stderr[-2000:]
    for suffix in ("md", "html", "json", "csv"):
        done = run_cli_in_process(["compare", "-s", scores, "-o", root / f"board.{suffix}", "--resamples", "20",
                                   "--trials", "20"])
        assert done.returncode == 0, done.stderr[-2000:]
    return root


class Page(HTMLParser):
    """Parses a page strictly enough to catch markup that escaped: every end tag closes the
    element open at that point, and every element is closed; records each `span.cut` (its
    attributes and text: a tag inside one would be recorded as a problem or an element)."""

    VOID = {"meta", "br", "img", "input", "hr", "link"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.cuts, self.problems = [], [], []

    def handle_starttag(self, tag, attrs):
        if tag == "span" and dict(attrs).get("class") == "cut":
            self.cuts.append({"attrs": dict(attrs), "text": ""})
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack[-1:] == ["span"] and self.cuts:
            self.cuts[-1]["text"] += data


def parse(page: str) -> Page:
    parser = Page()
    parser.feed(page)
    parser.close()
    assert parser.problems == [] and parser.stack == [], (parser.problems[:3], parser.stack[-3:])
    return parser


def test_short_names_show_whole_and_long_ones_in_at_most_the_limit():
    assert display_name("gpt2-large") == "gpt2-large" and not is_cut("x" * DISPLAY_MAX)
    assert display_name("a\nb") == "a\\nb"  # control characters show as escapes, as everywhere
    for name in LONG_NAMES + ["\x00" * 300, "\u202e" * 130, "é" * 121]:
        shown = display_name(name)
        assert is_cut(name) and len(shown) <= DISPLAY_MAX, (len(shown), shown)
        digest = hashlib.sha256(name.encode()).hexdigest()[:32]
        assert f"…[{len(name):,} characters, sha256 {digest}]…" in shown
        assert shown.startswith(visible(name)[:10]) and shown.endswith(visible(name)[-5:])
    assert re.fullmatch(r"(\\x00)+…\[300 characters, sha256 [0-9a-f]{32}\]…(\\x00)+", display_name("\x00" * 300))


def test_two_different_names_never_show_alike():
    cut = "L" * 3000
    names = [cut + "1", cut + "2", MID_A, MID_B, "x" * 121, "x" * 122, "a\nb" * 60, "a\\nb" * 60]
    shown = [display_name(n) for n in names]
    assert len(set(shown)) == len(names)
    # a short name that spells out another's cut form is shown cut too, with its own length and digest
    posing = display_name(cut + "1")
    assert len(posing) <= DISPLAY_MAX and display_name(posing) != posing
    assert display_name(posing) not in shown and len(display_name(posing)) <= DISPLAY_MAX
    # a name with a look-alike marker that is not the real one (no 32 hex digits) stays whole
    assert display_name("a…[3 characters, sha256 abc]…b") == "a…[3 characters, sha256 abc]…b"


def test_a_title_keeps_quotes_brackets_ampersands_and_newlines_inside():
    cell = html_name(HOSTILE)
    (span,) = parse(f"<div>{cell}</div>").cuts
    assert span["attrs"]["title"] == display_name(HOSTILE, TITLE_MAX)  # decoded by the parser: the name's text
    assert span["attrs"]["title"].startswith("\"'><b>&amp;\\n<script>x</script>SSS")
    assert span["text"] == display_name(HOSTILE) and set(span["attrs"]) == {"class", "title"}
    assert "\n" not in cell and "<b>" not in cell and "<script>" not in cell
    short = "\"'><b>&\n" + "t" * 200  # under TITLE_MAX: the title is the whole name
    (span,) = parse(html_name(short)).cuts
    assert span["attrs"]["title"] == visible(short)
    assert html_name("<b>&") == "&lt;b&gt;&amp;"  # not cut: escaped text, no span


def test_markdown_name_is_escaped_once_and_renders_as_the_display():
    name = "*<b>|" + "q" * 300 + "`"
    md = markdown_table(["system"], [[name]])
    cell = MarkdownIt("commonmark").enable("table").render(md)
    assert html.unescape(re.search(r"<td>(.*?)</td>", cell).group(1)) == display_name(name)
    assert markdown_name("a_b") == "a_b" and markdown_name("&") == "\\&"  # escaped once, as markdown_text does


def test_meta_report_is_small_and_every_name_whole_in_the_json(outputs):
    out = outputs / "meta"
    md = (out / "report.md").read_text()
    assert len(md) < 100_000 and not RUN.search(md)
    assert "Names longer than 120 characters are shown cut" in md and "`results.json`" in md
    headings = re.findall(r"^## Dataset (.*)$", md, re.M)
    assert len(headings) == 2 and len(headings[1]) < 140  # escapes of the marker's brackets aside
    report = (out / "report.html").read_text()
    assert not re.search(r"([A-Zx])\1{%d,}" % TITLE_MAX, report)  # a title holds at most 2,000 characters
    board = (out / "leaderboard.html").read_text()
    assert len(board) < 4 * N + 200_000  # each long name once whole (the folded list), not once per cell
    for name in (LONG_DATASET, LONG_METRIC, HOSTILE):
        assert board.count(html.escape(visible(name))) == 1
    results = json.loads((out / "results.json").read_text())
    assert {g["name"] for g in results["groups"]} == {"news", LONG_DATASET}
    leaderboard = json.loads((out / "leaderboard.json").read_text())
    assert {row["system"] for row in leaderboard["leaderboard"]} == set(SYSTEMS)
    assert {row["column"] for row in leaderboard["leaderboard"]} >= {LONG_METRIC}
    assert {row["dataset"] for row in csv_rows(out / "leaderboard.csv")} == {"news", LONG_DATASET}


def test_the_leaderboard_page_is_valid_small_and_keeps_names_apart(outputs):
    board = (outputs / "board.html").read_text()
    parsed = parse(board)
    assert len(board) < 4 * N + 200_000
    for span in parsed.cuts:  # every cut name's title decodes to its own name (or its cut at TITLE_MAX)
        name = next(n for n in LONG_NAMES if display_name(n) == span["text"])
        assert span["attrs"]["title"] == display_name(name, TITLE_MAX)
    shown = {span["text"] for span in parsed.cuts}
    assert {display_name(n) for n in LONG_NAMES} == shown  # MID_A and MID_B read differently
    ids = re.findall(r'\sid="([^"]*)"', board)
    assert len(ids) == len(set(ids)) and max(map(len, ids)) < 120
    rows = re.findall(r'<table class="board sortable">(.*?)</table>', board)
    assert all(len(r) < 30_000 for r in rows)  # a table: cells and titles, no name whole
    assert len(re.findall(r'<section id="', board)) == 4  # 2 datasets x 2 columns, none merged


def test_compare_markdown_and_machine_outputs(outputs):
    md = (outputs / "board.md").read_text()
    assert len(md) < 50_000 and not RUN.search(md)
    assert "`compare -o FILE.json`" in md
    systems = {row["system"] for row in json.loads((outputs / "board.json").read_text())["leaderboard"]}
    assert systems == set(SYSTEMS)
    assert {row["column"] for row in csv_rows(outputs / "board.csv")} == {"m1", LONG_METRIC}


def test_systems_gone_since_the_last_refresh_are_cut_too():
    from meta_eval import compare
    from meta_eval.report.leaderboard import leaderboard_html

    frame = pd.DataFrame({"doc_id": np.tile(np.arange(6), 2), "system": ["a"] * 6 + ["b"] * 6,
                          "dataset": "d", "m": np.arange(12.0)})
    comparisons = compare.compare_systems(frame, ["m"], n_resamples=20, trials=20, seed=0)
    gone = "R" * N
    previous = {"leaderboard": [{"dataset": "d", "column": "m", "system": gone, "rank": 1}]}
    page = leaderboard_html(comparisons, previous=previous)
    parse(page)
    note = re.search(r'<p class="note gone">(.*?)</p>', page).group(1)
    assert len(note) < 3 * TITLE_MAX and html.escape(display_name(gone)) in note
    assert page.count(gone) == 1 and len(page) < N + 50_000


def test_constraints_splits_and_compmctg_reports_cut_names():
    from meta_eval.codi import markdown as codi_markdown
    from meta_eval.compmctg import markdown_section
    from splits.report import report_markdown

    report = {"signature": "s", "signatures": {"accuracy": "a", "self_bleu": "b"}, "systems": [HOSTILE, "ok"],
              "results": [{"system": HOSTILE, "task": "T" * N, "measure": "accuracy", "value": 0.5, "n_errors": 1,
                           "n_rows": 2}]}
    for md in (codi_markdown(report),
               report_markdown({"protocol": "P" * N, "n_splits": 1, "summary": {
                   "A_iid": 0.5, "A_comp": 0.4, "P_iid": 1.0, "P_comp": 2.0, "dist3_iid": 0.1, "dist3_comp": 0.2,
                   "gap": 0.1, "accuracy_per_aspect_iid": {"A" * N: 0.5}, "accuracy_per_aspect_comp": {}}}),
               markdown_section({"datasets": {"D" * N: {"protocols": [{"protocol": "Q" * N, "splits": 1, "A_iid": 0.5,
                                                                        "A_comp": 0.4, "gap": 0.1, "P_iid": 1.0,
                                                                        "P_comp": 2.0}], "fewshot": [],
                                                        "average": {"A_avg": 0.5, "G_avg": 0.1, "P_avg": 1.0}}}})):
        assert len(md) < 5_000 and not RUN.search(md), md[:300]
        assert "Names longer than 120 characters are shown cut" in md
        assert max(len(line) for line in md.splitlines()) < 1_000


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_browser_shows_cut_names_with_their_titles_and_runs_no_data(outputs):
    """Headless Chromium's view of `compare`'s board.html: the page fits a laptop's width, each
    cut name's `title` is the name (the hostile head's quotes, tags and newline as text), no
    element of the data was made, and every contents link lands."""
    from tests.browser import render

    dom = """() => ({
      cuts: Array.from(document.querySelectorAll('span.cut')).map(s => [s.textContent, s.title]),
      scripts: document.querySelectorAll('script').length, bold: document.querySelectorAll('b').length})"""
    rendered, info = render(outputs / "board.html", width=1280, evaluate=dom)
    assert rendered.scroll_width <= 1280
    assert rendered.anchors and all(a["target_exists"] for a in rendered.anchors)
    assert info["scripts"] == 1 and info["bold"] == 0  # the page's own sort script; the name's <b> is text
    titles = {text: title for text, title in info["cuts"]}
    assert titles[display_name(HOSTILE)] == display_name(HOSTILE, TITLE_MAX)
    for name in (MID_A, MID_B):  # 2,001 characters: the title too is cut (at 2,000), each with its own digest
        assert titles[display_name(name)] == display_name(name, TITLE_MAX)
    assert titles[display_name(MID_A)] != titles[display_name(MID_B)] and len(titles) == len(LONG_NAMES)


def test_the_report_page_carries_each_cut_name_in_a_title(outputs):
    """report.html is rendered from report.md (raw HTML off): each cut dataset, metric and
    system there is wrapped in a span whose title is the name; the Markdown stays plain text."""
    page = (outputs / "meta" / "report.html").read_text()
    parsed = parse(page)
    found = {span["text"]: span["attrs"]["title"] for span in parsed.cuts}
    for name in (LONG_DATASET, LONG_METRIC, HOSTILE, MID_A, MID_B):
        assert found[display_name(name)] == display_name(name, TITLE_MAX)
    assert "<span" not in (outputs / "meta" / "report.md").read_text()
    assert len(page) < 2_000_000 and "<b>" not in page


def test_a_constraints_report_page_titles_a_cut_system(tmp_path):
    from meta_eval.codi import write_report

    report = {"signature": "s", "signatures": {"accuracy": "a", "self_bleu": "b"}, "systems": [HOSTILE, "ok"],
              "results": [{"system": HOSTILE, "task": "lexical", "measure": "accuracy", "value": 0.5}]}
    paths = write_report(report, tmp_path, plot=False)
    page = paths["html"].read_text()
    (span, *more) = parse(page).cuts
    assert span["attrs"]["title"] == display_name(HOSTILE, TITLE_MAX) and span["text"] == display_name(HOSTILE)
    assert len(page) < 50_000 and json.loads(paths["json"].read_text())["systems"][0] == HOSTILE

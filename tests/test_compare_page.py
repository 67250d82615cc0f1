"""The leaderboard page (meta_eval.report.leaderboard) rendered in headless Chromium: what the
browser shows (DOM after layout, a screenshot), not only the HTML text."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from meta_eval import compare
from meta_eval.report.leaderboard import leaderboard_html, leading_group, mark, moves


@pytest.fixture(scope="module")
def comparisons():
    """Five systems on 40 documents: 'best' clearly ahead, 'twin1'/'twin2' identical, 'low' behind."""
    rng = np.random.default_rng(5)
    base = rng.normal(size=40)
    shifts = {"best": 1.0, "near": 0.98, "twin1": 0.0, "twin2": 0.0, "low": -1.0}
    frame = pd.concat([pd.DataFrame({"doc_id": np.arange(40), "system": name, "dataset": "toy",
                                     "m": base + shift + (rng.normal(0, 0.3, 40) if name == "near" else 0)})
                       for name, shift in shifts.items()])
    return compare.compare_systems(frame, ["m"], n_resamples=300, trials=300, seed=1)


PREVIOUS = {"leaderboard": [
    {"dataset": "toy", "column": "m", "system": "twin1", "rank": 1},
    {"dataset": "toy", "column": "m", "system": "best", "rank": 2},
    {"dataset": "toy", "column": "m", "system": "low", "rank": 3},
    {"dataset": "toy", "column": "m", "system": "retired", "rank": 4}]}


def test_leading_group_marks_and_moves(comparisons):
    (comp,) = comparisons
    assert [s.system for s in comp.systems][:2] == ["best", "near"]
    assert leading_group(comp) == ["best", "near"]  # near is within noise of best, the rest are not
    assert mark(comp, "best", "low") == "better" and mark(comp, "low", "best") == "worse"
    assert mark(comp, "twin1", "twin2") == "same"
    moved, gone = moves(comp, PREVIOUS)
    assert moved == {"best": "▲1", "near": "new", "twin1": "▼2", "twin2": "new", "low": "▼2"}
    assert gone == ["retired"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_page_renders_in_chromium(comparisons, tmp_path):
    from PIL import Image

    from tests.browser import render

    page = tmp_path / "board.html"
    page.write_text(leaderboard_html(comparisons, previous=PREVIOUS), encoding="utf-8")
    shot = tmp_path / "board.png"
    dom = """() => ({
      rows: Array.from(document.querySelectorAll('table.board tr')).slice(1).map(
        tr => Array.from(tr.cells).map(td => td.innerText.trim())),
      lead: Array.from(document.querySelectorAll('tr.lead')).map(tr => tr.cells[1].innerText),
      cells: Array.from(document.querySelectorAll('rect.cell')).map(r => [r.dataset.row, r.dataset.col,
             r.getAttribute('class').split(' ')[1], r.getBoundingClientRect().width]),
      svg: document.querySelector('svg.matrix').getBoundingClientRect().width,
      clipped: Array.from(document.querySelectorAll('svg.matrix text')).filter(t => {
        const box = t.getBoundingClientRect(), svg = t.ownerSVGElement.getBoundingClientRect();
        return box.left < svg.left - 1 || box.right > svg.right + 1 || box.top < svg.top - 1;
      }).map(t => t.textContent)})"""
    rendered, info = render(page, width=1280, screenshot=shot, evaluate=dom)
    assert rendered.scroll_width <= 1280  # nothing overflows the viewport
    assert rendered.anchors and all(a["target_exists"] for a in rendered.anchors)
    assert [r[1] for r in info["rows"]] == ["best", "near", "twin1", "twin2", "low"]
    assert [r[5] for r in info["rows"]] == ["▲1", "new", "▼2", "new", "▼2"]
    assert info["lead"] == ["best", "near"]
    assert "No longer on the board: retired" in rendered.text
    states = {(row, col): state for row, col, state, _ in info["cells"]}
    assert len(states) == 20 and states[("best", "low")] == "better" and states[("low", "best")] == "worse"
    assert states[("twin1", "twin2")] == "same"
    assert all(width > 10 for *_, width in info["cells"]) and info["svg"] > 100  # laid out, visible
    assert info["clipped"] == []  # every system label lies inside the plot
    image = Image.open(shot).convert("RGB")
    pixels = np.asarray(image).reshape(-1, 3).astype(int)
    green = np.abs(pixels - [0x4C, 0x9A, 0x5B]).sum(axis=1) < 30
    red = np.abs(pixels - [0xD0, 0x64, 0x5A]).sum(axis=1) < 30
    assert green.sum() > 300 and red.sum() > 300  # the matrix's marks were painted
    json.dumps(rendered.anchors)


def test_numbers_keep_four_digits_without_an_exponent_in_the_usual_range():
    from meta_eval.report.leaderboard import _fmt

    assert [_fmt(v) for v in (0.012345, 12.3456, 1234.5, 12345.6, -98765.4, 3.2e-6, 2e16, None, float("nan"))] == \
        ["0.01235", "12.35", "1234", "12346", "-98765", "3.2e-06", "2e+16", "–", "–"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_page_fits_a_phone_with_perplexity_sized_numbers(tmp_path):
    """At 390 px, with numbers in the tens of thousands (perplexity), a long system name and the
    moves column: nothing widens the page, and no number or interval breaks over lines."""
    from tests.browser import render

    rng = np.random.default_rng(7)
    base = rng.normal(size=30) * 3000 + 12000
    shifts = {"a-system-with-a-rather-long-name": 500.0, "b": 0.0, "c": -400.0, "d": 100.0}
    frame = pd.concat([pd.DataFrame({"doc_id": np.arange(30), "system": name, "dataset": "toy",
                                     "perplexity": base + shift + rng.normal(0, 900, 30)})
                       for name, shift in shifts.items()])
    comps = compare.compare_systems(frame, ["perplexity"], n_resamples=200, trials=200, seed=1)
    previous = {"leaderboard": [{"dataset": "toy", "column": "perplexity", "system": "b", "rank": 1}]}
    page = tmp_path / "board.html"
    page.write_text(leaderboard_html(comps, previous=previous), encoding="utf-8")
    dom = """() => {
      document.querySelectorAll('details').forEach(d => d.open = true);
      const lines = td => { const range = document.createRange(); range.selectNodeContents(td);
                            return new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top))).size; };
      const numeric = Array.from(document.querySelectorAll('table td:not(.sys)'));
      return {texts: numeric.map(td => td.innerText), lines: numeric.map(lines),
              boxes: Array.from(document.querySelectorAll('.scroll')).map(b => b.getBoundingClientRect().right),
              width: document.documentElement.scrollWidth};
    }"""
    rendered, info = render(page, width=390, height=800, evaluate=dom)
    assert rendered.scroll_width <= 390 and info["width"] <= 390
    assert all(right <= 390 for right in info["boxes"])
    assert not [t for t in info["texts"] if "e+" in t]
    assert any(" – " in t and len(t) >= 13 for t in info["texts"])  # an interval of two 5-digit numbers
    assert max(info["lines"]) == 1, list(zip(info["texts"], info["lines"]))

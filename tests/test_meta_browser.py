"""The meta-evaluation report as a browser renders it (headless Chromium, `tests/browser.py`): no
horizontal overflow at 1280 px, a table of contents whose links land, folded tables that make
the page at least 4x shorter than the same page unfolded, '–' for undefined comparisons."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from meta_eval import io, pipeline, report

browser = pytest.importorskip("tests.browser")

OPEN_ALL = """() => { const closed = document.documentElement.scrollHeight;
  document.querySelectorAll('details').forEach(d => d.open = true);
  return {closed: closed, open: document.documentElement.scrollHeight,
          width_open: document.documentElement.scrollWidth}; }"""


@pytest.fixture(scope="module")
def demo_like_report(shared_data, tmp_path_factory):
    """Scores shaped like the demo's: two datasets, many systems (SummEval's 16), a constant metric."""
    summ = pd.read_parquet(shared_data / "corpora" / "summeval.parquet")
    summ = summ[summ["doc_id"].isin(sorted(summ["doc_id"].unique())[:10])].reset_index(drop=True)
    ctrl = pd.read_parquet(shared_data / "corpora" / "ctrleval_senti.parquet")
    frames = []
    rng = np.random.default_rng(0)
    for frame in (summ, ctrl):
        humans = [c for c in frame.columns if c.startswith("human_")]
        part = frame[["id", "dataset", "system", "doc_id"] + humans].copy()
        part["text_stats_words"] = frame["text"].str.split().str.len().astype(float)
        part["chars"] = frame["text"].str.len().astype(float)
        part["noisy_coherence"] = frame[humans[0]] + rng.normal(0, 1, len(frame))
        part["constant_metric"] = 1.0
        frames.append(part)
    path = tmp_path_factory.mktemp("scores") / "scores.parquet"
    pd.concat(frames, ignore_index=True).to_parquet(path, index=False)
    table = io.read_table(str(path))
    result = pipeline.run_meta(table, pipeline.Options(resamples=50, trials=100, boot_levels=["sample", "system"]))
    out = tmp_path_factory.mktemp("report")
    report.write_report(result, out)
    return result, out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_report_renders_without_overflow_with_a_working_toc(demo_like_report, tmp_path):
    result, out = demo_like_report
    page, heights = browser.render(out / "report.html", width=1280, screenshot=tmp_path / "top.png",
                                   evaluate=OPEN_ALL)
    assert page.scroll_width <= page.viewport_width
    toc = [a for a in page.anchors if a["href"].startswith("#")]
    assert len(toc) >= 2 * len(result.groups) and all(a["target_exists"] for a in toc)
    assert {f"Dataset {g.name}" for g in result.groups} <= {a["text"] for a in toc}
    assert page.text.index("Contents") < page.text.index("Summary")  # the map comes first
    assert heights["open"] >= 4 * heights["closed"]  # folding, not removal, shortens the page
    assert heights["width_open"] <= 1280 + 1  # open tables scroll inside themselves, not the page
    assert (tmp_path / "top.png").stat().st_size > 10_000


def test_undefined_comparisons_are_dashes_and_nothing_is_dropped_from_json(demo_like_report):
    result, out = demo_like_report
    block = result.groups[0].significance[0]
    assert block.mark("text_stats_words", "constant_metric") == "–"
    md = (out / "report.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| text_stats_words | constant_metric |")]
    assert rows and all(line.rstrip(" |").endswith("–") for line in rows)
    saved = json.loads((out / "results.json").read_text())
    comps = saved["groups"][0]["significance"][0]["comparisons"]
    assert len(comps) == len(block.metrics) * (len(block.metrics) - 1)
    undefined = [c for c in comps if "constant_metric" in (c["a"], c["b"])]
    assert undefined and all(c["p_value"] is None and c["defined"] is False for c in undefined)
    assert all({"sided", "alpha", "ci_diff", "p_value", "test"} <= set(c) for c in comps)

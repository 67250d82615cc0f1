"""Names from a dump never make one report output hide another, and never read alike.

A crafted dump runs once through `ctgscore meta`. Its datasets and columns are names that are
distinct strings but one file on a case-insensitive or Unicode-normalising filesystem (macOS,
Windows: `A`/`a`, NFC/NFD `Å`, `x.`/`x`, `Report.HTML` beside `report.html`), a Windows device
name (`CON`), two column names longer than a plain file name whose slugs share the 8-hex-digit
SHA-256 prefix (found by a birthday search in 85,000 tries), headings and sections whose ids
the old numbering gave twice (`A`, `a`, `a 2`; `g/h` and `g_h`), systems that differ only by a
control character or past the point where a label is cut, systems that spreadsheet programs
would run as formulas without a leading `=`, and a metric of size 1e300. Every input must come
out as its own file, section and row, and read differently from every other.
"""

from __future__ import annotations

import csv
import html
import json
import re
import unicodedata
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from markdown_it import MarkdownIt

from ctgscore.testing.cli import run_cli_in_process
from meta_eval.report import plots
from scoring.file_names import FileNames, safe_name
from scoring.tables import markdown_table, spreadsheet_cell

# two names over 64 characters whose slugs and SHA-256 prefixes are the same
LONG_A, LONG_B = "m" * 70 + "70408", "m" * 70 + "84751"
DATASETS = ["A", "a", "a 2", "x.", "x", "\u00c5", "A\u030a", "CON", "Report.HTML", "g/h", "g_h"]
CUT = "L" * 3000  # two systems whose names differ only after 3,000 characters
SYSTEMS = ["\n=4", "\x00@x", "\uff1dcmd", " =3", "\u200b=1", "sys\nA", "sys A", CUT + "1", CUT + "2"]
HUMANS = ["human_Flu", "human_flu"]
FULL = ("A", "a")  # every system and column; the other datasets: three systems, two columns (fewer plots)
WINDOWS_DEVICE = re.compile(r"(con|prn|aux|nul|com\d|lpt\d)(\..*)?", re.IGNORECASE)


def fs_key(name: str) -> str:
    """How macOS (case-insensitive, normalisation-insensitive) and Windows (case-insensitive,
    trailing dots and spaces dropped) compare two file names."""
    return unicodedata.normalize("NFC", name).lower().rstrip(". ")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    rng = np.random.default_rng(5)
    rows = []
    for dataset in DATASETS:
        for system in SYSTEMS if dataset in FULL else SYSTEMS[-3:]:
            rows += [{"id": f"r{len(rows) + doc}", "dataset": dataset, "system": system, "doc_id": f"doc{doc}"}
                     for doc in range(3)]
    frame = pd.DataFrame(rows)
    full = frame["dataset"].isin(FULL).to_numpy()
    for human in HUMANS:
        frame[human] = rng.normal(size=len(frame))
    frame[LONG_A] = frame["human_Flu"] + rng.normal(size=len(frame))
    frame[LONG_B] = np.where(full, rng.normal(size=len(frame)) + 2.0, np.nan)  # the other datasets: two columns
    frame["human_flu"] = np.where(full, frame["human_flu"], np.nan)
    frame["m_huge"] = np.where(full, rng.normal(size=len(frame)) * 1e300, np.nan)
    frame["error"] = None
    frame.to_parquet(root / "scores.parquet", index=False)
    out = root / "meta"
    result = run_cli_in_process(["meta", "-s", root / "scores.parquet", "-o", out, "--resamples", "20", "--trials",
                                 "20", "--no-checklist", "--level", "sample", "--methods", "pearson"])
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def test_plain_names_that_would_be_one_file_elsewhere_are_not(report):
    assert safe_name(LONG_A) == safe_name(LONG_B)  # the crafted collision the report must survive
    for folder in [report] + [p for p in report.rglob("*") if p.is_dir()]:
        names = [p.name for p in folder.iterdir()]
        clashes = [n for n, count in Counter(fs_key(n) for n in names).items() if count > 1]
        assert not clashes, (folder, clashes)
        assert not [n for n in names if WINDOWS_DEVICE.fullmatch(n)], folder
    folders = [p for p in report.iterdir() if p.is_dir()]
    assert len(folders) == len(DATASETS)  # one plot folder each, none shared
    assert (report / "report.html").read_text().startswith("<!doctype html>")  # not a dataset's folder


def test_every_plot_the_report_names_is_its_own_file(report):
    md = (report / "report.md").read_text()
    tokens = MarkdownIt("commonmark").parse(md)
    images = [(c.content, str(c.attrGet("src"))) for t in tokens for c in t.children or () if c.type == "image"]
    sources = [src for _, src in images]
    assert len(sources) == len(set(sources)) == len(list(report.rglob("*.png")))  # nothing drawn over another
    page = (report / "report.html").read_text()  # every plot embedded, a folder named in any script too
    assert "image not embedded" not in page and page.count('<img src="data:image/png;base64,') == len(sources)
    by_caption = dict(images)
    for dataset in ("A", "a"):  # per dataset: both crafted metrics and both humans keep a plot of their own
        for a, b in ((LONG_A, LONG_B), ("human_Flu", "human_flu")):
            first, second = by_caption[f"{dataset}: leaderboard, {a}"], by_caption[f"{dataset}: leaderboard, {b}"]
            assert first != second
            assert (report / first).read_bytes() != (report / second).read_bytes()


def _ids(page: str) -> list[str]:
    return re.findall(r'\sid="([^"]*)"', page)


def test_every_contents_link_lands_on_its_own_section(report):
    page = (report / "report.html").read_text()
    ids = _ids(page)
    assert len(ids) == len(set(ids))
    headings = dict(re.findall(r'<h[23] id="([^"]*)">(.*?)</h[23]>', page))
    links = re.findall(r'<a href="#([^"]*)">(.*?)</a>', page)
    assert links and all(headings[anchor] == text for anchor, text in links)
    shown = [text for _, text in links if text.startswith("Dataset")]
    assert sorted(shown) == sorted(f"Dataset {html.escape(d)}" for d in DATASETS)

    board = (report / "leaderboard.html").read_text()
    ids = _ids(board)
    assert len(ids) == len(set(ids))
    sections = {m[0]: (html.unescape(m[1]), html.unescape(m[2]))
                for m in re.findall(r'<section id="([^"]*)" data-dataset="([^"]*)" data-column="([^"]*)">', board)}
    links = re.findall(r'<li><a href="#([^"]*)">(.*?) / (.*?)</a></li>', board)
    assert len(links) == len(sections) == len(FULL) * 5 + (len(DATASETS) - len(FULL)) * 2
    assert all(sections[anchor] == (html.unescape(d), html.unescape(c)) for anchor, d, c in links)


def test_names_that_differ_by_an_invisible_character_read_differently(report):
    board = (report / "leaderboard.html").read_text()
    cells = re.findall(r'<td class="sys">(.*?)</td>', board)
    assert "sys\\nA" in cells and "sys A" in cells and "\\x00@x" in cells
    assert not re.search(r"[\x00-\x08\x0b-\x1f]", board)
    md = (report / "report.md").read_text()
    text = MarkdownIt("commonmark").enable("table").render(md)
    assert "sys\\nA" in text and "sys A" in text and "\\u200b=1" in text


def test_the_matrix_cuts_huge_names_and_keeps_them_apart(report):
    board = (report / "leaderboard.html").read_text()
    svg = re.search(r"<svg.*?</svg>", board, re.S).group(0)
    assert int(re.search(r'width="(\d+)"', svg).group(1)) < 2000  # not 7 pixels per character of a huge name
    labels = re.findall(r'text-anchor="end">(.*?)</text>', svg)
    assert len(labels) == len(set(labels)) == len(SYSTEMS)
    assert CUT not in svg and CUT + "1" in board and CUT + "2" in board  # whole, once, in the list of cut names


def test_plot_labels_are_cut_and_never_alike():
    assert len(plots.plain("W" * 200_000)) == plots.LABEL_MAX
    labels = plots.tick_labels([CUT + "1", CUT + "2", "x", "human_x", "\x00"])
    assert len(set(labels)) == 5 and labels[-1] == "\\x00"


def test_formula_variants_are_neutralised_in_the_csv(report):
    with open(report / "leaderboard.csv", newline="", encoding="utf-8") as handle:
        systems = {row["system"] for row in csv.DictReader(handle)}
    for name in SYSTEMS[:5]:
        assert "'" + name in systems, name
    assert "sys A" in systems and "sys\nA" in systems  # no formula: unchanged


def test_spreadsheet_cell_variants():
    hostile = ["\n=1", "\x00=1", "\uff1dcmd|'/c calc'!A0", "\uff0b1", "\uff0d1", "\uff20SUM(1)", " =1", "\u3000@x",
               "\u200b=1", "\ufeff+1", "\u202e-1", "\x1b[0m", "\x85x"]
    assert all(spreadsheet_cell(v) == "'" + v for v in hostile)
    plain = ["ok", " ok", "a=b", "x-1", "", "é=", "DDE"]
    assert [spreadsheet_cell(v) for v in plain] == plain


def test_huge_scores_print_as_short_numbers(report):
    md = (report / "report.md").read_text()
    assert not re.search(r"\d{25}", md)
    assert re.search(r"\| -?\d\.\d{4}e\+\d{3} \|", md)
    assert markdown_table(["v"], [[1e300], [-2.5e20], [123.0]]).splitlines()[2:] == [
        "| 1.0000e+300 |", "| -2.5000e+20 |", "| 123.0000 |"]


def test_file_names_unit():
    hostile = ["CON", "con.txt", "Nul", "LPT1", "com\u00b9", "x.", "x", "A", "a"]
    names = [safe_name(v) for v in hostile]
    assert [n for n in names if WINDOWS_DEVICE.fullmatch(n) or n.endswith(".")] == []
    spaces = FileNames(["report.html"])
    given = [spaces.claim(stem, ".png") for stem in ["A", "a", "\u00c5", "A\u030a", "x.", "x", "report"]]
    assert len({fs_key(n) for n in given}) == len(given)
    assert spaces.claim("report.html") != "report.html" and FileNames().claim("b", ".png") == "b.png"


def test_compmctg_markdown_is_text():
    from meta_eval.compmctg import markdown_section

    row = {"protocol": "x | <img src=http://127.0.0.1:9/p> \n# h", "splits": 1, "A_iid": 0.5, "A_comp": float("nan"),
           "gap": float("inf"), "P_iid": 12.0, "P_comp": None}
    table = {"datasets": {"d<b>": {"protocols": [row], "fewshot": [],
                                  "average": {"A_avg": 0.5, "G_avg": None, "P_avg": 12.0}}}}
    md = markdown_section(table)
    tokens = MarkdownIt("commonmark", {"html": True}).enable("table").parse(md)
    inline = [c for t in tokens for c in t.children or ()]
    assert not [c for c in inline if c.type in ("html_inline", "image", "link_open")]
    assert [t.tag for t in tokens if t.type == "heading_open"] == ["h2", "h3"]
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    cells = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", rendered)]
    assert cells == ["x | <img src=http://127.0.0.1:9/p> \\n# h", "1", "50.00", "–", "–", "12.00", "–"]


def test_partition_folders_from_a_splits_file_stay_inside(tmp_path):
    from splits.partition import partition_corpus

    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"id": ["r0", "r1", "r2", "r3"], "a": ["x", "y", "x", "y"], "b": ["p", "p", "q", "q"]}),
                   corpus)
    out = tmp_path / "deep" / "parts"
    out.mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text("TARGET")
    (out / "manifest.json").symlink_to(outside)
    combos = [{"a": "x", "b": "p"}, {"a": "y", "b": "p"}, {"a": "x", "b": "q"}, {"a": "y", "b": "q"}]
    splits = {"aspects": ["a", "b"], "signature": {"protocol": "../../escape"},
              "splits": [{"seen": combos[:3], "unseen": combos[3:]}]}
    manifest = partition_corpus(corpus, splits, out, iid_fraction=0.0, aspect_columns=["a", "b"])
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(p.resolve().is_relative_to(out.resolve()) for p in written if p not in (corpus, outside)), written
    assert outside.read_text() == "TARGET" and not (out / "manifest.json").is_symlink()
    folder = out / manifest["splits"][0]["folder"]
    assert folder.parent == out and json.loads((out / "manifest.json").read_text())["splits"][0]["rows"] == {
        "train": 3, "test_iid": 0, "test_comp": 1}
    assert pq.read_table(folder / "test_comp.parquet").column("id").to_pylist() == ["r3"]


def test_overflowing_differences_are_tested_as_the_same_data_scaled():
    """Finite scores whose difference overflows float64 are compared on the scores scaled by a
    power of two (`meta_eval.numbers`): the p-values and the mark are those of the same data
    scaled, never of an overflowed inf; the difference itself, 2e308, is beyond float64 (inf,
    null in JSON). (Before, such a pair had an undefined p and no mark.)"""
    from meta_eval.compare import compare_units
    from meta_eval.report.leaderboard import mark

    values = np.array([[1e308, -1e308], [1e308, -1e308], [1e308, -1e308]])
    comp = compare_units(values, ["s1", "s2"], 0, column="m", n_resamples=50, trials=50)
    sane = compare_units(values / 1e300, ["s1", "s2"], 0, column="m", n_resamples=50, trials=50)
    pair, scaled = comp.pairs[0], sane.pairs[0]
    assert scaled.better == "s1" and np.isfinite(scaled.p_bootstrap)
    assert (pair.better, pair.p_bootstrap, pair.p_randomization) == (scaled.better, scaled.p_bootstrap,
                                                                      scaled.p_randomization)
    assert mark(comp, "s1", "s2") == "better" and pair.diff == np.inf
    assert [s.mean for s in comp.systems] == [1e308, -1e308]


def test_convert_drops_a_jsonl_line_that_names_a_key_twice(tmp_path):
    """`{"text": "a", "text": "b"}` is valid JSON to most parsers, which keep one value silently."""
    from ctgscore import convert

    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "1", "text": "first", "text": "second"}\n'
                    '{"id": "2", "text": "ok", "attributes": {"tense": "Past", "tense": "Present"}}\n'
                    '{"id": "3", "text": "kept"}\n')
    table, report = convert.convert_file(str(path))
    assert table.column("id").to_pylist() == ["3"] and report.rows_read == 3
    assert report.dropped == {"line names the key 'text' twice in one object": 1,
                              "line names the key 'tense' twice in one object": 1}
    assert report.examples["line names the key 'text' twice in one object"] == [1]


def test_codi_legend_keeps_systems_cut_to_one_head_apart():
    from meta_eval.codi import _accuracy_figure

    plt = plots._plt()
    systems = [CUT + "1", CUT + "2", "human_x"]
    with plots.text_only():
        fig = _accuracy_figure(plt, {"systems": systems, "results": []})
    try:
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    finally:
        plt.close(fig)
    assert len(set(legend)) == 3 and all(len(t) <= plots.LABEL_MAX for t in legend) and legend[2] == "human_x"


def test_two_leaderboard_refreshes_in_one_second_keep_two_history_files(tmp_path):
    import datetime as dt

    from ctgscore.cli.leaderboard import history_file

    now = dt.datetime(2026, 11, 27, 23, 59, 59, tzinfo=dt.timezone.utc)
    first = history_file(tmp_path, now)
    first.write_text("{}")
    second = history_file(tmp_path, now)
    assert first.name == "20261127T235959Z.json" and second.name == "20261127T235959Z-2.json"


@pytest.mark.parametrize("bad", [np.inf, np.nan, -5.0, 1e300, 2.5])
def test_corpus_bleu_leaves_out_rows_whose_stored_statistics_are_not_counts(tmp_path, bad):
    """A dump's own `_bleu_stat_` columns: NaN or inf failed the report (int(round(x))), a
    negative count gave a BLEU above 100, a huge one a 77-digit BLEU."""
    import sacrebleu

    from meta_eval.corpus_bleu import report_section
    from scoring.registry import build_metric

    hyps, refs = ["the cat sat on the mat", "a dog ran far away", "hello there world"], ["the cat sat on a mat",
                                                                                      "the dog ran away", "hello world"]
    metric = build_metric("bleu")
    rows = []
    for system in ("s1", "s2"):
        scored = metric.score_rows([{"id": f"{system}{k}", "text": hyp, "references": [ref]}
                                    for k, (hyp, ref) in enumerate(zip(hyps, refs))])
        rows += [{"id": f"{system}{k}", "dataset": "d", "system": system, "error": None,
                  "signature": metric.signature_string(), **{c: out[c] for c in metric.stat_columns}}
                 for k, out in enumerate(scored)]
    rows[0][metric.stat_columns[2]] = bad
    pd.DataFrame(rows).to_parquet(tmp_path / "scores.parquet", index=False)
    section = report_section(str(tmp_path / "scores.parquet"), tmp_path)
    found = {row["system"]: row for row in json.loads((tmp_path / "corpus_bleu.json").read_text())}
    assert (found["s1"]["rows"], found["s1"]["rows_invalid"], found["s2"]["rows_invalid"]) == (2, 1, 0)
    assert found["s1"]["score"] == pytest.approx(sacrebleu.corpus_bleu(hyps[1:], [refs[1:]]).score, abs=1e-6)
    assert found["s2"]["score"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-6)
    assert "1 row(s) left out" in section


def test_names_of_four_byte_letters_fit_a_file_name_with_the_report_prefixes(tmp_path):
    """64 letters of four UTF-8 bytes each (CJK Extension B, mathematical letters) were kept as a
    plain name of 256 bytes: past the 255 bytes a Linux file name may have, so the report failed
    on such a dataset or column (`leaderboard_<name>.png`). Such a name gets the slug instead."""
    for name in ("\U00020000" * 64, "\U0001d400" * 50, "\u4e00" * 64, "a" * 64):
        safe = safe_name(name)
        assert safe == safe_name(name) and len(safe.encode()) <= 201
        folder = tmp_path / safe
        folder.mkdir()
        for stem in ("leaderboard_", "win_fractions_", "checklist_ks_"):
            (folder / f"{stem}{safe}-2.png").write_bytes(b"")
    assert safe_name("\u4e00" * 64) == "\u4e00" * 64  # three-byte letters: still plain, as before


def test_collision_key_merges_what_case_insensitive_filesystems_merge():
    """APFS case-insensitive (macOS's default) and Linux case-folding directories compare names
    by full case folding, so `Straße` and `STRASSE` are one file there (refused as a clash, as
    before); Windows upper-cases one unit at a time, and Unicode's simple uppercase of dotless
    `ı` is `I`, which the fold alone kept apart from `i` (two files were given `ı.png` and `i.png`)."""
    from scoring.file_names import collision_key

    same = [("Straße", "STRASSE", "strasse"), ("\u00c5", "A\u030a", "\u00e5"), ("\u0131", "I", "i"),
            ("\u03c2", "\u03c3", "\u03a3"), ("\u01c6", "\u01c4", "\u01c5"), ("\u24d0", "\u24b6"), ("\uff41", "\uff21"),
            ("\u00df", "\u1e9e"), ("x.", "x", "X. ")]
    for group in same:
        assert len({collision_key(n) for n in group}) == 1, group
        names = FileNames()
        given = [names.claim(n, ".png") for n in group]
        assert given[0] == f"{group[0]}.png" and len(set(given)) == len(group)
    apart = ["Straße", "Strase", "Strasse2", "i", "j", "\u0130", "a", "b", "\u00e5\u00e5"]
    assert len({collision_key(n) for n in apart}) == len(apart)
    given = [FileNames().claim(n) for n in ("\u0131", "i")]
    assert given == ["\u0131", "i"]  # each alone: no suffix

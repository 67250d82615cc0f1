"""The leaderboard as one self-contained HTML page (one small inline script sorts the tables;
no external file).

Per dataset and score column (`meta_eval.results.SystemComparison`): every system's rank, mean,
95 % bootstrap interval and significance cluster (`meta_eval.compare.significance_clusters`,
contiguous ranks as the WMT metrics task draws them; the leading group is cluster 1); a matrix
plot (inline SVG) of the pairwise marks, row against column: better, worse, no significant
difference, or "–" where the comparison is undefined; every pair with its difference, interval
and the p-value of the one test that decides its mark; and, given the previous refresh's
leaderboard JSON, each system's move in rank (new systems marked new, systems gone listed).
Above `meta_eval.page_pairs.ALL_PAIRS_MAX` systems the matrix is left out and the pairs table
holds the pairs that matter (`meta_eval.page_pairs.pairs_that_matter`), with one line naming
how many pairs are left out and the JSON that holds them all.
Every table sorts by a click on its header. `leaderboard_section` is the same body without the
page, for embedding.

Names are shown by `scoring.display_names.html_name` (a name over 120 characters cut, with its
length and digest, the name in the cell's `title`), and a page that cut any ends with a folded
list of those names, each once and whole (`full_names`).
"""

from __future__ import annotations

import html
import math
from typing import Sequence

from meta_eval.compare import CLUSTER_DEFINITION, TEST_NAMES, decisive_p, decisive_test, significance_clusters
from meta_eval.page_pairs import (
    ALL_PAIRS_MAX,
    IN_COMPARE,
    left_out_line,
    pairs_that_matter,
    shows_all_pairs,
    where_html,
)
from meta_eval.report.html import unique_id
from meta_eval.report.page import page
from meta_eval.report.sortable import SORT_JS
from meta_eval.results import SystemComparison
from scoring.display_names import DISPLAY_MAX, cut_names, digest, display_name, html_name
from scoring.tables import visible

PAGE_STYLE = ("body{font:14px/1.45 system-ui,sans-serif;max-width:1180px;margin:1.5em auto;padding:0 1em;"
              "color:#222}h1{font-size:22px}")
# scoped to the section's wrapper, so the section can sit inside another page (the meta report)
STYLE = (
    ".lb h2{font-size:18px;margin-top:2em;border-bottom:1px solid #ddd}"
    ".lb table{border-collapse:collapse;font-size:13px;margin:.5em 0 1em}.lb td,.lb th{border:1px solid #ccc;"
    "padding:3px 8px;text-align:right}.lb td.sys,.lb th.sys{text-align:left}.lb tr.lead td{background:#eef6ee}"
    ".lb .up{color:#17733a}.lb .down{color:#b3261e}.lb .new{color:#1f5fbf}.lb .sec{display:flex;flex-wrap:wrap;"
    "gap:2em;align-items:flex-start}.lb .matrix{max-width:100%;height:auto}.lb .note{color:#555;font-size:12px}"
    ".lb code{font-size:11px;word-break:break-all}.lb nav li{margin:2px 0}.lb .definition{background:#f6f8fa;"
    "padding:.4em .8em;border-left:4px solid #8aa}.lb th[aria-sort=ascending]::after{content:' ▲'}"
    ".lb th[aria-sort=descending]::after{content:' ▼'}.lb details{margin:0 0 1em}"
    # a table wider than a phone's screen scrolls inside its box instead of widening the page;
    # numbers and intervals never break inside
    ".lb .scroll{overflow-x:auto;max-width:100%;min-width:0}.lb td{white-space:nowrap}.lb td.sys{white-space:normal;"
    "overflow-wrap:anywhere}.lb nav a{overflow-wrap:anywhere}.lb span.cut{border-bottom:1px dotted #888}"
    ".lb .full-names dd code{word-break:break-all}"
)
def esc(value) -> str:
    """A value from the data as HTML text: every character visible (`scoring.tables.visible`: a
    newline or NUL shows as its escape, never as a space), then escaped. A name (system,
    dataset, column) in a cell or heading goes through `scoring.display_names.html_name` instead."""
    return html.escape(visible(value))


SVG_LABEL_MAX = 60  # longest system name the matrix draws
COLORS = {"better": "#4c9a5b", "worse": "#d0645a", "same": "#d9d9d9", "undefined": "#ffffff"}


def _fmt(value: float | None, digits: int = 4) -> str:
    """`digits` significant digits, without an exponent from 1e-4 to 1e15: 0.0123, 12.35, 1235,
    12346 (every integer digit from 10,000 on; no separator, so the sort script reads it whole);
    an exponent outside."""
    if value is None or not math.isfinite(value):
        return "–"
    if 10 ** max(digits, 4) <= abs(value) < 1e15:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


ANCHOR_MAX = 80  # longest id a section gets from its names


def anchor(comp: SystemComparison) -> str:
    """The section's id from its dataset and column: letters and digits, `-` for the rest; names
    longer than `ANCHOR_MAX` give their head and the first 16 hex digits of their SHA-256, so a
    huge name is not spelled out again in every id and link (`anchors` keeps ids distinct)."""
    key = f"{comp.dataset}-{comp.column}"
    base = "".join(ch if ch.isalnum() else "-" for ch in key[:ANCHOR_MAX])
    return "lb-" + (base if len(key) <= ANCHOR_MAX else f"{base}-{digest(key)[:16]}")


def anchors(comparisons: Sequence[SystemComparison]) -> list[str]:
    """One id per comparison, distinct even where `anchor` gives two the same (`a/b` and `a_b`,
    or dataset `a-b` column `c` and dataset `a` column `b-c`)."""
    used: set[str] = set()
    return [unique_id(anchor(comp), used) for comp in comparisons]


def leading_group(comp: SystemComparison) -> list[str]:
    """The top significance cluster (`meta_eval.compare.significance_clusters`), in rank order."""
    clusters = significance_clusters(comp)
    return [s.system for s in comp.systems if clusters[s.system] == 1]


def moves(comp: SystemComparison, previous: dict | None) -> tuple[dict[str, str], list[str]]:
    """Per system: its move since the previous leaderboard ("▲2", "▼1", "=", "new"), and the
    systems the previous one had that this one does not."""
    if previous is None:
        return {}, []
    before = {row["system"]: row for row in previous.get("leaderboard", [])
              if row.get("dataset") == comp.dataset and row.get("column") == comp.column}
    out = {}
    for score in comp.systems:
        old = before.get(score.system)
        if old is None:
            out[score.system] = "new"
        else:
            step = int(old["rank"]) - score.rank
            out[score.system] = "=" if step == 0 else (f"▲{step}" if step > 0 else f"▼{-step}")
    gone = sorted(set(before) - {s.system for s in comp.systems})
    return out, gone


def marks(comp: SystemComparison) -> dict[tuple[str, str], str]:
    """`mark` of every (row, column) pair of systems at once, in one pass over the pairs (the
    matrix looks every cell up here: a scan of the pairs per cell was quartic in the systems)."""
    test = decisive_test(comp)
    out = {}
    for pair in comp.pairs:
        for row, col in ((pair.a, pair.b), (pair.b, pair.a)):
            out.setdefault((row, col), _state(pair, test, row))  # the first pair of two systems decides
    return out


def _state(pair, test: str, row: str) -> str:
    """`mark` of one pair, seen from system `row` (one of the pair's two)."""
    p = decisive_p(pair, test)
    if p is None or not math.isfinite(p):
        return "undefined"
    if pair.better is None:
        return "same"
    return "better" if pair.better == row else "worse"


def mark(comp: SystemComparison, row: str, col: str) -> str:
    """'better' / 'worse' / 'same' / 'undefined' for system `row` against system `col`."""
    return marks(comp).get((row, col), "undefined")


def short_label(name: str, width: int = SVG_LABEL_MAX) -> str:
    """A system name as the matrix draws it: cut at `width` characters with "…" (the tables
    beside it show it by `scoring.display_names`, the page's list of cut names whole), so a
    huge name neither widens the drawing nor is repeated once per cell."""
    return name if len(name) <= width else name[: width - 1] + "…"


def matrix_svg(comp: SystemComparison, cell: int = 22) -> str:
    """Pairwise marks as an SVG grid: row system against column system, in rank order; names
    are drawn as `short_label` gives them, each with its rank when two would read the same."""
    names = [short_label(s.system) for s in comp.systems]
    if len({visible(name) for name in names}) < len(names):  # they read alike (cut to the same head, or `\x00`
        # typed beside a NUL): the rank (the table's too) tells them apart
        names = [f"{s.rank}. {name}" for s, name in zip(comp.systems, names)]
    systems = [s.system for s in comp.systems]
    label = max(60, 7 * max(len(n) for n in names) + 10)
    size = label + cell * len(names) + 4
    width = size + int(0.55 * label)  # room for the last column's label, slanted to the right
    parts = [f'<svg class="matrix" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{size}" '
             f'viewBox="0 0 {width} {size}" role="img" '
             f'aria-label="pairwise significance, {esc(display_name(comp.column))}">']
    for k, name in enumerate(names):
        y = label + cell * k + cell * 0.7
        parts.append(f'<text x="{label - 4}" y="{y:.1f}" font-size="11" text-anchor="end">{esc(name)}</text>')
        x = label + cell * k + cell * 0.7
        parts.append(f'<text x="{x:.1f}" y="{label - 4}" font-size="11" transform="rotate(-60 {x:.1f} {label - 4})"'
                     f'>{esc(name)}</text>')
    states = marks(comp)
    for r, row in enumerate(names):
        for c, col in enumerate(names):
            x, y = label + cell * c, label + cell * r
            if r == c:
                parts.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="#f4f4f4" stroke="#fff"/>')
                continue
            state = states.get((systems[r], systems[c]), "undefined")
            parts.append(f'<rect class="cell {state}" data-row="{esc(row)}" data-col="{esc(col)}" x="{x}" y="{y}" '
                         f'width="{cell}" height="{cell}" fill="{COLORS[state]}" stroke="#fff">'
                         f'<title>{esc(row)} vs {esc(col)}: {state}</title></rect>')
            if state == "undefined":
                parts.append(f'<text x="{x + cell / 2}" y="{y + cell * 0.7}" font-size="12" '
                             f'text-anchor="middle">–</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(comp: SystemComparison, clusters: dict[str, int], moved: dict[str, str]) -> str:
    head = ("<tr><th>rank</th><th class=\"sys\">system</th><th>mean</th><th>95% interval</th>"
            "<th title=\"significance cluster: 1 is the leading group\">cluster</th>")
    head += "<th>since last</th></tr>" if moved else "</tr>"
    rows = [head]
    for s in comp.systems:
        cls = ' class="lead"' if clusters[s.system] == 1 else ""
        move = moved.get(s.system, "")
        kind = {"n": "new", "▲": "up", "▼": "down"}.get(move[:1], "")
        cells = (f"<td>{s.rank}</td><td class=\"sys\">{html_name(s.system)}</td><td>{_fmt(s.mean)}</td>"
                 f"<td>{_fmt(s.interval.low)} – {_fmt(s.interval.high)}</td><td>{clusters[s.system]}</td>")
        if moved:
            cells += f"<td class=\"{kind}\">{esc(move)}</td>"
        rows.append(f"<tr{cls}>{cells}</tr>")
    return "<div class=\"scroll\"><table class=\"board sortable\">" + "".join(rows) + "</table></div>"


def pair_label(comp: SystemComparison, pair) -> str:
    """The mark of a pair in words, as HTML: "X better" (X shown by `html_name`), "no significant
    difference", or "–" (undefined)."""
    state = _state(pair, decisive_test(comp), pair.a)  # from the pair itself: a lookup per pair was quadratic
    return {"better": f"{html_name(pair.a)} better", "worse": f"{html_name(pair.b)} better",
            "same": "no significant difference"}.get(state, "–")


def pairs_table(comp: SystemComparison, pairs=None, summary: str = "") -> str:
    """Every pair (or `pairs`, under `summary`): difference, its interval and the p-value of the
    test that decides the mark."""
    pairs = comp.pairs if pairs is None else pairs
    summary = summary or f"{len(comp.pairs)} system pairs"
    test = decisive_test(comp)
    level = f"{100 * comp.pairs[0].ci_diff.level:g}%" if comp.pairs else "95%"
    rows = [f"<tr><th class=\"sys\">A</th><th class=\"sys\">B</th><th>A − B</th><th>{level} interval of A − B</th>"
            f"<th>p ({esc(TEST_NAMES[test])})</th><th class=\"sys\">mark</th></tr>"]
    for pair in pairs:
        rows.append(f"<tr><td class=\"sys\">{html_name(pair.a)}</td><td class=\"sys\">{html_name(pair.b)}</td>"
                    f"<td>{_fmt(pair.diff)}</td><td>{_fmt(pair.ci_diff.low)} – {_fmt(pair.ci_diff.high)}</td>"
                    f"<td class=\"p\">{_fmt(decisive_p(pair, test), 3)}</td>"
                    f"<td class=\"sys mark\">{pair_label(comp, pair)}</td></tr>")
    return (f"<details><summary>{summary}</summary>"
            f"<div class=\"scroll\"><table class=\"pairs sortable\">{''.join(rows)}</table></div></details>")


def leaderboard_section(comparisons: Sequence[SystemComparison], previous: dict | None = None,
                        pairs_in: str = IN_COMPARE) -> str:
    """The page's body as one fragment with its own (scoped) style: a contents list and one
    section per (dataset, column). Embeddable in another HTML page with one call. `pairs_in`
    (a `meta_eval.page_pairs.IN_*` text) names the output holding every pair, for a section
    that shows only some."""
    ids = anchors(comparisons)
    toc = "".join(f'<li><a href="#{ids[k]}">{html_name(c.dataset)} / {html_name(c.column)}</a></li>'
                  for k, c in enumerate(comparisons))
    out = [f'<div class="lb"><style>{STYLE}</style><nav><ul>{toc}</ul></nav>'
           f'<p class="definition">{esc(CLUSTER_DEFINITION)} Click a column header to sort a table.</p>']
    shown = [n for c in comparisons for n in (c.dataset, c.column, *(s.system for s in c.systems))]
    for comp, section_id in zip(comparisons, ids):
        clusters = significance_clusters(comp)
        moved, gone = moves(comp, previous)
        shown += gone
        arrow = "lower is better" if comp.lower_is_better else "higher is better"
        test = TEST_NAMES[decisive_test(comp)]
        out.append(f'<section id="{section_id}" data-dataset="{esc(display_name(comp.dataset))}" '
                   f'data-column="{esc(display_name(comp.column))}">'
                   f"<h2>{html_name(comp.column)} on {html_name(comp.dataset)}</h2>"
                   f'<p class="note">{arrow}; {comp.n_units} paired units ({esc(comp.unit)}), {comp.n_units_dropped} '
                   f"dropped for a missing score. Every mark comes from one test, the two-sided {test}, whose "
                   f"p-value is shown beside each pair's interval. {_matrix_note(comp)}</p>")
        if gone:
            out.append(f'<p class="note gone">No longer on the board: {", ".join(html_name(g) for g in gone)}</p>')
        out.append(f'<div class="sec">{_table(comp, clusters, moved)}{_pairs(comp, clusters, pairs_in)}'
                   f"<p class=\"note\"><code>{esc(comp.signature)}</code></p></section>")
    out.append(full_names(shown))
    out.append("</div>")
    return "\n".join(out)


def _pairs(comp: SystemComparison, clusters: dict[str, int], pairs_in: str) -> str:
    """What follows the ranking table inside its box: the matrix, the box's end and every pair;
    above `ALL_PAIRS_MAX` systems, the box's end, the pairs that matter and the line naming
    the pairs left out and where they are."""
    if shows_all_pairs(comp):
        return f"{matrix_svg(comp)}</div>{pairs_table(comp)}"
    shown = pairs_that_matter(comp, clusters)
    summary = (f"{len(shown):,} of {len(comp.pairs):,} system pairs: each system against the next in rank, and the pair "
               "that opens each significance cluster")
    line = where_html(left_out_line(len(shown), len(comp.pairs), pairs_in))
    return f'</div>{pairs_table(comp, shown, summary)}<p class="note left-out-pairs">{line}</p>'


def _matrix_note(comp: SystemComparison) -> str:
    """The section note's last sentence: how to read the matrix, or why there is none."""
    if shows_all_pairs(comp):
        return ("Matrix: row against column, green = row significantly better, red = worse, grey = no significant "
                "difference, – = undefined.")
    return (f"No matrix of the {len(comp.systems)} systems (one is drawn up to {ALL_PAIRS_MAX}): the clusters in the "
            "ranking say which runs of ranks cannot be told apart.")


def full_names(names) -> str:
    """The names among `names` that the page shows cut, each once and whole (folded): the one
    place a name longer than a title carries is on the page in full (empty when none is cut)."""
    cut = cut_names(names)
    if not cut:
        return ""
    items = "".join(f"<dt>{esc(display_name(n))}</dt><dd><code>{esc(n)}</code></dd>" for n in cut)
    return (f'<details class="full-names"><summary>{len(cut)} name{"s" if len(cut) > 1 else ""} longer than '
            f"{DISPLAY_MAX} characters {'are' if len(cut) > 1 else 'is'} shown cut (head, "
            "[length, first 32 hex digits of the SHA-256 of its UTF-8], tail): in full</summary>"
            f"<dl>{items}</dl></details>")


def leaderboard_html(comparisons: Sequence[SystemComparison], previous: dict | None = None,
                     title: str = "Leaderboard", rows=None, pairs_in: str = IN_COMPARE) -> str:
    """The whole page (see the module doc), under the Content-Security-Policy of
    `meta_eval.report.page`; `rows` (a `meta_eval.row_account.RowAccount`) adds the line of
    rows left out of every group under the tables; `pairs_in` as `leaderboard_section`."""
    since = " (moves since the previous refresh)" if previous is not None else ""
    body = f"<h1>{html.escape(title)}{since}</h1>\n{leaderboard_section(comparisons, previous, pairs_in)}"
    if rows is not None and rows.line():
        body += f"\n<p class=\"left-out\">{html.escape(rows.line())}.</p>"
    return page(title, body, styles=[PAGE_STYLE], body_styles=[STYLE], scripts=[SORT_JS],
                head="<meta name=\"viewport\" content=\"width=device-width\">")

"""Self-contained HTML from the report's Markdown: rendered by markdown-it-py (CommonMark with
tables and the report's own <details> blocks), every image embedded as a
`data:image/png;base64,...` URI, styles inline, and a table of contents linking every h2/h3
section (each heading gets an id from its text). Every table sorts by a click on its header
(`meta_eval.report.sortable`)."""

from __future__ import annotations

import base64
import html
import pathlib
import re

STYLE = ("body{font:14px/1.45 system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;"
         "overflow-wrap:anywhere}"
         "table{border-collapse:collapse;font-size:12px;margin:.5em 0 1em;display:block;max-width:100%;"
         "overflow-x:auto}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
         "td:first-child,th:first-child{text-align:left}"
         "img{max-width:100%}code{font-size:.9em;overflow-wrap:anywhere;word-break:break-word}"
         "h1 code,h2 code,h3 code{font-size:1em}details{margin:.3em 0 1em}summary{cursor:pointer;color:#245}"
         "blockquote{margin:.5em 0;padding:.2em .8em;border-left:4px solid #d90;background:#fff8e6}"
         "nav.toc{border:1px solid #ddd;padding:.3em 1em;margin:1em 0;background:#fafafa}"
         "nav.toc ul{margin:.2em 0;padding-left:1.3em}")


def data_uri(path: pathlib.Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def slug(text: str, seen: dict[str, int]) -> str:
    """A unique id for a heading: lower-case words joined by '-', numbered when repeated."""
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
    seen[base] = seen.get(base, 0) + 1
    return base if seen[base] == 1 else f"{base}-{seen[base]}"


def _toc(entries: list[tuple[int, str, str]]) -> str:
    """Nested list of (level, id, text): each h2 with the h3s that follow it."""
    groups: list[tuple[tuple[str, str] | None, list[tuple[str, str]]]] = []
    for level, anchor, text in entries:
        if level == 2 or not groups:
            groups.append(((anchor, text) if level == 2 else None, []))
        if level == 3:
            groups[-1][1].append((anchor, text))

    def link(anchor, text):
        return f'<a href="#{anchor}">{html.escape(text)}</a>'

    items = []
    for head, subs in groups:
        inner = "".join(f"<li>{link(*sub)}</li>" for sub in subs)
        items.append(f"<li>{link(*head) if head else ''}{f'<ul>{inner}</ul>' if inner else ''}</li>")
    return f'<nav class="toc"><strong>Contents</strong><ul>{"".join(items)}</ul></nav>'


def render(markdown_text: str, base: pathlib.Path, title: str = "Meta-evaluation report") -> str:
    """HTML page of `markdown_text`; image paths are read relative to `base` and embedded; a table
    of contents follows the first h1."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(markdown_text)
    seen: dict[str, int] = {}
    entries = []
    for k, token in enumerate(tokens):
        for child in token.children or ():
            if child.type == "image":
                src = str(child.attrGet("src"))
                if not src.startswith("data:"):
                    child.attrSet("src", data_uri(base / src))
        if token.type == "heading_open" and token.tag in ("h2", "h3"):
            text = tokens[k + 1].content.replace("`", "")
            anchor = slug(text, seen)
            token.attrSet("id", anchor)
            entries.append((int(token.tag[1]), anchor, text))
    body = md.renderer.render(tokens, md.options, {})
    if entries:
        toc = _toc(entries)
        body = body.replace("</h1>", "</h1>\n" + toc, 1) if "</h1>" in body else toc + body
    from meta_eval.report.sortable import SORT_SCRIPT

    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body class=\"sortable-all\">\n{body}{SORT_SCRIPT}</body></html>\n")

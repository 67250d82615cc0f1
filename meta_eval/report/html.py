"""Self-contained HTML from the report's Markdown: rendered by markdown-it-py (CommonMark with
tables), every image embedded as a `data:image/png;base64,...` URI, styles inline."""

from __future__ import annotations

import base64
import html
import pathlib

STYLE = ("body{font:14px/1.45 system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse;font-size:12px;margin:.5em 0 1em}td,th{border:1px solid #ccc;"
         "padding:2px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
         "img{max-width:100%}code{font-size:11px;word-break:break-all}")


def data_uri(path: pathlib.Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render(markdown_text: str, base: pathlib.Path, title: str = "Meta-evaluation report") -> str:
    """HTML page of `markdown_text`; image paths are read relative to `base` and embedded."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(markdown_text)
    for token in tokens:
        for child in token.children or ():
            if child.type == "image":
                src = str(child.attrGet("src"))
                if not src.startswith("data:"):
                    child.attrSet("src", data_uri(base / src))
    body = md.renderer.render(tokens, md.options, {})
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n{body}</body></html>\n")

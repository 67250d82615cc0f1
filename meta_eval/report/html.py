"""Self-contained HTML from the report's Markdown: rendered by markdown-it-py (CommonMark with
tables and the report's own <details> blocks; raw HTML off, so data shows as text), the images
the report wrote embedded as `data:image/png;base64,...` URIs (no other file), styles inline,
and a table of contents linking every h2/h3 section (each heading gets an id from its text).
Every table sorts by a click on its header (`meta_eval.report.sortable`). Data is text on the
page: see docs/meta_eval.md, "How reports treat data"."""

from __future__ import annotations

import base64
import html
import pathlib
import re
import urllib.parse
from typing import Iterable

STYLE = ("body{font:14px/1.45 system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;"
         "overflow-wrap:anywhere}"
         "table{border-collapse:collapse;font-size:12px;margin:.5em 0 1em;display:block;max-width:100%;"
         "overflow-x:auto}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
         "td:first-child,th:first-child{text-align:left}"
         "img{max-width:100%}code{font-size:.9em;overflow-wrap:anywhere;word-break:break-word}"
         "h1 code,h2 code,h3 code{font-size:1em}details{margin:.3em 0 1em}summary{cursor:pointer;color:#245}"
         "blockquote{margin:.5em 0;padding:.2em .8em;border-left:4px solid #d90;background:#fff8e6}"
         "nav.toc{border:1px solid #ddd;padding:.3em 1em;margin:1em 0;background:#fafafa}"
         "nav.toc ul{margin:.2em 0;padding-left:1.3em}.al-left{text-align:left}.al-right{text-align:right}"
         ".al-center{text-align:center}")


def data_uri(path: pathlib.Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def unique_id(base: str, used: set[str]) -> str:
    """`base`, or `base-2`, `base-3`, ... when that id is already in `used` (then added to it):
    two headings or sections never share an id, whatever their names (a heading "a 2" after two
    headings "a" and "a!" too), so every link of a contents list lands on its own section."""
    anchor, k = base, 1
    while anchor in used:
        k += 1
        anchor = f"{base}-{k}"
    used.add(anchor)
    return anchor


def slug(text: str, used: set[str]) -> str:
    """A unique id for a heading: lower-case words joined by '-', numbered when taken (`unique_id`)."""
    return unique_id(re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section", used)


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


_DETAILS_OPEN = re.compile(r"<details><summary>([^<>]*)</summary>")
_ALIGN = re.compile(r"text-align:(left|right|center)")


def _own_html(tokens: list) -> list:
    """Raw HTML is off, so the report's own folds (`markdown.folded`: a paragraph that is exactly
    `<details><summary>TEXT</summary>`, and one that is exactly `</details>`) are parsed as text;
    they become the elements here, the summary escaped. Data cannot make such a paragraph: its
    `<` always reaches the Markdown escaped (`scoring.tables.markdown_text`)."""
    from markdown_it.token import Token

    out: list = []
    k = 0
    while k < len(tokens):
        token = tokens[k]
        if token.type == "paragraph_open" and k + 2 < len(tokens) and tokens[k + 1].type == "inline":
            source = tokens[k + 1].content
            opened = _DETAILS_OPEN.fullmatch(source)
            if opened or source == "</details>":
                summary = html.escape(html.unescape(opened.group(1))) if opened else ""
                content = f"<details><summary>{summary}</summary>\n" if opened else "</details>\n"
                out.append(Token("html_block", "", 0, content=content, block=True))
                k += 3
                continue
        out.append(token)
        k += 1
    return out


def _embed(child, base: pathlib.Path, images: set[str]) -> None:
    """An image token: its file embedded when it is one the report wrote (`images`, relative to
    `base`) and still a regular file inside `base`; anything else becomes its alt text."""
    src = urllib.parse.unquote(str(child.attrGet("src") or ""))  # the parser percent-encodes a non-ASCII path
    root = base.resolve()
    path = base / src
    inside = src in images and not path.is_symlink() and path.is_file() and path.resolve().is_relative_to(root)
    if inside:
        child.attrSet("src", data_uri(path))
        return
    child.type, child.tag, child.attrs, child.children = "text", "", {}, None
    child.content = f"[image not embedded: {child.content}]"


def _titled(children: list, shown: dict[str, str], pattern) -> list:
    """Inline tokens with each cut name's display (`shown`: display -> name; `pattern` finds
    them) inside a `scoring.display_names.cut_span`, whose `title` holds the name: in text, and
    a code span that is exactly one display."""
    from markdown_it.token import Token

    from scoring.display_names import cut_span

    out: list = []
    for child in children:
        if child.type == "code_inline" and child.content in shown:
            out += [Token("html_inline", "", 0, content=cut_span(shown[child.content])), child,
                    Token("html_inline", "", 0, content="</span>")]
            continue
        if child.type != "text" or not pattern.search(child.content):
            out.append(child)
            continue
        pos = 0
        for match in pattern.finditer(child.content):
            if match.start() > pos:
                out.append(Token("text", "", 0, content=child.content[pos:match.start()]))
            out += [Token("html_inline", "", 0, content=cut_span(shown[match.group()])),
                    Token("text", "", 0, content=match.group()), Token("html_inline", "", 0, content="</span>")]
            pos = match.end()
        if pos < len(child.content):
            out.append(Token("text", "", 0, content=child.content[pos:]))
    return out


def render(markdown_text: str, base: pathlib.Path, title: str = "Meta-evaluation report",
           images: Iterable[str] = (), names: Iterable[str] = ()) -> str:
    """HTML page of `markdown_text`: raw HTML in the text is shown as text (the report's own
    folds apart, `_own_html`); `images` (paths relative to `base`, the files the report wrote)
    are embedded, and no other path the text names is read; where the text shows one of `names`
    cut (`scoring.display_names`), the name is in the `title` of a span around it; a table of
    contents follows the first h1; the page carries the Content-Security-Policy of
    `meta_eval.report.page`."""
    from markdown_it import MarkdownIt

    from scoring.display_names import cut_names, display_name

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = _own_html(md.parse(markdown_text))
    shown = {display_name(name): name for name in cut_names(names)}
    pattern = re.compile("|".join(map(re.escape, sorted(shown, key=len, reverse=True)))) if shown else None
    allowed = {str(name) for name in images}
    seen: set[str] = set()
    entries = []
    for k, token in enumerate(tokens):
        for child in token.children or ():
            if child.type == "image":
                _embed(child, pathlib.Path(base), allowed)
        align = _ALIGN.fullmatch(str(token.attrGet("style") or "")) if token.type in ("th_open", "td_open") else None
        if align:  # an inline style attribute would be refused by the page's policy: a class instead
            token.attrs.pop("style")
            token.attrSet("class", f"al-{align.group(1)}")
        if token.type == "heading_open" and token.tag in ("h2", "h3"):
            text = "".join(c.content for c in tokens[k + 1].children or () if c.type in ("text", "code_inline"))
            anchor = slug(text, seen)
            token.attrSet("id", anchor)
            entries.append((int(token.tag[1]), anchor, text))
    if pattern is not None:
        for token in tokens:
            if token.type == "inline" and token.children:
                token.children = _titled(token.children, shown, pattern)
    body = md.renderer.render(tokens, md.options, {})
    if entries:
        toc = _toc(entries)
        body = body.replace("</h1>", "</h1>\n" + toc, 1) if "</h1>" in body else toc + body
    from meta_eval.report.page import page
    from meta_eval.report.sortable import SORT_JS

    return page(title, body, styles=[STYLE], scripts=[SORT_JS], body_attrs=' class="sortable-all"')

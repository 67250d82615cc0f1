"""One HTML page around a body the report built, with a Content-Security-Policy that lets the
page run only its own inline style and script.

The policy (a `<meta http-equiv>` before anything else in the head) allows no load from
anywhere: `default-src 'none'`, images only as `data:` URIs (the report embeds the plots it drew),
and style and script only where their text hashes (SHA-256) to one of the page's own blocks.
A `<script>` or `<style>` that data smuggled into the page would not run even if escaping missed
it, and nothing on the page can fetch, post or frame another address.
"""

from __future__ import annotations

import base64
import hashlib
import html
from typing import Sequence


def source_hash(text: str) -> str:
    """The CSP source expression of an inline block's text: 'sha256-<base64 digest>'."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def policy(styles: Sequence[str] = (), scripts: Sequence[str] = ()) -> str:
    """The policy for a page whose inline `<style>` and `<script>` blocks are exactly `styles`
    and `scripts` (their text between the tags)."""
    style_src = " ".join(source_hash(s) for s in dict.fromkeys(styles)) or "'none'"
    script_src = " ".join(source_hash(s) for s in dict.fromkeys(scripts)) or "'none'"
    return (f"default-src 'none'; img-src data:; style-src {style_src}; script-src {script_src}; "
            "base-uri 'none'; form-action 'none'")


def page(title: str, body: str, styles: Sequence[str] = (), body_styles: Sequence[str] = (),
         scripts: Sequence[str] = (), lang: str = "en", head: str = "", body_attrs: str = "") -> str:
    """A whole page: `styles` go into the head; `body_styles` are style blocks `body` already
    holds (hashed, not added); `scripts` run at the end of the body. `title` is escaped here;
    `body` and `head` must already be HTML."""
    rules = html.escape(policy(list(styles) + list(body_styles), scripts), quote=False)  # no '"' in a policy
    style_tags = "".join(f"<style>{s}</style>" for s in styles)
    script_tags = "".join(f"<script>{s}</script>" for s in scripts)
    return (f"<!doctype html>\n<html lang=\"{html.escape(lang)}\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{rules}\">"
            f"<title>{html.escape(title)}</title>{head}{style_tags}</head><body{body_attrs}>\n{body}\n{script_tags}"
            "</body></html>\n")

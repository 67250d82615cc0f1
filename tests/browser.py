"""Render a local HTML file in headless Chromium (Debian's package, installed by
`scripts/install_browser.sh`) through Playwright, and report what the browser rendered.

Used by the report and leaderboard tests: they assert on the rendered page (its scroll width
against the viewport, where the table of contents' links land, a screenshot), not only on the
HTML text.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from dataclasses import dataclass, field

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RuntimeError("headless Chromium is missing: run scripts/install_browser.sh (as root)")
    return path


def chromium_env() -> dict[str, str]:
    """The browser's environment: this process's, with TMPDIR at /tmp. Chromium makes its
    `SingletonSocket` in a folder under $TMPDIR, and a deep one (as some CI runners set) puts
    that path past the 107 bytes a Unix socket may have: Chromium then stops at start ("Socket
    path too long"). The tests keep Ray's sockets under /tmp for the same reason."""
    return {**os.environ, "TMPDIR": "/tmp"}


@dataclass
class RenderedPage:
    viewport_width: int
    scroll_width: int
    scroll_height: int
    title: str
    anchors: list[dict] = field(default_factory=list)  # {href, text, target_exists}
    screenshot: pathlib.Path | None = None
    text: str = ""


_INSPECT = """() => {
  const links = Array.from(document.querySelectorAll('a[href^="#"]')).map(a => {
    const id = decodeURIComponent(a.getAttribute('href').slice(1));
    return {href: a.getAttribute('href'), text: a.textContent.trim(),
            target_exists: id.length > 0 && document.getElementById(id) !== null};
  });
  return {scroll_width: document.documentElement.scrollWidth,
          scroll_height: document.documentElement.scrollHeight,
          title: document.title, anchors: links, text: document.body.innerText};
}"""


def render(html_path: pathlib.Path, width: int = 1280, height: int = 900,
           screenshot: pathlib.Path | None = None, evaluate: str | None = None):
    """Open `html_path` at a `width` x `height` viewport; return a `RenderedPage` (and the
    result of the optional JavaScript expression `evaluate`, as a second value)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, env=chromium_env())
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(pathlib.Path(html_path).resolve().as_uri(), wait_until="load")
            info = page.evaluate(_INSPECT)
            extra = page.evaluate(evaluate) if evaluate else None
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=False)
        finally:
            browser.close()
    rendered = RenderedPage(viewport_width=width, scroll_width=info["scroll_width"],
                            scroll_height=info["scroll_height"], title=info["title"],
                            anchors=info["anchors"], screenshot=screenshot, text=info["text"])
    return rendered, extra

"""How a name from the data is shown in a report's table cell or heading: the one rule.

A system, dataset, metric or column name is somebody else's text and may be of any length; a
name of 200,000 characters shown whole makes a table unreadable and a page megabytes long. So
every report (Markdown, HTML, the leaderboard page, the constraints and splits reports) shows a
name through `display_name`:

- a name whose visible form (`scoring.console_text`: control and invisible characters as their
  escapes) has at most `DISPLAY_MAX` characters is shown whole;
- a longer one is shown as its head, a marker and its tail, in at most `DISPLAY_MAX` characters:
  `head…[200,000 characters, sha256 0f1e…(32 hex digits)]…tail`. The marker counts the
  characters of the name and gives the first 128 bits of the SHA-256 of its UTF-8 (`printf %s
  NAME | sha256sum` shows the same digits), so two names that differ only in the middle still
  read differently; a pair that reads alike would be a SHA-256 collision in 128 bits (about 2^64
  tries to craft);
- a name short enough to show whole but containing such a marker itself is shown in the cut
  form too (with its own length and digest), so no name can pose as the cut form of another;
  so is a name holding typed text that reads like an escape (a backslash then `n`, `x00`,
  `u202e`, ...), so the name `sys\\nA` never reads like `sys<newline>A`, shown `sys\\nA`.

`DISPLAY_MAX` is 120: a cell or heading of 120 characters still reads on one or two lines of a
report page, leaves 57 characters of the name's head and tail beside the 63-character marker,
and real names (a model id such as `meta-llama/Llama-3.1-8B-Instruct`, a run name with a
size and a date, a metric column such as `bartscore_para_src_hypo`) are far shorter, so in
practice only a hostile or broken name is cut.

The full name stays where the medium can carry it: an HTML cell shows the cut form with the
name in its `title` (`html_name`, at most `TITLE_MAX` characters, then cut by the same rule:
a title repeats in every cell the name fills, and 30 cells of a 200,000-character name would
make the page megabytes again; a leaderboard page lists each cut name once whole instead), the
Markdown reports say which JSON file holds them whole (`cut_note`), and the JSON, CSV and
Parquet outputs keep every name raw; only what a person reads changes.
"""

from __future__ import annotations

import hashlib
import html
import re
from typing import Any

from scoring.console_text import console_text

DISPLAY_MAX = 120  # longest name shown in a table cell or heading (module doc)
TITLE_MAX = 2000  # longest name carried by an HTML title attribute
DIGEST_HEX = 32  # 128 bits of the SHA-256
_MARKER = "…[{:,} characters, sha256 {}]…"
_MARKED = re.compile(r"…\[[0-9,]+ characters, sha256 [0-9a-f]{%d}\]…" % DIGEST_HEX)
_MARKED_MARKDOWN = re.compile(r"…\\?\[[0-9,]+ characters, sha256 [0-9a-f]{%d}\\?\]…" % DIGEST_HEX)
_SMALLEST = 100  # a limit that leaves a head and a tail beside the longest marker
#: text typed into a name that reads like the escape `console_text` shows for a control or
#: invisible character (`\n`, `\x00`, `\u202e`): such a name is shown in the cut form, so the
#: name `sys\nA` (a backslash and an n) never reads like `sys<newline>A`
_ESCAPE_LIKE = re.compile(r"\\(?:[ntr]|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")


def digest(name: str) -> str:
    """The first `DIGEST_HEX` hex digits of the SHA-256 of `name`'s UTF-8 (lone surrogates kept)."""
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_HEX]


def is_cut(value: Any, limit: int = DISPLAY_MAX) -> bool:
    """Whether `display_name` shows `value` cut (see the module doc)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:  # every character shows as one or more
        return True
    shown = console_text(text)
    return len(shown) > limit or _MARKED.search(shown) is not None or _ESCAPE_LIKE.search(text) is not None


def display_name(value: Any, limit: int = DISPLAY_MAX) -> str:
    """`value` as a table cell or heading shows it: its visible text, whole when it has at most
    `limit` characters, else head, marker and tail in at most `limit` characters (module doc).
    Reads only the head and tail it shows, and hashes the name once."""
    if limit < _SMALLEST:
        raise ValueError(f"display_name limit {limit}: expected at least {_SMALLEST} characters")
    text = value if isinstance(value, str) else str(value)
    if not is_cut(text, limit):
        return console_text(text)
    marker = _MARKER.format(len(text), digest(text))
    budget = limit - len(marker)
    head, head_end = _pieces(text, range(len(text)), budget * 2 // 3)
    tail, _ = _pieces(text, range(len(text) - 1, head_end - 1, -1), budget - len(head))
    return head + marker + tail


def _pieces(text: str, positions, budget: int) -> tuple[str, int]:
    """The visible characters of `text` at `positions` (in that order) that fit `budget`
    characters, never half an escape; returns them (in text order) and the next position."""
    taken: list[str] = []
    used, last = 0, None
    for k in positions:
        piece = console_text(text[k])
        if used + len(piece) > budget:
            break
        taken.append(piece)
        used += len(piece)
        last = k
    step = 1 if positions.step > 0 else -1
    if step < 0:
        taken.reverse()
    following = positions.start if last is None else last + step
    return "".join(taken), following


def cut_span(value: Any) -> str:
    """The opening tag that carries a cut name: `<span class="cut" title="NAME">`, the name
    escaped (quotes included) and at most `TITLE_MAX` characters (a longer one cut there by the
    same rule, with the same digest)."""
    return f'<span class="cut" title="{html.escape(display_name(value, TITLE_MAX), quote=True)}">'


def html_name(value: Any, limit: int = DISPLAY_MAX) -> str:
    """`value` as HTML text of a cell or heading: `display_name`, escaped; a cut name inside a
    `cut_span`, whose `title` holds the name."""
    shown = html.escape(display_name(value, limit))
    return f"{cut_span(value)}{shown}</span>" if is_cut(value, limit) else shown


def cut_note(markdown: str, whole: str) -> str:
    """A paragraph for a Markdown report that shows a name cut (else ""): how names are cut and
    where they are whole (`whole`, e.g. "`results.json`")."""
    if not _MARKED_MARKDOWN.search(markdown):
        return ""
    return (f"\n*Names longer than {DISPLAY_MAX} characters are shown cut: head, `…[length, sha256 digest]…`, tail "
            "(the digest: the first 32 hex digits of the SHA-256 of the name's UTF-8, as `sha256sum` prints them); "
            "so is a shorter name holding typed text that reads like an escape (a backslash and `n`, `x00`). "
            f"{whole} holds every name whole.*\n")


def cut_names(values) -> list[str]:
    """The distinct names among `values` that `display_name` shows cut, in order of first appearance."""
    return [name for name in dict.fromkeys(str(v) for v in values) if is_cut(name)]


QUOTE_MAX = 80  # characters of a name an error message quotes


def quoted(value: Any, limit: int = QUOTE_MAX) -> str:
    """`value` as an error message quotes it: its `repr`, or, for a name longer than `limit`
    characters, the `repr` of its first `limit` characters followed by `…(N characters)`, so a
    name of 100,000 characters makes a line, not a 100 kB message."""
    if not isinstance(value, str):
        text = repr(value)
        return text if len(text) <= limit else f"{text[:limit]}…({len(text):,} characters)"
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}…({len(value):,} characters)"


def quoted_list(values, limit: int = 20, quote: bool = True) -> str:
    """At most `limit` names, each `quoted` (with `quote` False: as it is, cut the same way),
    comma-separated, with how many more there are."""
    values = list(values)

    def one(value) -> str:
        if quote:
            return quoted(value)
        text = str(value)
        return text if len(text) <= QUOTE_MAX else f"{text[:QUOTE_MAX]}…({len(text):,} characters)"

    shown = ", ".join(one(v) for v in values[:limit])
    return shown + (f" and {len(values) - limit:,} more" if len(values) > limit else "") if values else "none"

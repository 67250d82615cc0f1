"""The one Markdown table writer every report uses (meta-evaluation, system comparison, CoDI, splits).

Cells: `None` and non-finite floats print as an en dash; floats with `digits` decimals (from
1e15 on with an exponent, so a huge score stays one short cell), or a per-column format;
everything else with `str`, shown by `markdown_name` (at most `DISPLAY_MAX` characters,
`scoring.display_names`) and escaped by `markdown_text`, so a cell is text: it never splits a
row, opens a link, an image or raw HTML, and one huge name never makes a table unreadable.

Values from the data (system, dataset, metric and column names, file names) are text wherever
they land in Markdown: `markdown_text` for running text, `markdown_name` for a name in a cell,
heading or list of names, `markdown_code` inside a code span (`markdown_code(display_name(x))`
for a name). `spreadsheet_cell` neutralises a CSV cell that a spreadsheet would run as a formula.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

from scoring.console_text import console_text
from scoring.display_names import display_name

MISSING = "–"
LARGE = 1e15  # floats this large print with an exponent
Formatter = Callable[[Any], str]

_ALWAYS = frozenset("\\`*[]<>&!#|~")  # Markdown syntax anywhere in a line (links, images, HTML, code, emphasis)
_LINE_START = frozenset("-+=")  # list items and setext underlines when a value starts a line
_ORDERED = re.compile(r"^(\d{1,9})([.)])")
# a spreadsheet runs a cell starting with one of these, also behind leading blanks (the full-width
# forms are what an input method types); a leading control character (tab, carriage return, line
# feed, NUL: OWASP, ASVS 1.2.10) is neutralised whatever follows
_FORMULA_CHARS = frozenset("=+-@\uff1d\uff0b\uff0d\uff20")
_LEADING = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202f\u2060\ufeff]*")


def visible(value: Any) -> str:
    """`value` as one line of text in which every character shows (`scoring.console_text`):
    two names that differ only by a control or invisible character never read the same."""
    return console_text(value)


def markdown_text(value: Any) -> str:
    """`value` as Markdown that renders as exactly its text (CommonMark backslash escapes):
    control characters, line breaks and invisible or bidi format characters are shown as their
    escape (`\\n`, `\\x00`, `\\u202e`: `scoring.console_text`, so `a\\nb` never looks like
    `a b`), Markdown punctuation is escaped, and `_` only where it could open emphasis (between
    two letters or digits it stays as it is)."""
    text = visible(value)
    out = []
    for k, ch in enumerate(text):
        if ch in _ALWAYS or (k == 0 and ch in _LINE_START):
            out.append("\\" + ch)
        elif ch == "_" and not (0 < k < len(text) - 1 and text[k - 1].isalnum() and text[k + 1].isalnum()):
            out.append("\\_")
        else:
            out.append(ch)
    escaped = "".join(out)
    return _ORDERED.sub(lambda m: m.group(1) + "\\" + m.group(2), escaped, count=1)


def markdown_name(value: Any) -> str:
    """A name from the data as Markdown text: `display_name` (a name of more than `DISPLAY_MAX`
    characters shown as head, length and digest, tail), then `markdown_text`. Apply it to the
    raw name once: a shown cut name carries a marker, and a name with a marker is cut again."""
    return markdown_text(display_name(value))


def markdown_code(value: Any) -> str:
    """`value` as an inline code span (shown verbatim): the fence is one backtick longer than
    the longest run of backticks inside, padded with spaces where the text starts or ends with one."""
    text = visible(value)
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def formula_like(text: str) -> bool:
    """Whether a spreadsheet could read `text` as a formula: it starts with a control character
    (tab, carriage return, line feed, NUL, ...), or its first character after any blanks (spaces,
    zero-width and bidi marks) is `=`, `+`, `-`, `@` or one of their full-width forms."""
    if text[:1] and (text[0] <= "\x1f" or "\x7f" <= text[0] <= "\x9f"):
        return True
    return text[_LEADING.match(text).end():][:1] in _FORMULA_CHARS


def spreadsheet_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a string that is `formula_like` gets a leading
    `'`. Only strings change: numbers (negative ones too) stay numbers, so numeric columns read
    back unchanged."""
    if isinstance(value, str) and formula_like(value):
        return "'" + value
    return value


def format_cell(value: Any, digits: int = 4) -> str:
    """One cell as text (see the module docstring)."""
    if value is None:
        return MISSING
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        value = value.item()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return MISSING
        if abs(value) >= LARGE:  # a score of 1e300 is 5 significant digits, not 301 of them
            return f"{value:.{digits}e}"
        return f"{value:.{digits}f}"
    return markdown_name(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 4,
                   formats: Sequence[Formatter | None] | None = None) -> str:
    """A GitHub-flavoured Markdown table; `formats[k]` (when given) formats column k instead."""
    if formats is not None and len(formats) != len(header):
        raise ValueError(f"{len(formats)} formats for {len(header)} columns")
    lines = ["| " + " | ".join(format_cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row has {len(row)} cells, the header {len(header)}: {row!r}")
        cells = []
        for k, value in enumerate(row):
            fmt = formats[k] if formats is not None else None
            cells.append(format_cell(value, digits) if fmt is None or value is None else fmt(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def percent(value: float, digits: int = 2) -> str:
    """A fraction as a percentage, e.g. 0.1234 -> '12.34%'."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{100 * value:.{digits}f}%"


def significant_figures(value: float, figures: int = 4) -> str:
    """A number with `figures` significant figures (`%g`)."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value:.{figures}g}"

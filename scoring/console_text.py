"""Data strings shown on a console: visible, on one line, never acting on the terminal.

Every string from a dump or a config (ids, texts, system, dataset and column names, file
names, constraint JSON, labels) is hostile. Printed raw, an escape sequence clears the screen
and forges output (`ESC [2J`), writes the clipboard (`ESC ]52;...`), fakes a hyperlink
(`ESC ]8;;...`) or hides text (`ESC [8m`); a carriage return overwrites a line; a C1 control
(U+009B is a CSI on its own) does the same without ESC; a bidi override or isolate
(U+202E, U+2066, the Trojan Source pattern) shows characters in another order than they are.

`console_text` shows such a character as a Python-style escape, so the string stays
recognisable (an id can be found again) and the line stays one line:

| characters | shown as |
|---|---|
| tab, newline, carriage return | `\\t`, `\\n`, `\\r` |
| other C0 controls (U+0000-U+001F), DEL (U+007F), C1 controls (U+0080-U+009F) | `\\x1b`, `\\x7f`, `\\x9b` |
| bidi marks, embeddings, overrides, isolates (U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069) | `\\u202e` |
| line and paragraph separators (U+2028, U+2029) | `\\u2028` |
| every other invisible format character (Unicode category Cf: zero-width space, word joiner, BOM, soft hyphen, tag characters) | `\\u200b`, `\\U000e0041` |
| lone surrogates (undecodable bytes kept by `surrogateescape`) | `\\udcff` |

Kept as they are: all visible text in every script (accents, CJK, emoji), spaces of every
kind, private-use and unassigned code points, and the two joiners U+200C (ZWNJ) and U+200D
(ZWJ), which Persian, Indic scripts and emoji sequences need and which move no other character.
A backslash is kept too (Windows paths, regexes, messages stay as written), so the text
`\\x1b` and an ESC print alike; only the console shows this form, every file keeps the raw string.

With `limit`, a longer result keeps its head and tail and shows in between how many UTF-8
bytes of the original were left out: `abc…[12345 bytes left out]…xyz`.

`console_line` is the rule for a whole printed line: URLs redacted first
(`scoring.redact`), then `console_text`, cut at `LINE_LIMIT` characters. Every console choke
point calls it: the CLI's error printer and summary (`ctgscore.cli.common`), the job's own
command line (`ray_jobs.entrypoint`), the messages a Ray worker prints, progress-bar labels.

`console_json` applies the same rule to a JSON document (`json.dumps(..., ensure_ascii=False)`
escapes the C0 controls only): each such character becomes its JSON `\\uXXXX` escape, so the
document decodes to the same values.
"""

from __future__ import annotations

import unicodedata

_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
#: invisible format characters kept as they are: zero-width non-joiner and joiner
_KEPT_FORMAT = frozenset("\u200c\u200d")
#: categories of non-printable characters that are still shown as they are: spaces
#: (no-break, ideographic, ...), private use, unassigned
_KEPT_CATEGORIES = frozenset(("Zs", "Co", "Cn"))
_MARKER = "…[{} bytes left out]…"


def hidden(ch: str) -> bool:
    """True for a character `console_text` shows as an escape (module docstring)."""
    if ch.isprintable():
        return False
    if ch in _KEPT_FORMAT:
        return False
    return unicodedata.category(ch) not in _KEPT_CATEGORIES


def _escape(ch: str) -> str:
    short = _SHORT.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def console_text(value: object, limit: int | None = None) -> str:
    """`value` as text safe to print on a console, on one line (module docstring); cut in the
    middle to at most `limit` characters (at least 40) when given. Idempotent: the result
    shows unchanged when passed again. A cut reads only the head and tail it shows (a hostile
    cell of many megabytes costs what the line costs)."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:  # every character shows as one or more
        return _cut(text, limit)
    out = text if text.isprintable() else "".join(_shown(ch) for ch in text)
    if limit is None or len(out) <= limit:
        return out
    return _cut(text, limit)


def _shown(ch: str) -> str:
    return _escape(ch) if hidden(ch) else ch


def _cut(text: str, limit: int) -> str:
    """`text` shown in at most `limit` characters: as much of its head (two thirds) and tail
    as fit beside the marker, which counts the UTF-8 bytes left out between them."""
    if limit < 40:
        raise ValueError(f"console_text limit {limit}: expected at least 40 characters")
    total = _utf8_size(text)
    budget = limit - len(_MARKER.format(total))
    head_budget = budget * 2 // 3
    head_pieces: list[str] = []
    head = used = 0
    while head < len(text):
        piece = _shown(text[head])
        if used + len(piece) > head_budget:
            break
        head_pieces.append(piece)
        used += len(piece)
        head += 1
    tail_pieces: list[str] = []
    tail, used = len(text), 0
    while tail > head:
        piece = _shown(text[tail - 1])
        if used + len(piece) > budget - head_budget:
            break
        tail_pieces.append(piece)
        used += len(piece)
        tail -= 1
    left_out = total - _utf8_size(text[:head]) - _utf8_size(text[tail:])
    return "".join(head_pieces) + _MARKER.format(left_out) + "".join(reversed(tail_pieces))


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON spells a character beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def console_json(document: str) -> str:
    """A JSON text (from `json.dumps`) with every character `console_text` would escape
    written as its JSON escape instead; the JSON whitespace between tokens (newlines of an
    indented document) is kept. Decodes to the same values."""
    if document.isprintable():
        return document
    return "".join(_json_escape(ch) if ch not in "\n\r\t" and hidden(ch) else ch for ch in document)


#: the longest console line, in characters: a longer one (a megabyte id in an error) keeps its
#: head and tail (`console_text`'s `limit`)
LINE_LIMIT = 4000


def console_line(text: object, limit: int | None = LINE_LIMIT) -> str:
    """The console rule for one printed line: every URL redacted first
    (`scoring.redact.redact_text`), then `console_text`, cut to `limit` characters."""
    from scoring.redact import redact_text

    return console_text(redact_text(text if isinstance(text, str) else str(text)), limit)


def console_lines(text: str) -> list[str]:
    """A block of the program's own lines (a traceback, a rendered table) as console lines:
    split at its newlines, each line then passed through `console_line` without a limit."""
    return [console_line(line, None) for line in text.split("\n")]


def escape_what_the_console_cannot_encode(*streams) -> None:
    """A console whose encoding cannot spell every character (an ASCII or Latin-1 locale,
    `PYTHONIOENCODING=ascii`) gets the Python escape of such a character (`caf\\xe9`), as the
    console rule shows hidden ones, instead of a UnicodeEncodeError after the work was done.
    Every entry point calls it first: `ctgscore`, the demo and `python -m ray_jobs.score_corpus`."""
    import codecs

    for stream in streams:
        encoding = getattr(stream, "encoding", None)
        if not hasattr(stream, "reconfigure") or not encoding:
            continue
        if not codecs.lookup(encoding).name.startswith("utf"):
            stream.reconfigure(errors="backslashreplace")

"""Hostile strings for console tests, and the check that a captured console is safe.

`HOSTILE` holds strings a dump may carry to act on a terminal or hide what it shows (escape
sequences, C1 controls, a carriage return, bidi overrides); `console_problems` lists what in
a captured stdout or stderr could still do so (docs/security.md, "The console").
"""

from __future__ import annotations

import unicodedata

#: name -> a string that acts on a terminal or hides text when printed raw
HOSTILE = {
    "clipboard": "\x1b]52;c;SGVsbG8=\x07",  # OSC 52: writes the clipboard
    "hyperlink": "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",  # OSC 8: a fake link
    "clear": "\x1b[2J\x1b[Hforged",  # clears the screen, writes from the top
    "overwrite": "ok\rFORGED",  # a bare carriage return overwrites the line
    "hidden": "\x1b[8mhidden\x1b[0m",  # SGR 8: invisible text
    "c1": "\x9b31mred\x9b0m\x85",  # C1 CSI (no ESC needed) and NEL
    "bidi": "\u202eevil\u2066txt\u2069\u200f",  # Trojan Source: override, isolate, mark
    "invisible": "zero\u200bwidth\ufeff\U000e0041",  # zero-width space, BOM, a tag character
}

#: invisible joiners that legitimate text needs (kept on the console)
_KEPT = frozenset("\u200c\u200d")


def console_problems(text: str) -> list[str]:
    """The characters of `text` (a captured console) that may act on a terminal or hide text,
    as their `ascii` form: every C0 control but the newline that ends a line, DEL, C1, bidi and
    other format characters (but the two joiners), line and paragraph separators, surrogates."""
    bad = []
    for ch in text:
        if ch == "\n" or ch in _KEPT:
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            bad.append(ascii(ch))
    return sorted(set(bad))


def shown(text: str) -> str:
    """How `text` is expected to appear on the console: its `ascii` form for every character
    `console_problems` would flag, itself otherwise (an independent spelling of the rule)."""
    return "".join(ascii(ch)[1:-1] if console_problems(ch) or ch == "\n" else ch for ch in text)

"""The files a report or a leaderboard writes: names made from data kept inside the report
folder, and writes that replace whatever is at the path (a symlink too) instead of following it.

`safe_name` keeps a name that is already a plain file name (letters, digits, `-`, `_`, `.`, not
starting with `.`, at most 64 characters) and turns any other (`..`, `a/b`, a NUL, spaces, a
leading dot) into a slug of its letters and digits plus the first 8 hex digits of its SHA-256,
so two different names never share a file and no name leaves the folder.
"""

from __future__ import annotations

import hashlib
import os
import pathlib

from scoring import atomic_files

PLAIN_MAX = 64
SLUG_MAX = 48


def _plain(text: str) -> bool:
    return (0 < len(text) <= PLAIN_MAX and not text.startswith(".")
            and all(ch.isalnum() or ch in "-_." for ch in text) and text.isprintable())


def safe_name(name) -> str:
    """A file or folder name for `name` (see the module doc); the same name always gives the same result."""
    text = str(name)
    if _plain(text):
        return text
    slug = "".join(ch if ch.isalnum() and ch.isprintable() else "_" for ch in text).strip("_")[:SLUG_MAX]
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug or 'name'}-{digest}"


def subfolder(parent: pathlib.Path, name: str) -> pathlib.Path:
    """`parent / name` as a real folder: a symlink there is replaced, never followed."""
    path = pathlib.Path(parent) / name
    if path.is_symlink():
        path.unlink()
    path.mkdir(exist_ok=True)
    return path


def write_text(path, text: str) -> pathlib.Path:
    """`path` holds `text` (UTF-8), replaced whole (`scoring.atomic_files`: a symlink there is
    replaced, its target untouched, and a reader never sees half a file)."""
    return atomic_files.write_text(path, text, fsync=False)


def write_figure(fig, path, dpi: int) -> pathlib.Path:
    """A matplotlib figure saved as PNG at `path`, replaced whole as `write_text` says."""
    return atomic_files.write_with(path, lambda handle: fig.savefig(handle, format="png", dpi=dpi), fsync=False)


def append_line(path, line: str) -> pathlib.Path:
    """`line` and a newline appended to the file at `path` (created when missing); a symlink
    there is replaced by a new file, never followed (`O_NOFOLLOW`)."""
    path = pathlib.Path(path)
    if path.is_symlink():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return path

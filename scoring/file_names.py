"""File and folder names made from data: kept inside their folder, and never two the same file.

`safe_name` keeps a name that is already a plain file name (letters, digits, `-`, `_`, `.`, not
starting or ending with `.`, not a Windows device name such as `CON` or `nul.txt`, at most 64
characters and 192 UTF-8 bytes, so that a prefix and a suffix still fit the 255 bytes of a file
name) and turns any other (`..`, `a/b`, a NUL, spaces, a leading dot) into a slug of its
letters and digits plus the first 8 hex digits of its SHA-256, so no name leaves the folder.

`FileNames` hands out the names of one folder so that no two of them are the same file on any
filesystem a report may be copied to: names are compared as a case-insensitive, Unicode-
normalising filesystem (macOS, Windows, Linux case-folding directories) compares them
(`collision_key`: `A` and `a`, NFC `Å` and NFD `Å`, `Straße` and `STRASSE`, `x.` and `x` are one
file there), and a name that clashes with one already given
(or with a crafted SHA-256 prefix collision) gets `-2`, `-3`, ... before its suffix.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

PLAIN_MAX = 64
PLAIN_MAX_BYTES = 192  # 64 letters of 3 bytes; letters of 4 bytes (CJK Extension B) take the slug
SLUG_MAX = 48  # at most 48 * 4 + 9 = 201 bytes with its hash
# CON, PRN, AUX, NUL, COM0-9, LPT0-9 (superscript digits too), with or without an extension
_DEVICE = re.compile(r"(con|prn|aux|nul|conin\$|conout\$|(com|lpt)[0-9\u00b9\u00b2\u00b3])(\..*)?", re.IGNORECASE)


def _plain(text: str) -> bool:
    return (0 < len(text) <= PLAIN_MAX and len(text.encode("utf-8", "surrogatepass")) <= PLAIN_MAX_BYTES
            and not text.startswith(".") and not text.endswith(".")
            and all(ch.isalnum() or ch in "-_." for ch in text) and text.isprintable()
            and not _DEVICE.fullmatch(text))


def _simple_upper(ch: str) -> str:
    """`ch`'s uppercase where that is one character (Unicode's simple mapping), else `ch`."""
    upper = ch.upper()
    return upper if len(upper) == 1 else ch


def collision_key(name: str) -> str:
    """`name` as the strictest common filesystem compares it; two names with one key may be one
    file somewhere, so `FileNames` keeps them apart:

    - APFS case-insensitive (macOS's default) compares names as Unicode's canonical caseless
      match: NFD, full case folding (CaseFolding.txt statuses C and F), NFD again; ext4 and
      f2fs directories with case folding on (`chattr +F`) fold the same way. So `Straße`,
      `STRASSE` and `strasse` are one file there, as are NFC and NFD `Å`.
    - NTFS, exFAT and FAT (Windows) upper-case each UTF-16 unit through the volume's `$UpCase`
      table of one-to-one mappings and drop trailing dots and spaces: every pair of that table
      (the one Windows Vista writes) already shares a case fold; Unicode's simple uppercase
      adds one pair the fold keeps apart, dotless `ı` and `I`, so each character is first
      upper-cased where that is one character, then folded.
    - HFS+ (one-to-one lower-casing, its own decomposition) merges no name the above keep apart.

    The key merges more than any one filesystem does (NFC and NFD `Å` are two files on NTFS,
    `ß` and `ss` two on HFS+): a name is given a `-2` when unsure, never a shared file."""
    upper = "".join(map(_simple_upper, name)) if not name.isascii() else name
    folded = unicodedata.normalize("NFD", unicodedata.normalize("NFD", upper).casefold())
    return folded.rstrip(". ")


class FileNames:
    """The names of the files of one folder, each distinct from every other by `collision_key`
    (`reserved`: names the folder already holds, such as a report's own files)."""

    def __init__(self, reserved=()):
        self._keys = {collision_key(str(name)) for name in reserved}

    def claim(self, stem: str, suffix: str = "") -> str:
        """`stem + suffix`, or `stem-2 + suffix`, `stem-3 + suffix`, ... when that is taken."""
        name, k = stem + suffix, 1
        while collision_key(name) in self._keys:
            k += 1
            name = f"{stem}-{k}{suffix}"
        self._keys.add(collision_key(name))
        return name


def safe_name(name) -> str:
    """A file or folder name for `name` (see the module doc); the same name always gives the same result."""
    text = str(name)
    if _plain(text):
        return text
    slug = "".join(ch if ch.isalnum() and ch.isprintable() else "_" for ch in text).strip("_")[:SLUG_MAX]
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug or 'name'}-{digest}"

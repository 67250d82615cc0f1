"""Local files named by a user or a config (params files, idf tables, templates, splits, the
files `convert` reads): a character or block device is refused before it is read.

`/dev/zero` or `/dev/urandom` named as an idf table, a template set or `--params @FILE` would
be read without end (every byte of memory, then a `MemoryError`); a path in a job config from
a pull request may name one. Regular files and pipes (`--params @/dev/stdin` fed by a shell)
are read as before; a path that is not there is left to the read that follows, which names it.

Files ctgscore finds by walking a folder (the Parquet files and `manifest.json` of a scores
folder) were named by nobody: anything there but a regular file (a device, a named pipe that
would block the read until a writer comes, a socket) is refused (`refuse_not_regular`).
"""

from __future__ import annotations

import os
import stat

from scoring.errors import CtgscoreError, UsageError


def refuse_device(path: str | os.PathLike, what: str = "", error: type[CtgscoreError] = UsageError) -> None:
    """Raise `error` ("<what><path>: a device, not a file") when `path` is a character or
    block device; `what` prefixes the message (`"idf: "`, `"--params "`). A pipe the user
    names (`--params @/dev/stdin`, a shell's `<(...)`) is read: its writer is theirs."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # absent, unreadable, a NUL in the name: the read names it
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise error(f"{what}{os.fspath(path)}: a device, not a file (it would be read without end)")


def refuse_not_regular(path: str | os.PathLike, what: str = "", error: type[CtgscoreError] = UsageError) -> None:
    """Raise `error` ("<what><path>: a <kind>, not a regular file") unless `path` (its symlinks
    followed) is a regular file; an absent or unreadable path is left to the read that follows."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = ("device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "named pipe" if stat.S_ISFIFO(mode)
            else "socket" if stat.S_ISSOCK(mode) else "special file")
    raise error(f"{what}{os.fspath(path)}: a {kind}, not a regular file (reading it could block or never end)")

"""Local files named by a user or a config (params files, idf tables, templates, splits, the
files `convert` reads): a character or block device is refused before it is read.

`/dev/zero` or `/dev/urandom` named as an idf table, a template set or `--params @FILE` would
be read without end (every byte of memory, then a `MemoryError`); a path in a job config from
a pull request may name one. Regular files and pipes (`--params @/dev/stdin` fed by a shell)
are read as before; a path that is not there is left to the read that follows, which names it.
"""

from __future__ import annotations

import os
import stat

from scoring.errors import CtgscoreError, UsageError


def refuse_device(path: str | os.PathLike, what: str = "", error: type[CtgscoreError] = UsageError) -> None:
    """Raise `error` ("<what><path>: a device, not a file") when `path` is a character or
    block device, or a FIFO (a read would wait for a writer); `what` prefixes the message
    (`"idf: "`, `"--params "`)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # absent, unreadable, a NUL in the name: the read names it
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise error(f"{what}{os.fspath(path)}: a device, not a file (it would be read without end)")
    if stat.S_ISFIFO(mode):
        raise error(f"{what}{os.fspath(path)}: a FIFO, not a file (its read would wait for a writer forever)")

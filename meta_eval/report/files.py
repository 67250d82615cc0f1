"""The files a report or a leaderboard writes: names made from data kept inside the report
folder, and writes that replace whatever is at the path (a symlink too) instead of following it.

Names come from `scoring.file_names` (`safe_name`, `FileNames`: see there): no name leaves the
report folder, and no two share a file, on any filesystem.
"""

from __future__ import annotations

import os
import pathlib

from scoring import atomic_files
from scoring.file_names import FileNames, collision_key, safe_name

__all__ = ["FileNames", "append_line", "collision_key", "safe_name", "subfolder", "write_figure", "write_text"]


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
    there is replaced by a new file, never followed (`O_NOFOLLOW`). Anything there but a
    regular file (a FIFO, whose open would wait for a reader forever; a folder; a device) is a
    `StorageError` naming it, checked on the opened descriptor (`O_NONBLOCK`: a FIFO opens at
    once or fails, never waits)."""
    import stat

    from scoring.errors import StorageError

    path = pathlib.Path(path)
    if path.is_symlink():
        path.unlink()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:  # a FIFO without a reader (ENXIO), a folder (EISDIR)
        raise StorageError(f"{path}: cannot append to it ({exc.strerror or type(exc).__name__}); "
                           "it must be a regular file") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StorageError(f"{path}: not a regular file; cannot append to it")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return path

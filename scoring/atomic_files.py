"""Whole-file writes on a local file system: the bytes go to a temp file beside the
destination, which is then renamed over it.

- A reader sees the old file or the new one, never a part.
- A symlink at the destination is replaced, its target untouched (the rename replaces the
  link itself); the temp file is created with `O_CREAT | O_EXCL | O_NOFOLLOW`, so a link
  planted at its name is never followed either.
- `mode=None` gives the file what a plain `open()` would (0666 less the umask); a `mode`
  (0600 for a secret) is the file's mode from its creation on, never wider for a moment.
- `fsync=True` flushes the file before the rename and the folder after it, so the new file
  survives a crash of the machine once the call returns.
- On any failure the temp file is removed and the destination is left as it was.

Temp names are `.<name>.tmp-<8 hex>`: hidden, and what `is_temp_name` recognises (the job's
clean-up removes those that crashed runs left).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import uuid
from collections.abc import Callable
from typing import BinaryIO

TEMP_MARKER = ".tmp-"
NAME_KEEP_BYTES = 200  # of the destination's name in its temp name: a file name stops at 255 bytes
_TEMP_NAME = re.compile(r"^\..+\.tmp-[0-9a-z]+$")
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def temp_name(name: str) -> str:
    """The hidden name a file called `name` is written under before it is renamed into place:
    whole characters of its head, at most NAME_KEEP_BYTES in UTF-8 (an undecodable byte kept
    by `surrogateescape` counted as 3, and kept: it is the name's own byte again on disk)."""
    kept = name[:NAME_KEEP_BYTES]  # every character is at least one byte
    while len(kept.encode("utf-8", "surrogatepass")) > NAME_KEEP_BYTES:
        kept = kept[:-1]
    return f".{kept}{TEMP_MARKER}{uuid.uuid4().hex[:8]}"


def is_temp_name(name: str) -> bool:
    """True for a name `temp_name` makes (a write that has not finished, or crashed)."""
    return bool(_TEMP_NAME.match(name))


def write_with(path, write: Callable[[BinaryIO], object], *, mode: int | None = None,
               fsync: bool = True) -> pathlib.Path:
    """`path` holds what `write(handle)` writes to a binary handle on the temp file (see the
    module doc for the guarantees); returns `path`. Exceptions of `write` or of the file
    system propagate unchanged, after the temp file is removed."""
    path = pathlib.Path(path)
    fd, temp = _create_temp(path, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)  # exactly `mode`: the umask only ever narrowed it
            write(handle)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    if fsync:
        _fsync_folder(path.parent)
    return path


def write_bytes(path, data: bytes, *, mode: int | None = None, fsync: bool = True) -> pathlib.Path:
    """`path` holds `data`, written as `write_with` says."""
    return write_with(path, lambda handle: handle.write(data), mode=mode, fsync=fsync)


def write_text(path, text: str, *, encoding: str = "utf-8", mode: int | None = None,
               fsync: bool = True) -> pathlib.Path:
    """`path` holds `text` in `encoding`, written as `write_with` says."""
    return write_bytes(path, text.encode(encoding), mode=mode, fsync=fsync)


def _create_temp(path: pathlib.Path, mode: int) -> tuple[int, pathlib.Path]:
    for _ in range(16):  # a clash of 8 random hex digits is already unlikely
        temp = path.with_name(temp_name(path.name))
        try:
            return os.open(temp, _CREATE, mode), temp
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temp file beside {path}: every name tried exists")


def _fsync_folder(folder: pathlib.Path) -> None:
    """Flush the folder's entries (the rename); a file system that cannot is left as it is."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

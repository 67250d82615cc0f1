"""Hold back file descriptor 2 during a call into Rust and forward it afterwards, less the Rust
panic reports (`thread '...' panicked at ...` and its backtrace), which belong in a row's error
and not on ctgscore's console.

Rust's panic hook writes its report straight to file descriptor 2, under Python's `sys.stderr`,
so no Python-level redirection catches it. While a `held_stderr()` block runs, descriptor 2
points at a private temporary file; when it ends (returning, raising, or on KeyboardInterrupt)
descriptor 2 is restored first, then every line that is not part of a panic report is written
to it, in order: nothing else is lost, only delayed until the call ends.

Descriptor 2 belongs to the whole process: while one thread holds it, whatever another thread
writes to stderr lands in the file too and is forwarded when the block ends. Blocks are
serialised by one lock (a nested block in the same thread just runs inside the outer one).
Code that points descriptor 2 elsewhere for good (`ray_jobs.session.NativeStderrToFile`) must
not do so from another thread while a block runs: the block would put the old target back.
If the process dies in a block (killed, a crash in native code), what was written to stderr
during that block is lost with the temporary file.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import NamedTuple

# `thread 'name' (tid) panicked at src/lib.rs:1:2:` (the message follows on the next line); Rust
# before 1.73 wrote `thread 'name' panicked at 'message', src/lib.rs:1:2` on one line
_PANIC_HEADER = re.compile(rb"^thread '[^'\n]*'(?: \(\d+\))? panicked at (?P<where>.*?)(?P<colon>:?)\r?\n?$")
# the cargo registry's folder in a location: the crate's own path (`onig-6.5.3/src/lib.rs`) stays
_CARGO_REGISTRY = re.compile(r"^.*?/registry/src/[^/]+/")

_lock = threading.Lock()
_depth = threading.local()
_spool: tuple[int, int] | None = None  # (pid, descriptor) of the temporary file, made on first use


class PanicReport(NamedTuple):
    """The first line of a Rust panic report: where it panicked (`onig-6.5.3/src/lib.rs:647:23`,
    the cargo registry's folder left out) and the message's first line."""

    location: str
    message: str

    def __str__(self) -> str:
        return f"panicked at {self.location}" + (f": {self.message}" if self.message else "")


class Held:
    """What a `held_stderr()` block took out of stderr: its Rust panic reports, filled in when
    the block ends."""

    def __init__(self) -> None:
        self.panics: list[PanicReport] = []


def split_panic_reports(data: bytes) -> tuple[bytes, list[PanicReport]]:
    """`data` without its Rust panic reports, and each report's first line. A report is the header line, the
    message's first line, and Rust's backtrace (`stack backtrace:` and its indented frames) or
    its `note: ... RUST_BACKTRACE ...` line; the blank line Rust writes before the header goes
    too. Lines of a message past its first are kept (they cannot be told from other output)."""
    lines = data.splitlines(keepends=True)
    kept: list[bytes] = []
    panics: list[PanicReport] = []
    i = 0
    while i < len(lines):
        header = _PANIC_HEADER.match(lines[i])
        if header is None:
            kept.append(lines[i])
            i += 1
            continue
        if kept and not kept[-1].strip():
            kept.pop()
        i += 1
        where = _CARGO_REGISTRY.sub("", header["where"].decode("utf-8", "replace"))
        message = ""
        if header["colon"] and i < len(lines):
            message = lines[i].decode("utf-8", "replace").rstrip("\r\n")
            i += 1
        panics.append(PanicReport(where, message))
        if i < len(lines) and lines[i].startswith(b"stack backtrace:"):
            i += 1
            while i < len(lines) and lines[i][:1] in (b" ", b"\t"):
                i += 1
        if i < len(lines) and lines[i].startswith(b"note: ") and b"RUST_BACKTRACE" in lines[i]:
            i += 1
    return b"".join(kept), panics


@contextlib.contextmanager
def held_stderr() -> Iterator[Held]:
    """Run the block with descriptor 2 held back (module docstring); yields a `Held` whose
    `panics` lists the panic reports taken out, once the block has ended. Without a temporary
    file (an unwritable temp folder) the block runs with stderr as it is."""
    held = Held()
    if getattr(_depth, "value", 0):
        yield held  # the outer block of this thread holds descriptor 2 already
        return
    with _lock:
        spool = _open_spool()
        if spool is None:
            yield held
            return
        _flush_python_stderr()
        try:
            saved = os.dup(2)
        except OSError:  # no descriptor 2 at all: nothing to hold back
            yield held
            return
        _depth.value = 1
        try:
            os.dup2(spool, 2)
            yield held
        finally:
            _flush_python_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            _depth.value = 0
            written = _drain(spool)
            if written:
                rest, held.panics = split_panic_reports(written)
                with contextlib.suppress(OSError):  # a closed or broken stderr: as if written there
                    _write_all(2, rest)


def _open_spool() -> int | None:
    """The process's temporary file (a forked child makes its own: a shared file offset would
    mix two processes' text)."""
    global _spool
    if _spool is None or _spool[0] != os.getpid():
        if _spool is not None:
            with contextlib.suppress(OSError):
                os.close(_spool[1])  # the parent's, inherited: closing this copy leaves the parent's
            _spool = None
        try:
            spool = tempfile.TemporaryFile(prefix="ctgscore-stderr-")
        except OSError:
            return None
        _spool = (os.getpid(), os.dup(spool.fileno()))
        spool.close()
    return _spool[1]


def _drain(spool: int) -> bytes:
    """What was written to the spool since it was last drained; the spool is emptied. Descriptor
    2 shared the spool's file offset, so the offset is the length written."""
    length = os.lseek(spool, 0, os.SEEK_CUR)
    if not length:
        return b""
    data = os.pread(spool, length, 0)
    os.lseek(spool, 0, os.SEEK_SET)
    os.ftruncate(spool, 0)
    return data


def _flush_python_stderr() -> None:
    with contextlib.suppress(Exception):
        if sys.stderr is not None:
            sys.stderr.flush()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]

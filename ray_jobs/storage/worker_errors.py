"""Errors raised inside Ray workers, recovered on the driver."""

from __future__ import annotations

import re

from scoring.errors import CtgscoreError, InputError, StorageError

_WORKER_ERROR_LINE = re.compile(r"^(?:scoring\.errors|ray_jobs(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)


def error_from_worker(exc: BaseException) -> CtgscoreError | None:
    """The ctgscore error a Ray worker raised (a `StorageError` from `put_atomic`, say), or None.

    Ray Data wraps an exception raised in a map task in its own `UserCodeException`, and the
    original is not pickled back with it (Python does not pickle `__cause__`); only the
    worker's traceback text in the driver-side error still names it. So: the exception chain
    first, then the last `scoring.errors.XError: message` line of that text."""
    from scoring import errors

    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, CtgscoreError):
            return current
        stack.extend(getattr(current, name, None) for name in ("cause", "__cause__", "__context__"))
    matches = _WORKER_ERROR_LINE.findall(str(exc))
    if not matches:
        return None
    name, message = matches[-1]
    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, CtgscoreError)):
        kind = InputError if name == "MissingInput" else CtgscoreError
    error = kind(message.strip())
    if isinstance(error, StorageError):
        error.transient = "storage unreachable" in message
    return error

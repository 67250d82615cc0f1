"""The errors a user can cause or meet, each with the exit code the CLI gives it.

Library code raises these with a one-line message that names the file, row, field, key or
bucket at fault; the CLI prints `error: <message>` and exits with `exc.exit_code`, never a
traceback. Anything else escaping to the CLI is a bug in ctgscore.

| class          | exit | when                                                            |
|----------------|------|-----------------------------------------------------------------|
| `UsageError`   | 2    | bad flags, job config, metric name or parameter                  |
| `InputError`   | 1    | input data that cannot be used (file, row, field)                |
| `StorageError` | 1    | storage unreachable, unwritable, missing bucket, permission     |
| `CtgscoreError`| 1    | any other failure while running (lost rows, too many errors)    |
"""

from __future__ import annotations


class CtgscoreError(Exception):
    """Base of every error ctgscore reports to a user as one line."""

    exit_code = 1


class UsageError(CtgscoreError, ValueError):
    """The command, the job configuration or a metric parameter is wrong: fix it and re-run."""

    exit_code = 2


class InputError(CtgscoreError, ValueError):
    """Input data that cannot be used: the message names the file, row or field."""


class StorageError(CtgscoreError, OSError):
    """Storage that cannot be read or written: the message names the path, bucket or key."""


# a row error that is no property of the row (out of memory on a single row): the part holding
# it is scored again by the next run, and the job's summary counts these rows apart
RETRY_PREFIX = "retry next run: "


def is_row_failure(exc: BaseException) -> bool:
    """An exception that is one row's (or one batch's) failure: any `Exception`, and a panic of
    a Rust library (pyo3's `PanicException`, a `BaseException`): a model's tokenizer.json whose
    pre-tokenizer regex backtracks past Oniguruma's retry limit on one text panics inside
    `tokenizers`, and that text must be one row error, not the end of the run."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA (caching allocator, cuBLAS/cudaMalloc) or host out-of-memory, by type or text."""
    return type(exc).__name__ == "OutOfMemoryError" or (isinstance(exc, (RuntimeError, MemoryError)) and "out of memory" in str(exc).lower())


_ACCELERATOR_MARKERS = (
    "cuda error", "cuda driver error", "device-side assert", "illegal memory access", "illegal address", "unspecified launch failure",
    "cublas_status_", "cudnn_status_", "cudnn error", "nccl error", "uncorrectable ecc error",
)


def is_accelerator_error(exc: BaseException) -> bool:
    """A failure of the accelerator itself (device-side assert, illegal memory access, lost
    context): after one, every later CUDA call of the process fails too, so it is never a
    property of the row being scored. Out-of-memory is not one (the engine splits the batch)."""
    text = str(exc).lower()
    if "out of memory" in text:
        return False
    # by type: torch >= 2.8 raises AcceleratorError for CUDA runtime errors (a subclass, too)
    if any(cls.__name__ == "AcceleratorError" for cls in type(exc).__mro__):
        return True
    # by text: RuntimeError("CUDA error: ..."), c10's "CUDA driver error: ..." (driver API), cuBLAS/cuDNN
    return isinstance(exc, RuntimeError) and any(marker in text for marker in _ACCELERATOR_MARKERS)


# ----- one line for a message: the one place these rules live --------------------------------
def one_line(text: object, limit: int | None = None) -> str:
    """`text` with every run of whitespace (newlines included) as one space and every URL
    redacted (`scoring.redact.redact_text`), cut to `limit` characters (ending in `...`) when
    given."""
    from scoring.redact import redact_text

    text = redact_text(" ".join(str(text).split()))
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def last_line(exc: BaseException) -> str:
    """The last non-blank line of an exception's message, or of its `cause` when it carries
    one (a worker's error wrapped by Ray ends with the cause); its type name when empty."""
    cause = getattr(exc, "cause", None)
    lines = [line for line in str(cause if cause is not None else exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__

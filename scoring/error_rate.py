"""The error-rate rule, in one place: `max_error_rate` is a fraction in [0, 1], and a run
whose share of error rows is above it fails (skipped rows are not errors). The job config,
`ctgscore run`/`score`/`constraints`, the job's own command line and the manifest check use it,
each with its own wording of the message."""

from __future__ import annotations


def is_fraction(value: float) -> bool:
    return 0.0 <= value <= 1.0


def exceeds(errors: int, rows: int, limit: float | None) -> bool:
    """Whether `errors` of `rows` is above the fraction `limit` (never with no rows or no limit)."""
    return limit is not None and rows > 0 and errors / rows > limit

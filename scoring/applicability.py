"""Whether a metric applies to any row of a run, and the one line that says why not.

A metric applies to a row when at least one of its scores does (`RowMetric.score_needs`). A
run in which it applies to no row (a misnamed column: `refs` for `references`) is a mistake in
the config or the data, not a run with nothing to do: it fails (exit 2) with one line naming
the metric, the column it needed and the closest column names present (`difflib`).
"""

from __future__ import annotations

import difflib
from typing import Iterable, Mapping, Sequence

from scoring.errors import UsageError
from scoring.schema import visible_columns

CLOSE_CUTOFF = 0.5  # `refs` against `references` scores 0.57


class NotApplicable(UsageError):
    """A metric that applies to no row of the run (exit code 2)."""


def score_needs_by_label(metric) -> dict[str, tuple[str, ...]]:
    """A built metric's `score_needs`, keyed by each score's short name (`r_h`, `coherence`)."""
    return {metric.score_label(column): tuple(needs) for column, needs in metric.score_needs().items()}


def closest(column: str, present: Sequence[str]) -> list[str]:
    """Up to three present column names closest to `column`."""
    return difflib.get_close_matches(column, list(present), n=3, cutoff=CLOSE_CUTOFF)


def unmet_message(label: str, needs: Mapping[str, Sequence[str]], present: Iterable[str], where: str) -> str | None:
    """None when some score's columns are all among `present`; else the line naming, per
    missing column, the scores that need it and the closest names present (`where`: "absent
    from every input shard", "absent from input.parquet")."""
    present = visible_columns(present)
    missing: dict[str, list[str]] = {}
    for score, columns in needs.items():
        absent = [c for c in columns if c not in present]
        if not absent:
            return None
        missing.setdefault(absent[0], []).append(score)
    if not missing:
        return None
    every = len(missing) == 1
    parts = []
    for column, scores in missing.items():
        near = closest(column, present)
        hint = f"closest present: {', '.join(repr(c) for c in near)}" if near else f"present: {', '.join(present) or 'none'}"
        scope = "" if every else f" (for {', '.join(scores)})"
        parts.append(f"column {column!r}{scope} ({where}; {hint})")
    return f"metric {label} applies to no row: it needs " + " or ".join(parts)


def check_columns(label: str, needs: Mapping[str, Sequence[str]], present: Iterable[str], where: str) -> None:
    """Raise `NotApplicable` with `unmet_message` when the metric applies to no row of a run
    whose rows have the columns `present`."""
    message = unmet_message(label, needs, present, where)
    if message is not None:
        raise NotApplicable(message)


def no_row_message(label: str, rows: int, skip_reasons: Mapping[str, int]) -> str:
    """The line for a metric whose every row was skipped although its columns are present
    (null or empty in every row)."""
    reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(skip_reasons.items(), key=lambda item: -item[1])[:3])
    return f"metric {label} applies to no row: all {rows} rows were skipped" + (f" ({reasons})" if reasons else "") + \
        "; the columns it needs are null or empty in every row"

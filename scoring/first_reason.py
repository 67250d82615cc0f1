"""A row left out counts under the first reason that holds it: given (reason, rows it holds) in
precedence order, the rows kept, the rows each reason takes (a row several reasons hold is
counted once, under the first) and where the first row of each reason is. The one place this
rule lives: every row account counts through it, `meta_eval.row_account.account` (meta, compare,
leaderboard, compmctg, constraints report) and `scoring.utf8_text.unreadable_counts` (keys not
valid UTF-8: the scores `meta` reads, a constraints report's files, the splits of a corpus)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class ReasonCounts:
    """`keep`: the rows no reason holds; `left_out`: reason -> rows it takes (only reasons that
    take some row, in precedence order); `first`: reason -> where its first row is (when asked)."""

    keep: np.ndarray
    left_out: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)

    @property
    def rows_used(self) -> int:
        return int(self.keep.sum())


def count_by_first_reason(rows: int, checks: Sequence[tuple[str, np.ndarray | None]],
                          where: Callable[[str, np.ndarray], str] | None = None) -> ReasonCounts:
    """The rows kept and left out of `rows` rows: `checks` are (reason, mask of the rows it holds,
    or None for none) in precedence order. A reason named twice adds up; its first row is the one
    the earlier check found. `where(reason, rows it takes, ascending)` names the first row of each
    reason that takes some row, from the mask already built (no other pass over the data)."""
    keep = np.ones(rows, dtype=bool)
    left_out: dict[str, int] = {}
    first: dict[str, str] = {}
    for reason, holds in checks:
        if holds is None:
            continue
        holds = np.asarray(holds, dtype=bool)
        if holds.shape != (rows,):
            raise ValueError(f"reason {reason!r}: a mask of {holds.shape} for {rows} rows")
        hit = keep & holds
        if hit.any():
            left_out[reason] = left_out.get(reason, 0) + int(hit.sum())
            if where is not None and reason not in first:
                first[reason] = where(reason, np.flatnonzero(hit))
            keep &= ~hit
    return ReasonCounts(keep, left_out, first)

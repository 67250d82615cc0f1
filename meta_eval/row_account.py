"""Where every input row went: used in a group, or left out with its reason (`docs/meta_eval.md`,
"Rows left out").

The statistics group rows by key columns (`dataset`, `system`, the unit `doc_id`). A key that is
missing puts a row in no group, so it is left out and counted here, never dropped in silence.
A key is missing when it is null, a float NaN (a numeric id column) or a string that is empty
or only white space (`is_missing`). A key that is a string but not valid UTF-8 (Parquet can
carry one) cannot be shown, compared or written back, and decoding it with replacement
characters would merge distinct keys, so its row is left out too, under its own reason
(`unreadable_reason`, found by `unreadable_mask` without decoding it), before any missing key.
The account names the first row of every reason (`RowAccount.first`: file, column, row), found
on the mask that reason takes. One `RowAccount` per command holds
rows_in = rows_used + sum(left_out.values()); building one that does not add up is an error.
`meta`, `compare` (row frames and partial sums alike), `constraints report` and `compmctg` all
count through this module; the search for keys not UTF-8 lives in `scoring.utf8_text` (the
splits of a corpus, a layer beside this one, use it too) and is imported from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from scoring.first_reason import count_by_first_reason
from scoring.utf8_text import (  # noqa: F401 - the search for keys not UTF-8 lives in scoring (splits use it too)
    first_undecodable,
    is_utf8,
    undecodable_dictionary,
    unreadable_mask,
    unreadable_reason,
    unreadable_where,
)


def no_key(column: str) -> str:
    """The reason a row without `column` is left out ("no dataset", "no doc_id")."""
    return f"no {column}"


def is_missing(value) -> bool:
    """A key that names no group: None, NaN (float, pandas NA/NaT) or a blank string."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, float):
        return math.isnan(value)
    try:
        import pandas as pd

        return bool(pd.isna(value)) if np.ndim(value) == 0 else False
    except (TypeError, ValueError):
        return False


def missing_mask(values) -> np.ndarray:
    """`is_missing` of every element (classified once per distinct value)."""
    import pandas as pd

    series = pd.Series(values, dtype="object") if not isinstance(values, pd.Series) else values.astype("object")
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    bad = np.array([is_missing(u) for u in uniques] + [True], dtype=bool)  # -1 (NA) -> the last entry
    return bad[codes]


@dataclass(frozen=True)
class RowAccount:
    """rows_in = rows_used + the rows left out, per reason (insertion order is the precedence);
    `first`: for each reason, where its first row is (file, column, row)."""

    rows_in: int
    rows_used: int
    left_out: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.rows_used + sum(self.left_out.values()) != self.rows_in or self.rows_used < 0:
            raise ValueError(f"row account does not add up: {self.rows_in} in != {self.rows_used} used + "
                             f"{sum(self.left_out.values())} left out ({self.left_out})")

    @property
    def rows_left_out(self) -> int:
        return sum(self.left_out.values())

    def line(self) -> str | None:
        """One line for a console or a report, or None when no row was left out."""
        if not self.rows_left_out:
            return None
        reasons = ", ".join(f"{n} {reason}" for reason, n in self.left_out.items())
        firsts = "".join(f"; first {reason}: {where}" for reason, where in self.first.items())
        return (f"{self.rows_left_out} of {self.rows_in} rows left out of every group ({reasons}); "
                f"{self.rows_used} used{firsts}")

    @classmethod
    def lines(cls, rows_used: int | None, left_out: dict[str, int], indent: str = "  ",
              first: dict[str, str] | None = None) -> list[str]:
        """The console line of an account given as rows used and rows left out (none when none)."""
        if not left_out:
            return []
        account = cls(rows_used + sum(left_out.values()), rows_used, dict(left_out), dict(first or {}))
        return [f"{indent}left out: {account.line()}"]

    def then(self, later: "RowAccount") -> "RowAccount":
        """This account followed by `later`, an account of the rows this one used: rows in are
        this one's, rows used `later`'s, rows left out (and first rows) both, this one's first."""
        if later.rows_in != self.rows_used:
            raise ValueError(f"row accounts do not chain: {later.rows_in} in after {self.rows_used} used")
        left_out = dict(self.left_out)
        for reason, rows in later.left_out.items():
            left_out[reason] = left_out.get(reason, 0) + rows
        found = {**later.first, **self.first}
        return RowAccount(self.rows_in, later.rows_used, left_out, {r: found[r] for r in left_out if r in found})

    def as_dict(self) -> dict:
        """rows_in, rows_used, rows_left_out (reason -> rows) and, where some row is left out,
        rows_left_out_first (reason -> where its first row is)."""
        return {"rows_in": self.rows_in, "rows_used": self.rows_used, "rows_left_out": dict(self.left_out),
                **({"rows_left_out_first": dict(self.first)} if self.first else {})}


def account(rows_in: int, checks: Sequence[tuple[str, np.ndarray]],
            where: Callable[[str, np.ndarray], str] | None = None) -> tuple[np.ndarray, RowAccount]:
    """Rows to keep and their account: `checks` are (reason, missing mask) in precedence order; a
    row missing several keys is counted once, under the first reason that applies. `where`
    (reason, the rows it takes, in order) names the first row of each reason (`RowAccount.first`),
    found on the mask that reason takes (no other pass over the keys). The rule itself:
    `scoring.first_reason.count_by_first_reason`."""
    found = count_by_first_reason(rows_in, checks, where)
    return found.keep, RowAccount(rows_in, found.rows_used, found.left_out, found.first)


def group_keys(frame, group_col: str, keys: Sequence[str] = (), source: str = "the rows",
               ids=None, where: Callable[[str, np.ndarray], str] | None = None) -> tuple[np.ndarray, RowAccount]:
    """The rows of a frame that land in a group and their account. `group_col` (the dataset)
    is checked only when some row has one (no row having one: a single group of all rows);
    `keys` (system, unit) must be present in every kept row. Precedence: a key not valid UTF-8
    (`group_col`, then `keys`), then `group_col` missing, then `keys` missing; the first row of
    each reason is named by `where` (column, the rows of the frame it takes), by default as in
    `source`, with its column and row (its id where `ids` give one: `unreadable_where`)."""
    rows = len(frame)
    columns = [c for c in [group_col, *keys] if c in frame]  # an absent key column is the caller's error to name
    unreadable, missing = [], {}  # unreadable: (column, rows whose key is not UTF-8)
    for col in columns:
        try:
            missing[col] = missing_mask(frame[col])
        except Exception:  # noqa: BLE001 - re-raised unless a string is not UTF-8 (pyarrow wraps that error)
            bad = unreadable_mask(frame[col])
            if bad is None:
                raise
            missing[col] = missing_mask(frame[col].where(~bad, None)) & ~bad
            unreadable.append((col, bad))
    taken = np.logical_or.reduce([bad for _, bad in unreadable]) if unreadable else np.zeros(rows, bool)
    checks = [(unreadable_reason(col), bad) for col, bad in unreadable]
    column_of = {unreadable_reason(col): col for col, _ in unreadable}
    if group_col in missing and not (missing[group_col] | taken).all():
        checks.append((no_key(group_col), missing[group_col]))
        column_of[no_key(group_col)] = group_col
    checks += [(no_key(key), missing[key]) for key in keys if key in missing]
    column_of.update({no_key(key): key for key in keys})
    if where is None:
        def where(column, hit):
            return unreadable_where(source, column, int(hit[0]), ids)
    return account(rows, checks, lambda reason, hit: where(column_of[reason], hit))


def merge(accounts: Sequence[RowAccount]) -> RowAccount:
    """The sum of several accounts (reasons in first-seen order)."""
    left_out: dict[str, int] = {}
    first: dict[str, str] = {}
    for item in accounts:
        for reason, n in item.left_out.items():
            left_out[reason] = left_out.get(reason, 0) + n
        for reason, where in item.first.items():
            first.setdefault(reason, where)
    return RowAccount(sum(a.rows_in for a in accounts), sum(a.rows_used for a in accounts), left_out, first)


def unreadable_key(values, column: str, source: str, ids=None) -> str:
    """The error for a key column that holds a value that is not text (invalid UTF-8): the
    file, the column and the row, for a caller that refuses such a frame (`meta_eval.io.normalise_keys`
    given a frame directly). The commands leave such a row out instead (`unreadable_reason`);
    neither decodes it with replacement characters."""
    return f"{unreadable_where(source, column, first_undecodable(values), ids)}: not valid UTF-8 (a key must be text)"

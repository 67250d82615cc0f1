"""`scoring.first_reason.count_by_first_reason`: the one rule every row account follows (a row
counts under the first reason that holds it, the first row of each reason named)."""

from __future__ import annotations

import numpy as np
import pytest

from scoring.first_reason import count_by_first_reason


def mask(rows: int, *hits: int) -> np.ndarray:
    out = np.zeros(rows, bool)
    out[list(hits)] = True
    return out


def test_a_row_several_reasons_hold_counts_once_under_the_first():
    found = count_by_first_reason(6, [("a", mask(6, 1, 3)), ("b", mask(6, 1, 2, 3)), ("c", mask(6, 2, 5))])
    assert found.keep.tolist() == [True, False, False, False, True, False]
    assert found.left_out == {"a": 2, "b": 1, "c": 1}  # row 1 and 3: a only; row 2: b, not c
    assert list(found.left_out) == ["a", "b", "c"] and found.rows_used == 2
    assert found.rows_used + sum(found.left_out.values()) == 6


def test_precedence_is_the_order_of_the_checks():
    holds = [("late", mask(4, 0, 1)), ("early", mask(4, 1, 2))]
    assert count_by_first_reason(4, holds).left_out == {"late": 2, "early": 1}
    assert count_by_first_reason(4, holds[::-1]).left_out == {"early": 2, "late": 1}


def test_the_first_row_of_each_reason_is_the_first_it_takes_not_the_first_it_holds():
    asked = []

    def where(reason, rows):
        asked.append((reason, rows.tolist()))
        return f"row {rows[0]}"

    found = count_by_first_reason(8, [("a", mask(8, 2, 4)), ("b", mask(8, 2, 4, 6, 7)), ("none left", mask(8, 4))],
                                  where)
    assert found.first == {"a": "row 2", "b": "row 6"}  # b's rows 2 and 4 went to a
    assert asked == [("a", [2, 4]), ("b", [6, 7])]  # asked once per reason that takes a row, its rows in order
    assert "none left" not in found.left_out


def test_no_first_rows_unless_asked_and_a_reason_twice_adds_up():
    found = count_by_first_reason(5, [("a", mask(5, 0)), ("b", mask(5, 1)), ("a", mask(5, 0, 3))],
                                  lambda reason, rows: f"{reason}@{rows[0]}")
    assert found.left_out == {"a": 2, "b": 1} and found.first == {"a": "a@0", "b": "b@1"}
    assert count_by_first_reason(5, [("a", mask(5, 0))]).first == {}


def test_empty_input_and_no_reason_keep_every_row():
    empty = count_by_first_reason(0, [("a", np.zeros(0, bool))], lambda reason, rows: "never")
    assert empty.keep.shape == (0,) and empty.left_out == {} and empty.first == {} and empty.rows_used == 0
    none = count_by_first_reason(3, [("a", None), ("b", mask(3))])
    assert none.keep.all() and none.left_out == {} and none.rows_used == 3


def test_a_mask_of_another_length_is_refused():
    with pytest.raises(ValueError, match="'a'"):
        count_by_first_reason(3, [("a", mask(4, 1))])

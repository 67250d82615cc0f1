"""The one Markdown table writer every report uses (meta-evaluation, system comparison, CoDI, splits).

Cells: `None` and non-finite floats print as an en dash; floats with `digits` decimals (or a
per-column format); everything else with `str`, with `|` escaped so a cell never splits a row.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

MISSING = "–"
Formatter = Callable[[Any], str]


def format_cell(value: Any, digits: int = 4) -> str:
    """One cell as text (see the module docstring)."""
    if value is None:
        return MISSING
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        value = value.item()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return MISSING
        return f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 4,
                   formats: Sequence[Formatter | None] | None = None) -> str:
    """A GitHub-flavoured Markdown table; `formats[k]` (when given) formats column k instead."""
    if formats is not None and len(formats) != len(header):
        raise ValueError(f"{len(formats)} formats for {len(header)} columns")
    lines = ["| " + " | ".join(format_cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row has {len(row)} cells, the header {len(header)}: {row!r}")
        cells = []
        for k, value in enumerate(row):
            fmt = formats[k] if formats is not None else None
            cells.append(format_cell(value, digits) if fmt is None or value is None else fmt(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def percent(value: float, digits: int = 2) -> str:
    """A fraction as a percentage, e.g. 0.1234 -> '12.34%'."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{100 * value:.{digits}f}%"


def significant_figures(value: float, figures: int = 4) -> str:
    """A number with `figures` significant figures (`%g`)."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value:.{figures}g}"

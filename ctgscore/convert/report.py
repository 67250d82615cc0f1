"""What a conversion read, wrote and dropped (docs/convert.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from scoring.display_names import quoted_list

MAX_EXAMPLES = 3  # row numbers kept per drop reason
#: distinct drop (and, apart, warning) reasons named; a reason may name a value of the data (a key
#: named twice), so past these a new one is counted under `OTHER` with its first rows: a file of
#: distinct keys makes a report of at most this many lines, not one line per row
MAX_REASONS = 100
OTHER = f"other reasons (more than {MAX_REASONS} distinct ones; the first {MAX_REASONS} are named)"
#: fields left out that the JSON summary and report list (all are counted: `ignored_field_count`)
MAX_LISTED_FIELDS = 1000


@dataclass
class ConversionReport:
    """What a conversion read, wrote and dropped (reason -> count, with a few row numbers)."""

    inputs: list[str]
    format: str
    rows_read: int = 0
    rows_written: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[int]] = field(default_factory=dict)  # reason -> first input rows (1-based)
    warnings: dict[str, int] = field(default_factory=dict)  # kept rows with a value set to null
    warning_examples: dict[str, list[int]] = field(default_factory=dict)
    ignored_fields: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    columns_without_values: list[str] = field(default_factory=list)  # fields the input has, null in every row written
    output: str | None = None
    files: list[dict] = field(default_factory=list)  # a Parquet folder's shards: {"file", "first_row"}, in row order

    def drop(self, reason: str, row_number: int) -> None:
        _count(self.dropped, self.examples, reason, row_number)

    def warn(self, reason: str, row_number: int) -> None:
        _count(self.warnings, self.warning_examples, reason, row_number)

    def as_dict(self) -> dict:
        """The report for `--json` and `--report`: every field, the fields left out listed up to
        `MAX_LISTED_FIELDS` (a file whose rows each name a field of their own would list one per
        row) and counted in `ignored_field_count`."""
        data = dict(vars(self))
        data["ignored_fields"] = self.ignored_fields[:MAX_LISTED_FIELDS]
        data["ignored_field_count"] = len(self.ignored_fields)
        return data

    def where(self, row_number: int) -> str:
        """`row N`, and of a Parquet folder the shard that holds it and the row in it (1-based)."""
        shards = [shard for shard in self.files if shard["first_row"] <= row_number]
        if not shards:
            return f"row {row_number}"
        shard = shards[-1]
        return f"row {row_number}: {shard['file']} row {row_number - shard['first_row'] + 1}"

    def _rows(self, numbers: list[int]) -> str:
        if not self.files:
            return "row " + ", ".join(map(str, numbers))
        return ", ".join(map(self.where, numbers))

    def lines(self) -> list[str]:
        out = [f"convert: {self.rows_read} rows read from {', '.join(self.inputs)} ({self.format}), "
               f"{self.rows_written} written" + (f" -> {self.output}" if self.output else "")]
        out.append(f"  columns: {', '.join(self.columns)}")
        for reason, count in sorted(self.dropped.items(), key=lambda item: -item[1]):
            out.append(f"  dropped {count}: {reason} (e.g. {self._rows(self.examples.get(reason, []))})")
        for reason, count in sorted(self.warnings.items(), key=lambda item: -item[1]):
            out.append(f"  warning, {count} row(s) kept: {reason} (e.g. {self._rows(self.warning_examples.get(reason, []))})")
        if self.columns_without_values:
            out.append("  columns left out, no row written has a value in them: "
                       f"{quoted_list(self.columns_without_values, quote=False)}")
        if self.ignored_fields:
            out.append(f"  fields left out (not canonical, not mapped): {quoted_list(self.ignored_fields, quote=False)}")
        return out


def _count(counts: dict[str, int], examples: dict[str, list[int]], reason: str, row_number: int) -> None:
    """One more row under `reason` (under `OTHER` when `MAX_REASONS` others are named already)."""
    if reason not in counts and len(counts) >= MAX_REASONS:
        reason = OTHER
    counts[reason] = counts.get(reason, 0) + 1
    rows = examples.setdefault(reason, [])
    if len(rows) < MAX_EXAMPLES:
        rows.append(row_number)

"""Row metrics: the one contract between metrics and everything that runs them.

A `RowMetric` wraps a pure scorer (e.g. `BARTScorer`) for canonical rows (see
`docs/schema.md`). The CLI, the Ray job and tests all call `score_rows`, which
guarantees: one output row per input row, in input order, each with its score columns filled,
a `skipped` reason or an `error` reason, never lost. A batch that raises is bisected so one bad
row cannot take its neighbours down.

Model metrics may split their work in two (`RowMetric.prepare` / `score_prepared`): the CPU
side turns valid rows into an Arrow table of `int32` token id columns plus what scoring needs
per row, the device side turns that table into results. Their `score_valid(rows)` is
`score_prepared(prepare(rows))`, so every caller takes the one path; the Ray job runs the two
halves in different stages (CPU tasks, then the metric's actors).

The skipped-row rule, per score: each score column needs some columns besides `text`
(`score_needs`: BARTScore's `source` for s_h and `references` for r_h, h_r and F, CTRLEval's
`prefix` for consistency and `attribute` for relevance; by default every score needs all of
`applies_columns`). A row gets every score whose columns it has, present and not null (a list:
not empty). A score it lacks a column for is null, and `skipped` names what each such score
lacked ("r_h, h_r: no references"). A row that gets no score at all (a CTRLEval row in a
summarisation metric's input, say) is skipped: null scores, a null `error` and a `skipped`
reason ("no references" when every score lacks the same column); error-rate checks count
errors only. A failure on a row the metric applies to (undecodable bytes, an empty text, a
blank source) stays an `error`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Sequence

from scoring.cell_types import cell_type_problem, writable_value
from scoring.errors import RETRY_PREFIX, InputError, is_accelerator_error, is_out_of_memory, is_row_failure
from scoring.limits import RowLimits, cell_problem
from scoring.schema import ERROR, ID, SKIPPED, TEXT, WARNING, carried_columns
from scoring.signature import Signature, stable_hash

if TYPE_CHECKING:
    import pyarrow as pa


class RowError(ValueError):
    """A problem with one input row; `score_rows` turns it into that row's error reason."""

    def __init__(self, row_index: int, reason: str):
        super().__init__(f"row {row_index}: {reason}")
        self.row_index = row_index
        self.reason = reason


class RowMetric(ABC):
    """A metric over canonical rows.

    Subclasses set `name`, `required_columns` (the columns the metric reads; they also form
    the incremental-rescoring key) and `output_columns` (float score columns), and implement
    `signature()` and `score_valid(rows)`.
    """

    name: str = ""
    needs: str = ""  # what `ctgscore metrics` says a row needs, when it depends on parameters
    required_columns: tuple[str, ...] = ("text",)
    optional_columns: tuple[str, ...] = ()
    output_columns: tuple[str, ...] = ()
    json_columns: tuple[str, ...] = ()  # columns holding JSON text: their nesting depth is capped
    # per-cell caps checked before `validate` or any tokeniser (`check_row`); they decide which
    # rows are refused, never a number, so they are not part of the signature
    row_limits: RowLimits = RowLimits()
    # per direction or aspect, the columns its score reads (class level, so `ctgscore metrics`
    # lists them without building the metric); empty when every score reads the same columns
    score_inputs: dict[str, tuple[str, ...]] = {}

    @abstractmethod
    def signature(self) -> Signature:
        """Everything that determines this metric's numbers."""

    @abstractmethod
    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Score rows that passed `validate`. Returns one dict per row with the output
        columns, optionally a `warning` string (e.g. truncation), or with an `error` string
        instead of scores for a row found unscorable only while scoring it (its scores are
        dropped; the other rows keep theirs). May raise `RowError` naming the offending row
        (its index within `rows`)."""

    # ----- optional two-stage protocol (module docstring) --------------------------------
    def prepare(self, rows: Sequence[dict[str, Any]]) -> "pa.Table":
        """CPU half: one table row per valid input row, token ids as `list<int32>` (or
        `list<list<int32>>`) columns. Needs the tokenizer only, never the model's weights."""
        raise NotImplementedError(f"metric {self.name} has no prepare step")

    def score_prepared(self, table: "pa.Table") -> list[dict[str, Any]]:
        """Device half: results (as `score_valid` returns them) for the rows of a `prepare`
        table, in order. May raise `RowError` naming a row of the table."""
        raise NotImplementedError(f"metric {self.name} has no prepare step")

    def prepare_rows(self, rows: Sequence[dict[str, Any]]) -> tuple["pa.Table", list[str | None]]:
        """`prepare` that never loses a row: a row whose preparation fails gets the error
        reason bisection would give it and is left out of the table (the others keep their
        order). Returns the table and one reason (or None) per input row."""
        import pyarrow as pa

        # a RowError names its row: that row is set aside and the rest prepared again (a few
        # bad rows in a unit cost a few passes, not one per row)
        reasons: list[str | None] = [None] * len(rows)
        kept = list(range(len(rows)))
        for _ in range(8):
            try:
                table = self.prepare([rows[i] for i in kept])
            except RowError as exc:
                reasons[kept.pop(exc.row_index)] = exc.reason
                continue
            except BaseException as exc:  # noqa: BLE001 - isolate the failing rows, one at a time
                if not is_row_failure(exc):
                    raise
                break
            return table, reasons
        tables, reasons = [], []
        for row in rows:
            try:
                tables.append(self.prepare([row]))
                reasons.append(None)
            except RowError as exc:
                reasons.append(exc.reason)
            except BaseException as exc:  # noqa: BLE001 - that row's error
                if not is_row_failure(exc):
                    raise
                reasons.append(f"{type(exc).__name__}: {exc}")
        table = pa.concat_tables(tables) if tables else self.prepare([])
        return table, reasons

    def score_prepared_rows(self, table: "pa.Table") -> list[dict[str, Any]]:
        """Results for every row of a `prepare` table, failing rows bisected into their own
        error results (as `score_rows` does for `score_valid`)."""
        results: list[dict[str, Any] | None] = [None] * table.num_rows
        self._bisect(lambda indices: self.score_prepared(table.take(indices)), list(range(table.num_rows)), results)
        return results  # type: ignore[return-value]

    def pin_signature(self, signature: str) -> None:
        """Use `signature` (computed where the metric was fully built) for row keys: a
        metric built for `prepare` only has no model to describe."""
        self.__dict__["_signature_string"] = signature

    # ----- shared behaviour -------------------------------------------------------------
    def read_columns(self) -> tuple[str, ...]:
        return tuple(self.required_columns) + tuple(self.optional_columns)

    def applies_columns(self) -> tuple[str, ...]:
        """The columns a row needs for this metric to apply at all: the required ones besides
        `text` (every row has a text; a row without the others is another task's row)."""
        return tuple(column for column in self.required_columns if column != TEXT)

    def score_needs(self) -> dict[str, tuple[str, ...]]:
        """Per score column, the columns besides `text` a row needs for that score (module
        docstring). Default: every score needs `applies_columns`; a metric whose directions or
        aspects read different columns says so per score."""
        needs = self.applies_columns()
        return {column: needs for column in self.output_columns}

    def lacking(self, row: dict[str, Any]) -> dict[str, str]:
        """Per score column `row` cannot get, the first column it needs that the row lacks
        (absent, null or an empty list); empty when every score applies."""
        found: dict[str, str] = {}
        for column, needs in self.score_needs().items():
            missing = next((need for need in needs if is_absent(row.get(need))), None)
            if missing is not None:
                found[column] = missing
        return found

    def missing_column(self, row: dict[str, Any]) -> str | None:
        """A needed column that `row` lacks when it keeps every score from the row (the first
        score's); None when at least one score applies."""
        lacking = self.lacking(row)
        if lacking and len(lacking) == len(self.score_needs()):
            return next(iter(lacking.values()))
        return None

    def score_label(self, column: str) -> str:
        """A score column's short name in messages: its direction or aspect (`bartscore_r_h`
        -> `r_h`)."""
        prefix = f"{self.name}_"
        return column[len(prefix):] if column.startswith(prefix) and column != prefix else column

    def describe_lacking(self, lacking: dict[str, str]) -> str | None:
        """`skipped` text for these left-out scores: "no references" when every score lacks the
        same column, else the scores grouped by what they lack ("r_h, h_r: no references")."""
        if not lacking:
            return None
        by_column: dict[str, list[str]] = {}
        for column, missing in lacking.items():
            by_column.setdefault(missing, []).append(self.score_label(column))
        if len(by_column) == 1 and len(lacking) == len(self.score_needs()):
            return f"no {next(iter(by_column))}"
        return "; ".join(f"{', '.join(labels)}: no {missing}" for missing, labels in by_column.items())

    def partial_reason(self, row: dict[str, Any]) -> str | None:
        """The `skipped` text of a row that gets some of its scores, naming the others and what
        each lacked; None when it gets every score (or none: `skip_reason`)."""
        lacking = self.lacking(row)
        if not lacking or len(lacking) == len(self.score_needs()):
            return None
        return self.describe_lacking(lacking)

    def skip_reason(self, row: dict[str, Any]) -> str | None:
        """Why this metric does not apply to `row` ("no references"), or None when it does
        (module docstring)."""
        column = self.missing_column(row)
        if column is None:
            return None
        return self.describe_lacking(self.lacking(row)) or f"no {column}"

    def precheck(self, row: dict[str, Any], decode_error: str | None) -> dict[str, Any] | None:
        """The result of a row that is not to be scored, or None: skipped when the metric does
        not apply to it (even if another of its columns cannot be decoded), an error when one
        of its values could not be decoded (`scoring.schema.rows_from_table`; a needed column
        that is null only because its bytes are bad is an error, not a skip)."""
        column = self.missing_column(row)
        if column is not None and not (decode_error or "").startswith(f"{column} "):
            return self.skipped_result(self.skip_reason(row) or f"no {column}")
        if decode_error is not None:
            return self.empty_result(decode_error)
        return None

    def checked_columns(self, row: dict[str, Any]) -> tuple[str, ...]:
        """The required columns `validate` checks on `row`: all but those only the scores the row
        does not get need (an absent `references` is no error for a row scored on s_h)."""
        needs = self.score_needs()
        lacking = self.lacking(row)
        wanted = {need for column, columns in needs.items() if column not in lacking for need in columns}
        mentioned = {need for columns in needs.values() for need in columns}
        return tuple(c for c in self.required_columns if c in wanted or c not in mentioned)

    def validate(self, row: dict[str, Any]) -> str | None:
        """Reason this row cannot be scored, or None. Default: every required column is
        present, not null, and (for strings) not blank; a column only the scores the row does
        not get need is not checked (`checked_columns`)."""
        for column in self.checked_columns(row):
            if column not in row:
                return f"missing field '{column}'"
            value = row[column]
            if value is None:
                return f"null field '{column}'"
            if isinstance(value, str) and not value.strip():
                return f"empty field '{column}'"
            if isinstance(value, (list, tuple)) and len(value) == 0:
                return f"empty field '{column}'"
        return None

    def check_types(self, row: dict[str, Any]) -> str | None:
        """Reason a value of `row` is not of its column's type, or None: the columns the metric
        reads and the carried ones (`scoring.cell_types`: an int text, a string of references,
        a lone surrogate). Rows read from Parquet always pass; rows given as Python values may
        not, and must not reach `skip_reason`, `validate` or a tokeniser then."""
        columns = [*self.read_columns(), *(c for c in carried_columns(row) if c != ID)]
        return cell_type_problem(row, columns, self.json_columns, self.row_limits)

    def check_row(self, row: dict[str, Any]) -> str | None:
        """Reason this row cannot be scored, or None: first the values' types (`check_types`),
        then the per-cell caps (`row_limits`, `scoring.limits.cell_problem`: size, list length,
        JSON depth), so no parser or tokeniser sees an oversized cell, then `validate`. Every
        caller (`score_rows`, the job's CPU stage) applies this one check."""
        return self.check_types(row) or self._check_values(row)

    def _check_values(self, row: dict[str, Any]) -> str | None:
        """`check_row` after the type check: the per-cell caps, then `validate`."""
        return cell_problem(row, self.read_columns(), self.row_limits, self.json_columns) or self.validate(row)

    def row_key(self, row: dict[str, Any]) -> str:
        """Hash of the signature and the row content this metric reads: equal keys mean the
        stored score can be reused (nightly incremental re-scoring)."""
        content = {column: _jsonable(row.get(column)) for column in self.read_columns()}
        return stable_hash([self.signature_string(), content], length=24)

    def signature_string(self) -> str:
        """`str(self.signature())`, computed once per metric object."""
        cached = self.__dict__.get("_signature_string")
        if cached is None:
            cached = self.__dict__["_signature_string"] = str(self.signature())
        return cached

    def empty_result(self, error: str | None) -> dict[str, Any]:
        result: dict[str, Any] = {column: None for column in self.output_columns}
        result[ERROR] = error
        result[WARNING] = None
        result[SKIPPED] = None
        return result

    def skipped_result(self, reason: str) -> dict[str, Any]:
        """The result of a row this metric does not apply to: null scores, no error."""
        result = self.empty_result(None)
        result[SKIPPED] = reason
        return result

    def score_rows(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Score canonical rows; never drops a row. See module docstring."""
        results: list[dict[str, Any] | None] = [None] * len(rows)
        valid_indices = []
        for index, row in enumerate(rows):
            mistyped = self.check_types(row)  # before `skip_reason`, which reads the values
            if mistyped is not None:
                results[index] = self.empty_result(mistyped)
                continue
            skip = self.skip_reason(row)
            if skip is not None:
                results[index] = self.skipped_result(skip)
                continue
            reason = self._check_values(row)  # `check_row`, its type check done above
            if reason is not None:
                results[index] = self.empty_result(reason)
            else:
                valid_indices.append(index)
        self._bisect(lambda indices: self.score_valid([rows[i] for i in indices]), valid_indices, results)
        for index in valid_indices:  # a row scored on some of its scores: what the others lacked
            result = results[index]
            if result is not None and result[ERROR] is None and result[SKIPPED] is None:
                result[SKIPPED] = self.partial_reason(rows[index])
        return [result for result in results]  # type: ignore[misc]

    def output_schema(self, input_names) -> "pa.Schema":
        """Arrow schema of this metric's output for inputs with these column names (see
        `scoring.schema.output_schema`; every shard gets the same layout)."""
        from scoring.schema import output_schema

        return output_schema(self.output_columns, carried_columns(input_names))

    def output_table(self, rows: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]] | None = None) -> "pa.Table":
        """Output rows as an Arrow table (`scoring.schema.output_table`): scores `rows` unless
        their `results` are given. Carried columns are those present in the rows."""
        from scoring.schema import output_table

        if results is None:
            results = self.score_rows(rows)
        present = carried_columns({name for row in rows for name in row})
        # a carried value of another type (or holding a lone surrogate) is written as null: its
        # row's error names the field (`check_types`)
        carried = {name: [writable_value(name, row.get(name)) for row in rows] for name in present if name != ID}
        for index, row in enumerate(rows):
            problem = cell_type_problem({ID: row.get(ID)}, (ID,))
            if problem is not None:  # the key of the output row: refused, as a shard with such an id is
                raise InputError(f"row {index}: {problem}")
        return output_table(
            [row.get("id") for row in rows], results, self.output_columns,
            self.signature_string(), [self.row_key(row) for row in rows], carried,
        )

    def _bisect(self, score, indices: list[int], results: list) -> None:
        """`score(indices)` (one result per index), bisecting failures down to single rows.

        Nothing is re-scored inside an `except` block: only the failure's text leaves it, so the
        failed attempt's frames (and the device tensors they hold) are freed before the halves
        run. An out-of-memory on a single row is no property of the row: its error is marked
        `RETRY_PREFIX`, so the job does not keep it for good (the next run scores it again)."""
        pending = [indices]
        while pending:
            indices = pending.pop()
            if not indices:
                continue
            bad_row, failure = None, None
            try:
                scored = score(indices)
            except RowError as exc:
                bad_row, failure = indices[exc.row_index], exc.reason
            except BaseException as exc:  # noqa: BLE001 - any failure is isolated by bisection
                if not is_row_failure(exc) or is_accelerator_error(exc):
                    raise  # the device is lost, not the row: the process must end (never a row error)
                failure = f"{type(exc).__name__}: {exc}"
                if is_out_of_memory(exc):
                    failure = RETRY_PREFIX + failure
            if bad_row is not None:
                results[bad_row] = self.empty_result(failure)
                pending.append([i for i in indices if i != bad_row])
                continue
            if failure is not None:
                if len(indices) == 1:
                    results[indices[0]] = self.empty_result(failure)
                else:
                    middle = len(indices) // 2
                    pending += [indices[middle:], indices[:middle]]  # the first half runs first
                continue
            if len(scored) != len(indices):
                raise RuntimeError(
                    f"metric {self.name} returned {len(scored)} results for {len(indices)} rows"
                )
            for index, values in zip(indices, scored):
                if values.get(ERROR):  # the metric found this row unscorable while scoring it
                    results[index] = self.empty_result(values[ERROR])
                    continue
                result = {column: values.get(column) for column in self.output_columns}
                result[ERROR] = None
                result[WARNING] = values.get(WARNING)
                result[SKIPPED] = values.get(SKIPPED)  # the scores this row does not get, and why
                results[index] = result


def is_absent(value: Any) -> bool:
    """Whether a needed column's value counts as missing: null, or an empty list."""
    return value is None or (isinstance(value, (list, tuple)) and len(value) == 0)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, tuple) and len(item) == 2 for item in value):
            return {str(k): _jsonable(v) for k, v in sorted(value)}  # pyarrow map column
        return [_jsonable(item) for item in value]
    return value

"""Row metrics: the one contract between metrics and everything that runs them.

A `RowMetric` wraps a pure scorer (e.g. `BARTScorer`) for canonical rows (see
`../shared/spec/schema.md`). The CLI, the Ray job and tests all call `score_rows`, which
guarantees: one output row per input row, in input order, each with its score columns filled
or an `error` reason, never both lost. A batch that raises is bisected so one bad row cannot
take its neighbours down.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Sequence

from scoring.signature import Signature, stable_hash

if TYPE_CHECKING:
    import pyarrow as pa

ERROR_COLUMN = "error"
WARNING_COLUMN = "warning"
SIGNATURE_COLUMN = "signature"
ROW_KEY_COLUMN = "row_key"
# input columns carried into every output row, for analysis (meta-evaluation)
CARRIED_COLUMNS = ("id", "dataset", "system", "doc_id")
CARRIED_PREFIX = "human_"


def is_carried(name: str) -> bool:
    """Whether an input column is kept in output rows: id, dataset, system, doc_id, human_*."""
    return name in CARRIED_COLUMNS or name.startswith(CARRIED_PREFIX)


def carried_columns(names) -> list[str]:
    """The carried columns among `names`, in one canonical order: id, dataset, system,
    doc_id, then human_* sorted (the same in every output, whatever the input order)."""
    names = set(names)
    return [n for n in CARRIED_COLUMNS if n in names] + sorted(n for n in names if n.startswith(CARRIED_PREFIX))


def carried_type(name: str) -> "pa.DataType":
    """Output type of a carried column: float64 for human judgments, string otherwise."""
    import pyarrow as pa

    return pa.float64() if name.startswith(CARRIED_PREFIX) else pa.string()


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
    required_columns: tuple[str, ...] = ("text",)
    optional_columns: tuple[str, ...] = ()
    output_columns: tuple[str, ...] = ()

    @abstractmethod
    def signature(self) -> Signature:
        """Everything that determines this metric's numbers."""

    @abstractmethod
    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Score rows that passed `validate`. Returns one dict per row with the output
        columns, optionally a `warning` string (e.g. truncation). May raise `RowError`
        naming the offending row (its index within `rows`)."""

    # ----- shared behaviour -------------------------------------------------------------
    def read_columns(self) -> tuple[str, ...]:
        return tuple(self.required_columns) + tuple(self.optional_columns)

    def validate(self, row: dict[str, Any]) -> str | None:
        """Reason this row cannot be scored, or None. Default: every required column is
        present, not null, and (for strings) not blank."""
        for column in self.required_columns:
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

    def empty_result(self, error: str) -> dict[str, Any]:
        result: dict[str, Any] = {column: None for column in self.output_columns}
        result[ERROR_COLUMN] = error
        result[WARNING_COLUMN] = None
        return result

    def score_rows(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Score canonical rows; never drops a row. See module docstring."""
        results: list[dict[str, Any] | None] = [None] * len(rows)
        valid_indices = []
        for index, row in enumerate(rows):
            reason = self.validate(row)
            if reason is not None:
                results[index] = self.empty_result(reason)
            else:
                valid_indices.append(index)
        self._score_bisecting(rows, valid_indices, results)
        return [result for result in results]  # type: ignore[misc]

    def output_schema(self, input_names) -> "pa.Schema":
        """Arrow schema of `output_records` for inputs with these column names (carried
        columns keep string/float types; every shard gets the same schema)."""
        import pyarrow as pa

        fields = []
        for name in carried_columns(input_names):
            fields.append(pa.field(name, carried_type(name)))
        fields += [pa.field(column, pa.float64()) for column in self.output_columns]
        fields += [pa.field(c, pa.string()) for c in (ERROR_COLUMN, WARNING_COLUMN, SIGNATURE_COLUMN, ROW_KEY_COLUMN)]
        return pa.schema(fields)

    def output_records(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Full output rows: carried input columns, score columns, error, warning, the run's
        signature and each row's incremental key. One per input row, in order."""
        signature = self.signature_string()
        records = []
        for row, result in zip(rows, self.score_rows(rows)):
            record = {name: row[name] for name in carried_columns(row)}
            record.update(result)
            record[SIGNATURE_COLUMN] = signature
            record[ROW_KEY_COLUMN] = self.row_key(row)
            records.append(record)
        return records

    def _score_bisecting(self, rows, indices: list[int], results: list) -> None:
        if not indices:
            return
        try:
            scored = self.score_valid([rows[i] for i in indices])
        except RowError as exc:
            bad = indices[exc.row_index]
            results[bad] = self.empty_result(exc.reason)
            rest = [i for i in indices if i != bad]
            self._score_bisecting(rows, rest, results)
            return
        except Exception as exc:  # noqa: BLE001 - any failure is isolated by bisection
            if len(indices) == 1:
                results[indices[0]] = self.empty_result(f"{type(exc).__name__}: {exc}")
                return
            middle = len(indices) // 2
            self._score_bisecting(rows, indices[:middle], results)
            self._score_bisecting(rows, indices[middle:], results)
            return
        if len(scored) != len(indices):
            raise RuntimeError(
                f"metric {self.name} returned {len(scored)} results for {len(indices)} rows"
            )
        for index, values in zip(indices, scored):
            result = {column: values.get(column) for column in self.output_columns}
            result[ERROR_COLUMN] = None
            result[WARNING_COLUMN] = values.get(WARNING_COLUMN)
            results[index] = result


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

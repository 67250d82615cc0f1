"""The canonical table schemas: one place for column names, input types and output rows.

Input (a generation dump, one or more Parquet shards): `id` and `text` are always required;
the other canonical columns are optional and typed (see `docs/schema.md`). Output (one row per
input row and metric run): `id`, the metric's float score columns, `error`, `warning`,
`skipped` (why a row the metric does not apply to was left out), `signature`, `row_key`, then
the carried input columns (`dataset`, `system`, `doc_id`, `human_*`). Every writer (library,
CLI, Ray job, CoDI) builds its output through `output_table`, so all outputs share one layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    import pyarrow as pa

ID = "id"
TEXT = "text"
ERROR = "error"
WARNING = "warning"
SKIPPED = "skipped"
SIGNATURE = "signature"
ROW_KEY = "row_key"
HUMAN_PREFIX = "human_"

REQUIRED_COLUMNS = (ID, TEXT)
STRING_COLUMNS = ("id", "dataset", "doc_id", "system", "source", "prefix", "attribute", "text", "constraint")
LIST_COLUMNS = ("references",)  # list<string>
MAP_COLUMNS = ("attributes",)  # map<string,string>
CARRIED_COLUMNS = (ID, "dataset", "system", "doc_id")  # kept in every output row, for analysis
META_COLUMNS = (ERROR, WARNING, SKIPPED, SIGNATURE, ROW_KEY)  # per-row bookkeeping of a metric run


def is_human(name: str) -> bool:
    return name.startswith(HUMAN_PREFIX)


def is_carried(name: str) -> bool:
    """Whether an input column is kept in output rows: id, dataset, system, doc_id, human_*."""
    return name in CARRIED_COLUMNS or is_human(name)


def carried_columns(names: Iterable[str]) -> list[str]:
    """The carried columns among `names`, in one canonical order: id, dataset, system,
    doc_id, then human_* sorted (the same in every output, whatever the input order)."""
    names = set(names)
    return [n for n in CARRIED_COLUMNS if n in names] + sorted(n for n in names if is_human(n))


def carried_type(name: str) -> "pa.DataType":
    """Output type of a carried column: float64 for human judgments, string otherwise."""
    import pyarrow as pa

    return pa.float64() if is_human(name) else pa.string()


def is_data_file(name: str) -> bool:
    """Whether a path under a scores folder is a Parquet data file: names starting with "_"
    or "." are the job's own bookkeeping (the id index) or temporary files, skipped as
    Parquet dataset readers skip them."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return base.endswith(".parquet") and not base.startswith((".", "_"))


def is_score_column(name: str) -> bool:
    """Whether a column of an output table is a metric's score: not carried, not per-row
    bookkeeping, not internal (a leading underscore)."""
    return not (is_carried(name) or name in META_COLUMNS or name.startswith("_"))


def visible_columns(names) -> list[str]:
    """The column names a message may list: internal ones (a leading underscore, such as BLEU's
    `_bleu_stat_*` sufficient statistics) are left out."""
    return [str(n) for n in names if not str(n).startswith("_")]


def expected_input_type(column: str, dtype: "pa.DataType") -> str | None:
    """None when `dtype` fits the canonical type of input `column`, else the expected type's
    name (for the error message). Unknown columns accept any type."""
    import pyarrow as pa

    if pa.types.is_dictionary(dtype):  # dictionary-encoded (a pandas category): its values decide
        dtype = dtype.value_type
    if pa.types.is_null(dtype):  # every value null (pandas writes an all-None column so): fits any type
        return None
    if column in STRING_COLUMNS:
        return None if (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)) else "string"
    if column in LIST_COLUMNS:
        ok = (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)) and (
            pa.types.is_string(dtype.value_type) or pa.types.is_large_string(dtype.value_type)
        )
        return None if ok else "list<string>"
    if column in MAP_COLUMNS:
        return None if pa.types.is_map(dtype) else "map<string,string>"
    if is_human(column):
        return None if (pa.types.is_floating(dtype) or pa.types.is_integer(dtype)) else "float64"
    return None


def canonical_type(column: str) -> "pa.DataType | None":
    """The Arrow type of canonical input `column` (None for a column of no canonical type)."""
    import pyarrow as pa

    if column in STRING_COLUMNS:
        return pa.string()
    if column in LIST_COLUMNS:
        return pa.list_(pa.string())
    if column in MAP_COLUMNS:
        return pa.map_(pa.string(), pa.string())
    return pa.float64() if is_human(column) else None


def typed_nulls(table: "pa.Table") -> "pa.Table":
    """`table` with each canonical column of Arrow type null (all values null, as pandas writes
    an all-None column) given its canonical type, so shards that differ only there concatenate."""
    import pyarrow as pa

    for index, field in enumerate(table.schema):
        wanted = canonical_type(field.name)
        if pa.types.is_null(field.type) and wanted is not None:
            table = table.set_column(index, pa.field(field.name, wanted), pa.nulls(table.num_rows, wanted))
    return table


def wrong_type(columns, arrow_schema: "pa.Schema") -> tuple[str, "pa.DataType", str] | None:
    """The first of `columns` (those present in `arrow_schema`) whose type is not its canonical
    input type: (column, its type, the expected type's name); None when all fit."""
    for column in columns:
        if column in arrow_schema.names:
            expected = expected_input_type(column, arrow_schema.field(column).type)
            if expected is not None:
                return column, arrow_schema.field(column).type, expected
    return None


def output_schema(score_columns: Sequence[str], carried: Sequence[str]) -> "pa.Schema":
    """Arrow schema of one metric run's output: id, scores (float64), error, warning, skipped,
    signature, row_key, then the carried columns (canonical order, `id` not repeated)."""
    import pyarrow as pa

    fields = [pa.field(ID, pa.string())]
    fields += [pa.field(column, pa.float64()) for column in score_columns]
    fields += [pa.field(column, pa.string()) for column in META_COLUMNS]
    fields += [pa.field(c, carried_type(c)) for c in carried_columns(carried) if c != ID]
    return pa.schema(fields)


def _score_array(values: list) -> "pa.Array":
    import pyarrow as pa

    try:
        return pa.array(values, type=pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
        bad = next((i for i, v in enumerate(values) if v is not None and not isinstance(v, (int, float))), None)
        raise TypeError(f"score value {values[bad]!r} at row {bad} is not a number") from exc


def output_table(
    ids: Sequence[str],
    results: Sequence[Mapping[str, Any]],
    score_columns: Sequence[str],
    signature: str,
    row_keys: Sequence[str],
    carried_values: Mapping[str, Sequence[Any]] | None = None,
) -> "pa.Table":
    """One metric run's output rows as an Arrow table with `output_schema`.

    `results` are `RowMetric.score_rows` dicts (score columns, `error`, `warning`, `skipped`);
    `carried_values` maps carried column names to one value per row (absent columns are left
    out, so a shard without `system` has no `system` column)."""
    import pyarrow as pa

    carried_values = dict(carried_values or {})
    carried = [c for c in carried_columns(carried_values) if c != ID]
    schema = output_schema(score_columns, carried)
    columns = [pa.array(list(ids), type=pa.string())]
    columns += [_score_array([result.get(c) for result in results]) for c in score_columns]
    columns.append(pa.array([result.get(ERROR) for result in results], type=pa.string()))
    columns.append(pa.array([result.get(WARNING) for result in results], type=pa.string()))
    columns.append(pa.array([result.get(SKIPPED) for result in results], type=pa.string()))
    columns.append(pa.array([signature] * len(ids), type=pa.string()))
    columns.append(pa.array(list(row_keys), type=pa.string()))
    for column in carried:
        columns.append(pa.array(list(carried_values[column]), type=carried_type(column)))
    return pa.Table.from_arrays(columns, schema=schema)


def _decode_column(column: "pa.ChunkedArray", name: str, errors: list[str | None]) -> list[Any]:
    """A column as Python values; values that cannot be converted (invalid UTF-8 in a string
    column, say) become None and their row's error names the column."""
    try:
        return column.to_pylist()
    except (UnicodeDecodeError, ValueError, TypeError, OverflowError):
        pass
    values: list[Any] = []
    for row, scalar in enumerate(_scalars(column)):
        try:
            values.append(scalar.as_py())
        except UnicodeDecodeError:
            values.append(None)
            errors[row] = errors[row] or f"{name} is not valid UTF-8"
        except (ValueError, TypeError, OverflowError) as exc:
            values.append(None)
            errors[row] = errors[row] or f"{name}: value cannot be read ({type(exc).__name__})"
    return values


def _scalars(column: "pa.ChunkedArray"):
    for chunk in column.chunks:
        for index in range(len(chunk)):
            yield chunk[index]


def rows_from_table(table: "pa.Table") -> tuple[list[dict[str, Any]], list[str | None]]:
    """Rows of an Arrow table as dicts, column by column, plus one error per row (None when the
    row converted cleanly). A value that cannot be converted never fails the batch: it becomes
    None and its row's error says which column (e.g. "text is not valid UTF-8")."""
    errors: list[str | None] = [None] * table.num_rows
    values = {name: _decode_column(table.column(name), name, errors) for name in table.column_names}
    rows = [{name: values[name][index] for name in table.column_names} for index in range(table.num_rows)]
    return rows, errors


def id_problem(ids) -> str | None:
    """What is wrong with a shard's `id` column (an Arrow array), or None: a null id, an id
    that is not valid UTF-8, the same id twice (the one place these rules live)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_decode()
    if not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)):
        return f"field 'id' has type {ids.type}, expected string"
    if ids.null_count:
        row = pc.index(pc.is_null(ids), True).as_py()
        return f"row {row}: null field 'id' (every row needs an id)"
    try:
        ids.validate(full=True)
    except pa.ArrowInvalid:
        from scoring.utf8_text import first_undecodable

        row = first_undecodable(ids)
        return "field 'id' is not valid UTF-8" if row is None else f"row {row}: field 'id' is not valid UTF-8"
    if len(pc.unique(ids)) != len(ids):
        seen: dict[str, int] = {}
        for row, value in enumerate(ids.to_pylist()):
            if value in seen:
                return f"rows {seen[value]} and {row}: duplicate id {value!r} (ids must be unique; this one appears more than once)"
            seen[value] = row
    return None

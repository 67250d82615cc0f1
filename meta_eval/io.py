"""Load per-row scores and human judgments for meta-evaluation.

Two inputs are understood (`docs/meta_eval.md`, "Input"); problems with them raise
`scoring.errors.InputError` naming the file, column or row:

* the scoring job's output Parquet (a file, a folder or an `s3://` prefix, any number of
  shards): `id`, score columns, `error`, `signature` and the carried `dataset`, `system`,
  `doc_id`, `human_*` columns. Rows with a non-null `error` are dropped and counted.
* the metric-preference-checklist CSVs (stored metric columns + human ratings), normalised to
  the same layout: human aspects renamed `human_<aspect>`, the system column renamed `system`,
  a `doc_id` built from the item key, and the stored `*_cat` quality groups kept.
"""

from __future__ import annotations

import io
import pathlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from meta_eval.checklist import BINARY, CATEGORIES
from scoring import schema
from scoring.display_names import quoted, quoted_list
from scoring.errors import InputError
from scoring.utf8_text import decode_utf8

# Input columns that a score table may still hold but that are never scores.
_INPUT_COLUMNS = set(schema.STRING_COLUMNS) | set(schema.LIST_COLUMNS) | set(schema.MAP_COLUMNS)

# Known checklist files: system column, doc key columns, aspect -> stored category column,
# and the Easy / Hard pairs the paper's notebooks used (checklist/SOURCE.md "Systems").
_USR_ASPECTS = {"Understandable": "understandability_cat", "Natural": "natural_cat",
                "MaintainsContext": "coherence_cat", "Engaging": "engage_cat",
                "UsesKnowledge": "groundedness_cat", "Overall": "overall_cat"}
_TC_EASY = [(f"Nucleus Decoding (p = {p})", ref) for p in ("0.5", "0.3", "0.7")
            for ref in ("New Human Generated", "Original Ground Truth")]
_TC_HARD = [("Original Ground Truth", "New Human Generated"),
            ("Nucleus Decoding (p = 0.5)", "Nucleus Decoding (p = 0.7)")]
CHECKLIST_FILES = {
    "usr_persona_chat": dict(
        system="model", doc=["context"], aspects=_USR_ASPECTS,
        easy=[(s, r) for s in ("Seq2Seq", "KV-MemNN", "Language Model")
              for r in ("New Human Generated", "Original Ground Truth")],
        hard=[("Original Ground Truth", "New Human Generated"), ("KV-MemNN", "Seq2Seq")]),
    "usr_topical_chat": dict(system="model", doc=["context"], aspects=_USR_ASPECTS,
                             easy=_TC_EASY, hard=_TC_HARD),
    "unieval_topical_chat": dict(
        system="system_id", doc=["source"],
        aspects={"understandability": "understandability_cat", "naturalness": "natural_cat",
                 "coherence": "coherence_cat", "engagingness": "engage_cat",
                 "groundedness": "groundedness_cat", "overall": "overall_cat"},
        easy=_TC_EASY, hard=_TC_HARD),
    "ctrl_topic": dict(system="model", doc=["attribute", "prefix"],
                       aspects={"rating": "fluency_cat", "relevance_bin": BINARY},
                       easy=[("BCR", "CTRL"), ("BCR", "WD")], hard=[("CTRL", "WD")]),
    "ctrleval_topic": dict(system=None, doc=["attribute", "prefix"],
                           aspects={"coherence": "coherence_cat", "consistency": "consisten_cat",
                                    "relevance": "relevance_cat"}, easy=None, hard=None),
}
METRIC_PREFIXES = ("perplexity", "bleu", "rouge", "meteor_", "bleurt_", "bert_", "ctc_")
METRIC_SUFFIXES = ("_unieval", "_met")
LOWER_IS_BETTER = {"perplexity"}
LOWER_IS_BETTER_PREFIXES = ("perplexity",)  # e.g. `perplexity`, `perplexity_gpt2`


def default_lower_is_better(columns) -> set[str]:
    """Columns where lower is better unless told otherwise (the one place this rule lives):
    perplexity and its variants, also as `<run>.perplexity` when several runs produce it."""
    return set(LOWER_IS_BETTER) | {c for c in columns if str(c).split(".")[-1].startswith(LOWER_IS_BETTER_PREFIXES)}


@dataclass(frozen=True)
class RowFiles:
    """Where the rows of a frame read from metric runs were stored: the row key (`id`, or `id`
    and `shard`) of each row of the run with the most rows, in file order, and that run's
    (file, rows) in order. Looked up only for the rows a reason leaves out."""

    index: pd.Index
    file_rows: tuple

    def place(self, frame: pd.DataFrame, rows: np.ndarray) -> tuple[str, int] | None:
        """The first of `rows` (rows of `frame`) in file order, as (file, row in it from 0), or
        None when the run lacks them all."""
        from scoring.job_output import SHARD

        ids = frame["id"].to_numpy()[rows]
        keys = pd.MultiIndex.from_arrays([ids, frame[SHARD].to_numpy()[rows]]) if self.index.nlevels == 2 \
            else pd.Index(ids)
        positions = self.index.get_indexer(keys)
        found = positions[positions >= 0]
        if not len(found):
            return None
        position = int(found.min())
        starts = np.cumsum([0] + [n for _, n in self.file_rows])
        k = int(np.searchsorted(starts, position, "right")) - 1
        return self.file_rows[k][0], position - int(starts[k])

    def where(self, frame: pd.DataFrame, column: str, rows: np.ndarray, source: str) -> str:
        """The first of `rows` (rows of `frame`) in file order, as "FILE: column C, row N" (N
        counted from 0 in that file: `unreadable_where`); a row that run lacks, by its `id`."""
        from scoring.utf8_text import unreadable_where

        found = self.place(frame, rows)
        if found is None:
            return unreadable_where(source, column, int(rows[0]), frame["id"].iloc)
        return unreadable_where(found[0], column, found[1])


@dataclass
class Table:
    """Rows ready for meta-evaluation plus what is known about their columns."""

    frame: pd.DataFrame
    humans: list[str]
    metrics: list[str]
    source: str
    n_input_rows: int = 0
    n_error_rows: int = 0
    n_skipped_rows: int = 0  # rows some metric run does not apply to (not errors)
    cat_columns: dict[str, str | None] = field(default_factory=dict)
    lower_is_better: set[str] = field(default_factory=lambda: set(LOWER_IS_BETTER))
    easy_pairs: list[tuple[str, str]] | None = None
    hard_pairs: list[tuple[str, str]] | None = None
    runs: dict = field(default_factory=dict)  # per metric run: rows, rows_error, signatures
    # score columns left out of the metrics picked by default because they hold no numbers:
    # column -> its type (a string, decimal, list or boolean column says so instead of vanishing)
    not_numeric: dict[str, str] = field(default_factory=dict)
    # rows read but dropped before `frame` because a key is not valid UTF-8 (`drop_unreadable_keys`)
    keys_left_out: dict[str, int] = field(default_factory=dict)  # reason -> rows
    keys_left_out_first: dict[str, str] = field(default_factory=dict)  # reason -> where its first row was
    row_files: RowFiles | None = None  # where the rows were stored (scores read from metric runs)

    @property
    def has_systems(self) -> bool:
        return "system" in self.frame and self.frame["system"].notna().any()


def _score_columns(columns) -> list[str]:
    """Metric output columns (`scoring.schema.is_score_column`), leaving out input columns."""
    return [c for c in columns if schema.is_score_column(c) and c not in _INPUT_COLUMNS]


def _read_parquet_files(path: str) -> tuple[pd.DataFrame, dict, RowFiles, dict[str, RowFiles]]:
    """The metric runs under `path` (`scoring.job_output`: the manifest's current outputs, runs
    kept apart by label, score columns and signature), joined on `id`, one row per id (on `id`
    and `shard`, one row per both, where a job's input held an id in several shards: those
    are separate rows, as the job scored them, and a `shard` column tells them apart). A row's
    `error` only blanks the score columns of its own metric run; a score column several runs
    produce is named `<run>.<column>`. Returns the frame and per-run facts (rows, errors,
    signatures), keyed by the run's score columns (by run name where those repeat), and where the
    rows were stored (`RowFiles`, from the run with the most rows), and, per score column, where
    the rows of the run that wrote it were stored."""
    from scoring.job_output import SHARD, combined, output_names, read_runs

    runs_read = read_runs(path)
    names = output_names((run.name, _score_columns(run.frame.columns)) for run in runs_read)
    keys = [",".join(_score_columns(run.frame.columns)) or "(no score columns)" for run in runs_read]
    carried_parts, score_parts, errors, skips, runs, column_files = [], [], [], [], {}, {}
    for run, key in zip(runs_read, keys):
        frame = run.frame
        score_cols = _score_columns(frame.columns)
        error = frame["error"].notna() if "error" in frame else pd.Series(False, index=frame.index)
        scores = frame[list(score_cols)].copy()
        numeric = [c for c in score_cols if pd.api.types.is_numeric_dtype(scores[c])]
        if numeric and error.any():
            for col in numeric:
                scores[col] = scores[col].astype(float).where(~error, np.nan)
        scores.columns = [names[(run.name, c)] for c in score_cols]
        score_parts.append(scores)
        column_files.update({name: RowFiles(frame.index, run.file_rows) for name in scores.columns})
        carried_parts.append(frame[[c for c in frame.columns if c not in score_cols
                                    and c not in schema.META_COLUMNS]])
        errors.append(error)
        skipped = frame["skipped"].notna() if "skipped" in frame else pd.Series(False, index=frame.index)
        skips.append(skipped)
        label = key if keys.count(key) == 1 else run.name
        runs[label] = {"rows": int(len(frame)), "rows_error": int(error.sum()), "rows_skipped": int(skipped.sum()),
                       "signatures": run.signatures}
    carried = combined(carried_parts)
    merged = carried.join(score_parts, how="outer") if score_parts else carried
    any_error = pd.concat(errors, axis=1).fillna(False).astype(bool).any(axis=1)
    merged["error"] = any_error.reindex(merged.index, fill_value=False)
    any_skipped = pd.concat(skips, axis=1).fillna(False).astype(bool).any(axis=1)
    merged["skipped"] = any_skipped.reindex(merged.index, fill_value=False)
    merged.index.names = ["id", SHARD] if merged.index.nlevels == 2 else ["id"]
    merged = merged.reset_index()
    largest = max(runs_read, key=lambda run: len(run.frame))  # the first of those with the most rows
    return merged, runs, RowFiles(largest.frame.index, largest.file_rows), column_files


def _numeric_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])
            and not pd.api.types.is_bool_dtype(frame[c])]


def read_scores(path: str, humans: list[str] | None = None, metrics: list[str] | None = None) -> Table:
    """Read the scoring job's output (file, folder or `s3://` prefix) into a `Table`.

    Rows with an error keep their human columns but their metric run's scores become NaN, so
    they drop out of every statistic on that metric; `n_error_rows` counts rows with any error.
    """
    frame, runs, row_files, column_files = _read_parquet_files(str(path))
    n_input = len(frame)
    n_error = int(frame.pop("error").sum())
    n_skipped = int(frame.pop("skipped").sum())
    frame, left_out, first = drop_unreadable_keys(frame, str(path), row_files)
    normalise_keys(frame, source=str(path))
    humans = humans or [c for c in frame.columns if c.startswith("human_")]
    not_numeric: dict[str, str] = {}
    if metrics is None:
        from scoring.job_output import SHARD

        metrics = _score_columns(_numeric_columns(frame))
        not_numeric = {c: str(frame[c].dtype) for c in _score_columns(frame.columns)
                       if c not in metrics and c != SHARD and not c.startswith("human_")}
    _check_columns(frame, humans + metrics, str(path), {**{h: row_files for h in humans}, **column_files})
    return Table(frame=frame, humans=list(humans), metrics=list(metrics), source=str(path),
                 n_input_rows=n_input, n_error_rows=n_error, n_skipped_rows=n_skipped, runs=runs,
                 cat_columns={h: None for h in humans}, lower_is_better=default_lower_is_better(metrics),
                 not_numeric=not_numeric, keys_left_out=left_out, keys_left_out_first=first, row_files=row_files)


KEY_COLUMNS = ("doc_id", "system", "dataset")


def drop_unreadable_keys(frame: pd.DataFrame, source: str,
                         row_files: RowFiles | None = None) -> tuple[pd.DataFrame, dict[str, int], dict[str, str]]:
    """The frame without the rows whose key (dataset, system, then doc_id: the first that applies
    counts the row) is a string that is not valid UTF-8, their count per reason
    (`meta_eval.row_account.unreadable_reason`) and where the first row of each reason was
    (its file and row there by `row_files`, as the other reasons are named; else `source`, the
    column and the row's id). The rows left keep their order (index reset)."""
    from scoring.utf8_text import unreadable_counts, unreadable_mask

    unreadable = []  # (column, rows whose key is not UTF-8), in precedence order
    for col in [c for c in reversed(KEY_COLUMNS) if c in frame]:
        try:
            bad = unreadable_mask(frame[col])
        except (TypeError, ValueError):  # not a column Arrow reads as strings: nothing to decode
            bad = None
        if bad is not None:
            unreadable.append((col, bad))
    if not unreadable:
        return frame, {}, {}
    by_file = None
    if row_files is not None and "id" in frame:
        def by_file(column, rows):
            return row_files.where(frame, column, rows, source)
    found = unreadable_counts(len(frame), unreadable, source, frame["id"].iloc if "id" in frame else None, where=by_file)
    return frame.loc[found.keep].reset_index(drop=True), dict(found.left_out), dict(found.first)


def normalise_keys(frame: pd.DataFrame, columns=KEY_COLUMNS, source: str = "scores") -> pd.DataFrame:
    """Key columns as objects with every missing key (null, NaN, blank string:
    `meta_eval.row_account.is_missing`) as None, in place; returns the frame. A key that is no
    text (invalid UTF-8) is an `InputError` naming `source`, the column and the row (`read_scores`
    drops such rows first and counts them: `drop_unreadable_keys`)."""
    from pyarrow import ArrowException

    from meta_eval.row_account import missing_mask, unreadable_key

    for col in columns:
        if col in frame:
            try:
                values = frame[col].astype("object")
            except (UnicodeDecodeError, ArrowException):  # pyarrow wraps the decode error
                ids = frame["id"].iloc if "id" in frame else None
                raise InputError(unreadable_key(frame[col], col, source, ids)) from None
            frame[col] = values.where(~missing_mask(values), None)
    return frame


def _check_columns(frame: pd.DataFrame, columns: list[str], source: str,
                   files: dict[str, RowFiles] | None = None) -> None:
    """Each of `columns` is in `frame` and numeric, else an `InputError` naming `source`, the
    column and its first value that is no number: its row, in the file that stored it where
    `files` (column -> `RowFiles`) says (a row of a frame joined from several runs is no row
    of any file)."""
    for col in columns:
        if col not in frame:
            error = InputError(f"{source}: column {quoted(col)} not found "
                               f"(have: {quoted_list(schema.visible_columns(frame.columns), 50)})")
            error.missing_column = col  # the CLI makes a column the user named a usage error
            raise error
        if not pd.api.types.is_numeric_dtype(frame[col]):
            bad = frame[col][pd.to_numeric(frame[col], errors="coerce").isna() & frame[col].notna()]
            where = f"dtype {frame[col].dtype}"
            if len(bad):
                place = files[col].place(frame, np.array([frame.index.get_loc(bad.index[0])])) \
                    if files and col in files and "id" in frame else None
                row = f"row {bad.index[0]}" if place is None else f"row {place[1]} of {place[0]}"
                where = f"{row}: {quoted(bad.iloc[0])}"
            raise InputError(f"{source}: column {col!r} is not numeric ({where})")
        _check_exact(frame, col, source)


EXACT_INTEGER = 2**53  # float64 holds every integer up to this magnitude, and not all beyond it


def _check_exact(frame: pd.DataFrame, col: str, source: str) -> None:
    """Refuse an integer column holding a value float64 cannot hold exactly (|v| > 2**53): the
    statistics run in float64, and 2**53 + 1 would silently become 2**53."""
    series = frame[col]
    if not pd.api.types.is_integer_dtype(series) or pd.api.types.is_bool_dtype(series):
        return
    values = series.dropna().to_numpy()
    big = (values > EXACT_INTEGER) | (values < -EXACT_INTEGER)
    if big.any():
        row = series.dropna().index[int(np.flatnonzero(big)[0])]
        where = f"id {quoted(frame.at[row, 'id'])}" if "id" in frame else f"row {row}"
        raise InputError(f"{source}: column {col!r}, {where}: integer {series.at[row]} is beyond float64's exact "
                         f"range (|value| <= 2**53); store the column as float64 if rounding it is acceptable")


def _read_csv(path: str) -> pd.DataFrame:
    """A checklist CSV as pandas reads it; a file that is not UTF-8 (the line named), empty, or
    that pandas' parser cannot split (an unclosed quote) is an `InputError` naming it."""
    import fsspec

    if "://" not in path or path.startswith("file://"):  # a symlink to /dev/zero, a named pipe: refused unread
        from scoring.local_files import refuse_not_regular

        refuse_not_regular(path.removeprefix("file://"), "checklist ", InputError)
    with fsspec.open(path, "rb") as handle:
        data = handle.read()
    text = decode_utf8(data, path)
    try:
        return pd.read_csv(io.StringIO(text))
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty file, expected a header row") from None
    except pd.errors.ParserError as exc:
        raise InputError(f"{path}: not a CSV file pandas can read ({' '.join(str(exc).split())})") from None


def read_checklist_csv(path: str | pathlib.Path, metrics: list[str] | None = None) -> Table:
    """Read one metric-preference-checklist CSV into the canonical layout (see module doc)."""
    path = str(path)
    stem = pathlib.PurePosixPath(path).name.removesuffix(".csv")
    if stem not in CHECKLIST_FILES:
        raise InputError(f"{path}: unknown checklist file (known: {', '.join(CHECKLIST_FILES)})")
    conf = CHECKLIST_FILES[stem]
    raw = _read_csv(path)
    raw = raw.drop(columns=[c for c in raw.columns if c.startswith("Unnamed")])
    needed = list(conf["aspects"]) + conf["doc"] + ([conf["system"]] if conf["system"] else [])
    _check_columns(raw, list(conf["aspects"]), path)
    for col in needed:
        if col not in raw:
            raise InputError(f"{path}: column {col!r} not found")
    frame = pd.DataFrame({"id": [f"{stem}:{i}" for i in range(len(raw))], "dataset": stem})
    from meta_eval.row_account import missing_mask

    doc_missing = np.column_stack([missing_mask(raw[c]) for c in conf["doc"]]).any(axis=1)
    frame["doc_id"] = raw[conf["doc"]].astype(str).agg("|".join, axis=1).where(~doc_missing, None)
    if conf["system"]:  # a missing system stays missing (not the text "nan")
        frame["system"] = raw[conf["system"]].astype(str).where(~missing_mask(raw[conf["system"]]), None)
    else:
        frame["system"] = None
    cat_columns = {}
    for aspect, cat in conf["aspects"].items():
        frame[f"human_{aspect}"] = raw[aspect].astype(float)
        infinite = np.isinf(frame[f"human_{aspect}"].to_numpy())
        if infinite.any():  # an empty cell is a missing rating; "inf" would enter every correlation
            row = int(np.flatnonzero(infinite)[0])
            raise InputError(f"{path}: column {aspect!r} row {row}: {str(raw[aspect].iloc[row])!r} is no rating (not finite)")
        cat_columns[f"human_{aspect}"] = cat if cat in (None, BINARY) else f"cat_{aspect}"
        if cat and cat != BINARY:
            bad = ~raw[cat].isin(CATEGORIES)  # a missing category is no quality group: named, not "nan"
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0])
                raise InputError(f"{path}: row {row}: column {cat!r} = {raw[cat].iloc[row]!r} is not one of "
                                 f"{', '.join(CATEGORIES)}")
            frame[f"cat_{aspect}"] = raw[cat].astype(str)
    if metrics is None:
        metrics = [c for c in _numeric_columns(raw)
                   if c.startswith(METRIC_PREFIXES) or c.endswith(METRIC_SUFFIXES)]
    _check_columns(raw, metrics, path)
    for col in metrics:
        frame[col] = raw[col].astype(float)
    frame = normalise_keys(frame.copy())
    return Table(frame=frame, humans=[f"human_{a}" for a in conf["aspects"]], metrics=list(metrics),
                 source=path, n_input_rows=len(raw), n_error_rows=0, cat_columns=cat_columns,
                 easy_pairs=conf["easy"], hard_pairs=conf["hard"])


def read_table(path: str, humans: list[str] | None = None, metrics: list[str] | None = None) -> Table:
    """Checklist CSV (by `.csv` suffix) or score Parquet (anything else). A column named twice
    is read once (twice, it was correlated and reported twice)."""
    humans = list(dict.fromkeys(humans)) if humans else humans
    metrics = list(dict.fromkeys(metrics)) if metrics else metrics
    if str(path).endswith(".csv"):
        table = read_checklist_csv(path, metrics=metrics)
        if humans:
            wanted = list(dict.fromkeys(h if h.startswith("human_") else f"human_{h}" for h in humans))
            _check_columns(table.frame, wanted, str(path))
            table.humans = wanted
        return table
    return read_scores(path, humans=humans, metrics=metrics)


def finite_mask(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """Rows where every named column is a finite number."""
    values = frame[columns].to_numpy(dtype=float)
    return np.isfinite(values).all(axis=1)

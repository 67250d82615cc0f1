"""Reading stored scores back as one table: `load_scores(path)` (docs/load_scores.md).

What it reads (local path or `s3://` prefix; the reader is `scoring/job_output.py`, shared with
`ctgscore meta`, `compare`, the leaderboard, corpus BLEU and the CompMCTG table):

* a scoring job's output folder: one folder per metric run (`OUT/<label>/...parquet`, any depth)
  and `OUT/manifest.json` beside them. With a manifest, the runs it lists are read, each from the
  shard folders of its current input (and of shards it kept because they were unreadable this
  time); without one (a run in progress or one that crashed, or folders arranged by hand), every
  sub-folder holding Parquet files is a run, read as it is;
* a single Parquet file or a folder of Parquet files without sub-folders (e.g. the output of
  `ctgscore score`): one run.

What it returns: a pandas DataFrame with one row per `id` (per `id` and `shard` when a job's
input held an id in several shards: then a `shard` column follows `id`), the carried columns
(`dataset`, `system`, `doc_id`, `human_*`), every run's score columns, `error`: None, or the reasons of
the runs that could not score the row (`label: reason; ...`), and `skipped`: None, or the runs
that do not apply to the row (`bartscore: no references; ...`; not errors). A score of a row its
run could not score or skipped is NaN. A score column produced by several runs (two perplexity models, say) is named
`<label>.<column>`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from scoring import schema
from scoring.job_output import SHARD, combined, output_names, read_runs, run_files

__all__ = ["load_scores", "load_scores_placed", "run_files"]


def load_scores(path: str, metrics: Iterable[str] | None = None, *,
                storage_options: Mapping[str, Any] | None = None):
    """Every metric run under `path` joined on `id` (on `id` and `shard` where ids repeat across
    shards) into one wide DataFrame (see the module docstring). `metrics` limits the runs read
    (by label, the job's folder names); `storage_options` go to fsspec (e.g.
    `{"client_kwargs": {"endpoint_url": ...}}` for S3)."""
    return load_scores_placed(path, metrics, storage_options=storage_options)[0]


def load_scores_placed(path: str, metrics: Iterable[str] | None = None, *,
                       storage_options: Mapping[str, Any] | None = None):
    """`load_scores` and where its rows were stored (`meta_eval.io.RowFiles`: the file and the
    row in it of each row of the run with the most rows, its keys as `load_scores` gives them, a
    key that is not UTF-8 as its bytes), so a command can name a row it leaves out by its file."""
    import numpy as np
    import pandas as pd

    from meta_eval.io import RowFiles

    runs = read_runs(path, metrics, storage_options=storage_options)
    names = output_names((run.name, run.score_columns) for run in runs)
    carried = []
    scores, errors, skipped = [], [], []
    largest = None  # (run, its frame with its keys as load_scores gives them): the first with the most rows
    for run in runs:
        frame = _carried_keys_as_bytes_where_not_text(run.frame)
        if largest is None or len(frame) > len(largest[1]):
            largest = (run, frame)
        failed = frame[schema.ERROR].notna() if schema.ERROR in frame else pd.Series(False, index=frame.index)
        part = frame[run.score_columns].copy()
        for column in run.score_columns:
            if pd.api.types.is_numeric_dtype(part[column]):
                part[column] = part[column].astype(float).where(~failed, np.nan)
        part.columns = [names[(run.name, c)] for c in run.score_columns]
        scores.append(part)
        if schema.ERROR in frame:
            errors.append(frame.loc[failed, schema.ERROR].map(lambda reason, label=run.label: f"{label}: {reason}"))
        if schema.SKIPPED in frame:
            left_out = frame[schema.SKIPPED].notna()
            skipped.append(frame.loc[left_out, schema.SKIPPED].map(lambda reason, label=run.label: f"{label}: {reason}"))
        kept = frame[[c for c in frame.columns if schema.is_carried(c)]]
        carried.append(kept)
    carried = combined(carried)
    wide = carried.join(scores, how="outer") if scores else carried
    wide[schema.ERROR] = _joined_reasons(errors, wide.index)
    wide[schema.SKIPPED] = _joined_reasons(skipped, wide.index)
    carried_order = [c for c in schema.carried_columns(carried.columns) if c != schema.ID]
    score_order = [c for part in scores for c in part.columns]
    wide = wide[carried_order + score_order + [schema.ERROR, schema.SKIPPED]]
    keys = [schema.ID, SHARD] if wide.index.nlevels == 2 else [schema.ID]
    wide.index.names = keys
    wide = wide.reset_index()
    places = RowFiles(largest[1].index, largest[0].file_rows)
    if any(isinstance(v, bytes) for v in wide[schema.ID]):  # bytes (an id not UTF-8) sort after every text
        return wide.sort_values(keys, kind="stable", key=lambda column: column.map(
            lambda v: (isinstance(v, bytes), v)) if column.name == schema.ID else column).reset_index(drop=True), places
    return wide.sort_values(keys, kind="stable").reset_index(drop=True), places


def _carried_keys_as_bytes_where_not_text(frame):
    """`frame` (one run) with each carried key column (`dataset`, `system`, `doc_id`) that holds a
    value not valid UTF-8 as `scoring.utf8_text.text_or_bytes_series` gives it: that value as the
    bytes stored, every other one as its text; nothing decoded with replacement characters. Its
    ids need nothing: `scoring.job_output.read_run` already gives them so."""
    from scoring.utf8_text import text_or_bytes_series

    for name in schema.CARRIED_COLUMNS:
        if name in frame.columns:
            stored = frame[name]
            column = text_or_bytes_series(stored)
            if column is not stored:
                frame = frame.assign(**{name: column})
    return frame


def _joined_reasons(reasons: list, index):
    """One `label: reason; ...` string per row (None where no run gave a reason)."""
    import pandas as pd

    column = pd.Series(None, index=index, dtype=object)
    if reasons:
        joined = pd.concat(reasons).groupby(level=list(range(index.nlevels))).agg("; ".join)
        column.loc[joined.index] = joined
    return column.astype(object).where(column.notna(), None)

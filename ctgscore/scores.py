"""Reading stored scores back as one table: `load_scores(path)` (docs/load_scores.md).

What it reads (local path or `s3://` prefix):

* a scoring job's output folder: one folder per metric run (`OUT/<label>/...parquet`, any depth)
  and `OUT/manifest.json` beside them. With a manifest, the runs it lists are read, each from the
  shard folders of its current input (and of shards it kept because they were unreadable this
  time); without one (a run in progress or one that crashed, or folders arranged by hand), every
  sub-folder holding Parquet files is a run, read as it is;
* a single Parquet file or a folder of Parquet files without sub-folders (e.g. the output of
  `ctgscore score`): one run.

What it returns: a pandas DataFrame with one row per `id`, the carried columns (`dataset`,
`system`, `doc_id`, `human_*`), every run's score columns, `error`: None, or the reasons of
the runs that could not score the row (`label: reason; ...`), and `skipped`: None, or the runs
that do not apply to the row (`bartscore: no references; ...`; not errors). A score of a row its
run could not score or skipped is NaN. A score column produced by several runs (two perplexity models, say) is named
`<label>.<column>`.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from scoring import schema
from scoring.errors import InputError

MANIFEST = "manifest.json"


@dataclass
class Run:
    """One metric run's output rows, indexed by id."""

    label: str
    frame: Any  # pandas.DataFrame indexed by id
    score_columns: list[str]


def _filesystem(path: str, storage_options: Mapping[str, Any] | None):
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **dict(storage_options or {}))
    return fs, root.rstrip("/") or root


def _parquet_files(fs, folder: str) -> list[str]:
    return sorted(p for p in fs.find(folder) if schema.is_data_file(p))


def _read_manifest(fs, path: str) -> dict:
    with fs.open(path, "rb") as handle:
        try:
            manifest = json.loads(handle.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: not a JSON manifest ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("metrics"), dict):
        raise InputError(f"{path}: not a ctgscore job manifest (no 'metrics')")
    return manifest


def _local_folder(folder: str, written_to: str | None, root: str, label: str) -> str:
    """A shard folder named in the manifest (under the output prefix the job wrote to) as a
    path under `root`, where the output is now (it may have been copied or moved)."""
    written_to = (written_to or "").rstrip("/")
    if written_to and folder.startswith(written_to + "/"):
        return posixpath.join(root, folder[len(written_to) + 1:]).rstrip("/")
    marker = f"/{label}/"
    if marker in folder:
        return posixpath.join(root, label, folder.split(marker, 1)[1]).rstrip("/")
    return posixpath.join(root, label)


def _manifest_runs(manifest: dict, files: list[str], root: str) -> list[tuple[str, list[str]]]:
    """(label, part files) per metric run of a job manifest: the parts in the shard folders
    of the run's current input (`outputs`) and of shards it could not read this time
    (`kept_for_bad_shards`); outputs of shards no longer in the input are not read."""
    written_to = (manifest.get("config") or {}).get("output")
    runs = []
    for label, report in manifest["metrics"].items():
        report = report if isinstance(report, dict) else {}
        folders = [o.get("folder") for o in report.get("outputs") or [] if isinstance(o, dict)]
        folders += [f for f in report.get("kept_for_bad_shards") or [] if isinstance(f, str)]
        folders = [f for f in folders if f]
        if not folders:  # an older manifest: the whole metric folder
            prefix = posixpath.join(root, label) + "/"
            runs.append((label, [f for f in files if f.startswith(prefix)]))
            continue
        wanted = {_local_folder(f, written_to, root, label) for f in folders}
        runs.append((label, [f for f in files if posixpath.dirname(f) in wanted]))
    return runs


def _run_folders(fs, root: str, metrics: Iterable[str] | None) -> list[tuple[str, list[str]]]:
    """(label, parquet files) per metric run under `root`."""
    files = _parquet_files(fs, root)
    manifest_path = posixpath.join(root, MANIFEST)
    if fs.exists(manifest_path):
        return _select(_manifest_runs(_read_manifest(fs, manifest_path), files, root), metrics, root)
    top = [f for f in files if posixpath.dirname(f).rstrip("/") == root]
    if top:  # a flat folder of shards: one run
        return _select([(posixpath.basename(root) or "scores", top)], metrics, root)
    labels = sorted({posixpath.relpath(f, root).split("/")[0] for f in files})
    runs = [(label, [f for f in files if f.startswith(posixpath.join(root, label) + "/")]) for label in labels]
    return _select(runs, metrics, root)


def _select(runs, metrics: Iterable[str] | None, root: str):
    if metrics is None:
        return runs
    wanted = list(metrics)
    known = [label for label, _ in runs]
    missing = [m for m in wanted if m not in known]
    if missing:
        raise InputError(f"{root}: no metric run {missing[0]!r} (runs: {', '.join(known) or 'none'})")
    return [(label, files) for label, files in runs if label in wanted]


def _read_run(fs, label: str, files: list[str]) -> Run:
    import pandas as pd

    from scoring.parquet_read import read_parquet_here

    if not files:
        raise InputError(f"metric run {label!r}: no Parquet files")
    parts = []
    for name in files:
        with fs.open(name, "rb") as handle:
            try:
                parts.append(read_parquet_here(handle).to_pandas())  # decoded on this thread (scoring.parquet_read)
            except Exception as exc:  # noqa: BLE001 - any unreadable file is named
                raise InputError(f"{name}: cannot read it as Parquet ({type(exc).__name__}: {exc})") from None
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    if schema.ID not in frame:
        raise InputError(f"{files[0]}: no column 'id'")
    duplicated = frame[schema.ID].duplicated()
    if duplicated.any():
        raise InputError(f"metric run {label!r}: id {frame.loc[duplicated, schema.ID].iloc[0]!r} appears twice")
    frame = frame.set_index(schema.ID)
    scores = [c for c in frame.columns if schema.is_score_column(c)]
    return Run(label=label, frame=frame, score_columns=scores)


def _listed_runs(path: str, metrics, storage_options):
    """The filesystem and (label, files) per metric run under `path` (a folder or one file)."""
    fs, root = _filesystem(str(path), storage_options)
    if not fs.exists(root):
        raise InputError(f"scores {path}: no such file, folder or prefix")
    if fs.isdir(root):
        runs = _run_folders(fs, root, metrics)
        if not runs:
            raise InputError(f"scores {path}: no Parquet files under it")
        return fs, runs
    label = posixpath.splitext(posixpath.basename(root))[0]
    return fs, _select([(label, [root])], metrics, root)


def _runs(path: str, metrics, storage_options) -> list[Run]:
    fs, runs = _listed_runs(path, metrics, storage_options)
    return [_read_run(fs, label, files) for label, files in runs]


def load_scores(path: str, metrics: Iterable[str] | None = None, *,
                storage_options: Mapping[str, Any] | None = None):
    """Every metric run under `path` joined on `id` into one wide DataFrame (see the module
    docstring). `metrics` limits the runs read (by label, the job's folder names);
    `storage_options` go to fsspec (e.g. `{"client_kwargs": {"endpoint_url": ...}}` for S3)."""
    import numpy as np
    import pandas as pd

    runs = _runs(path, metrics, storage_options)
    counts: dict[str, int] = {}
    for run in runs:
        for column in run.score_columns:
            counts[column] = counts.get(column, 0) + 1
    carried = None
    scores, errors, skipped = [], [], []
    for run in runs:
        frame = run.frame
        failed = frame[schema.ERROR].notna() if schema.ERROR in frame else pd.Series(False, index=frame.index)
        part = frame[run.score_columns].copy()
        for column in run.score_columns:
            if pd.api.types.is_numeric_dtype(part[column]):
                part[column] = part[column].astype(float).where(~failed, np.nan)
        part.columns = [c if counts[c] == 1 else f"{run.label}.{c}" for c in run.score_columns]
        scores.append(part)
        if schema.ERROR in frame:
            errors.append(frame.loc[failed, schema.ERROR].map(lambda reason, label=run.label: f"{label}: {reason}"))
        if schema.SKIPPED in frame:
            left_out = frame[schema.SKIPPED].notna()
            skipped.append(frame.loc[left_out, schema.SKIPPED].map(lambda reason, label=run.label: f"{label}: {reason}"))
        kept = frame[[c for c in frame.columns if schema.is_carried(c)]]
        carried = kept if carried is None else carried.combine_first(kept)
    wide = carried.join(scores, how="outer") if scores else carried
    wide[schema.ERROR] = _joined_reasons(errors, wide.index)
    wide[schema.SKIPPED] = _joined_reasons(skipped, wide.index)
    carried_order = [c for c in schema.carried_columns(carried.columns) if c != schema.ID]
    score_order = [c for part in scores for c in part.columns]
    wide = wide[carried_order + score_order + [schema.ERROR, schema.SKIPPED]]
    wide.index.name = schema.ID
    return wide.reset_index().sort_values(schema.ID, kind="stable").reset_index(drop=True)


def run_files(path: str, metrics: Iterable[str] | None = None, *,
              storage_options: Mapping[str, Any] | None = None) -> list[tuple[str, list[str]]]:
    """(label, Parquet file URLs) per metric run under `path`, chosen as `load_scores` chooses
    them, for readers that aggregate file by file instead of loading the rows."""
    fs, runs = _listed_runs(path, metrics, storage_options)
    local = "file" in (fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,))
    return [(label, [name if local else fs.unstrip_protocol(name) for name in files]) for label, files in runs]


def _joined_reasons(reasons: list, index):
    """One `label: reason; ...` string per id (None where no run gave a reason)."""
    import pandas as pd

    column = pd.Series(None, index=index, dtype=object)
    if reasons:
        joined = pd.concat(reasons).groupby(level=0).agg("; ".join)
        column.loc[joined.index] = joined
    return column.astype(object).where(column.notna(), None)

"""The one reader of stored scores: a scoring job's output folder, a folder of Parquet files,
or one file (local path or `s3://` prefix). `load_scores`, `ctgscore meta`, `ctgscore compare`,
the leaderboard, corpus BLEU and the CompMCTG table all find their runs here.

* A job's output (`OUT/<label>/...parquet` with `OUT/manifest.json`): the runs the manifest
  lists, each from the shard folders of its current input (`outputs`) and of shards it kept
  because they were unreadable (`kept_for_bad_shards`); outputs of removed shards are not read.
  Without a manifest (a run in progress, folders arranged by hand) every sub-folder holding
  Parquet files is a run.
* A folder of Parquet files without sub-folders, or one file: one run, named after it.

A run's files are then kept apart by what they hold: files with other score columns, or of
another metric signature, form a run of their own (`Run.name`: the label, then `[columns]` or
`@<signature digest>` where a label holds several). A score column that several runs produce is
named `<run>.<column>` (`output_names`)."""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from scoring import schema
from scoring.errors import InputError

MANIFEST = "manifest.json"


@dataclass
class RunFiles:
    """One metric run's files, before they are read."""

    name: str
    label: str
    files: list[str]
    score_columns: tuple[str, ...]
    signature: str | None


@dataclass
class Run:
    """One metric run's rows, indexed by id."""

    name: str
    frame: Any  # pandas.DataFrame indexed by id
    score_columns: list[str]
    signatures: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:  # the name `load_scores` and compare always called it
        return self.name


def _filesystem(path: str, storage_options: Mapping[str, Any] | None):
    from scoring.s3_filesystem import url_to_fs

    fs, root = url_to_fs(path, storage_options)
    return fs, root.rstrip("/") or root


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
    of the run's current input and of shards it could not read this time."""
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


def _labelled_files(fs, root: str) -> list[tuple[str, list[str]]]:
    """(label, parquet files) per metric run under the folder `root`."""
    files = sorted(p for p in fs.find(root) if schema.is_data_file(p))
    manifest_path = posixpath.join(root, MANIFEST)
    if fs.exists(manifest_path):
        return _manifest_runs(_read_manifest(fs, manifest_path), files, root)
    top = [f for f in files if posixpath.dirname(f).rstrip("/") == root]
    if top:  # a flat folder of shards: one run
        return [(posixpath.basename(root) or "scores", top)]
    labels = sorted({posixpath.relpath(f, root).split("/")[0] for f in files})
    return [(label, [f for f in files if f.startswith(posixpath.join(root, label) + "/")]) for label in labels]


def _select(runs, metrics: Iterable[str] | None, root: str):
    if metrics is None:
        return runs
    wanted = list(metrics)
    known = [label for label, _ in runs]
    missing = [m for m in wanted if m not in known]
    if missing:
        raise InputError(f"{root}: no metric run {missing[0]!r} (runs: {', '.join(known) or 'none'})")
    return [(label, files) for label, files in runs if label in wanted]


def _file_facts(fs, name: str) -> tuple[tuple[str, ...], str | None]:
    """(score columns, signature of its first row) of one Parquet file, from its schema and
    its `signature` column."""
    import pyarrow.parquet as pq

    try:
        with fs.open(name, "rb") as handle:
            parquet = pq.ParquetFile(handle, pre_buffer=False)  # no I/O thread reading the Python file (scoring.parquet_read)
            names = parquet.schema_arrow.names
            signature = None
            if schema.SIGNATURE in names and parquet.metadata.num_rows:
                values = parquet.read_row_group(0, columns=[schema.SIGNATURE], use_threads=False).column(0)
                signature = next((v for v in values.to_pylist() if v is not None), None)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is named
        raise InputError(f"{name}: cannot read it as Parquet ({type(exc).__name__}: {exc})") from None
    return tuple(c for c in names if schema.is_score_column(c)), signature


def _split(fs, label: str, files: list[str]) -> list[RunFiles]:
    """A label's files kept apart by score columns and signature."""
    groups: dict[tuple, list[str]] = {}
    for name in files:
        columns, signature = _file_facts(fs, name)
        groups.setdefault((columns, signature), []).append(name)
    if len(groups) == 1:
        ((columns, signature),) = groups
        return [RunFiles(label, label, files, columns, signature)]
    by_columns: dict[tuple, int] = {}
    for columns, _ in groups:
        by_columns[columns] = by_columns.get(columns, 0) + 1
    runs = []
    for (columns, signature), names in groups.items():
        name = f"{label}[{','.join(columns)}]" if len(by_columns) > 1 else label
        if by_columns[columns] > 1:
            name += "@" + hashlib.sha256(str(signature).encode()).hexdigest()[:8]
        runs.append(RunFiles(name, label, names, columns, signature))
    return runs


def list_runs(path: str, metrics: Iterable[str] | None = None, *,
              storage_options: Mapping[str, Any] | None = None) -> tuple[Any, list[RunFiles]]:
    """The filesystem and the metric runs under `path` (a folder or one file), `metrics`
    limiting them by label."""
    fs, root = _filesystem(str(path), storage_options)
    if not fs.exists(root):
        raise InputError(f"scores {path}: no such file, folder or prefix")
    if fs.isdir(root):
        labelled = _select(_labelled_files(fs, root), metrics, root)
        if not labelled:
            raise InputError(f"scores {path}: no Parquet files under it")
    else:
        labelled = _select([(posixpath.splitext(posixpath.basename(root))[0], [root])], metrics, root)
    runs = []
    for label, files in labelled:
        runs += _split(fs, label, files) if files else [RunFiles(label, label, [], (), None)]
    return fs, runs


def run_files(path: str, metrics: Iterable[str] | None = None, *,
              storage_options: Mapping[str, Any] | None = None) -> list[tuple[str, list[str]]]:
    """(run name, Parquet file URLs) per metric run under `path`, for readers that aggregate
    file by file instead of loading the rows."""
    fs, runs = list_runs(path, metrics, storage_options=storage_options)
    local = "file" in (fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,))
    return [(run.name, [name if local else fs.unstrip_protocol(name) for name in run.files]) for run in runs]


def read_run(fs, run: RunFiles) -> Run:
    """One run's files read into one frame indexed by id (ids unique within the run)."""
    import pandas as pd

    from scoring.parquet_read import read_parquet_here

    if not run.files:
        raise InputError(f"metric run {run.label!r}: no Parquet files")
    parts = []
    for name in run.files:
        with fs.open(name, "rb") as handle:
            try:  # decoded on this thread (scoring.parquet_read)
                parts.append(read_parquet_here(handle).to_pandas())
            except Exception as exc:  # noqa: BLE001 - any unreadable file is named
                raise InputError(f"{name}: cannot read it as Parquet ({type(exc).__name__}: {exc})") from None
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    if schema.ID not in frame:
        raise InputError(f"{run.files[0]}: no column 'id'")
    duplicated = frame[schema.ID].duplicated()
    if duplicated.any():
        raise InputError(f"metric run {run.name!r}: id {frame.loc[duplicated, schema.ID].iloc[0]!r} appears twice")
    frame = frame.set_index(schema.ID)
    signatures = sorted(map(str, frame[schema.SIGNATURE].dropna().unique())) if schema.SIGNATURE in frame else []
    return Run(name=run.name, frame=frame, score_columns=[c for c in frame.columns if schema.is_score_column(c)],
               signatures=signatures)


def read_runs(path: str, metrics: Iterable[str] | None = None, *,
              storage_options: Mapping[str, Any] | None = None) -> list[Run]:
    """Every metric run under `path`, read (one frame per run, indexed by id)."""
    fs, runs = list_runs(path, metrics, storage_options=storage_options)
    return [read_run(fs, run) for run in runs]


def output_names(runs: Iterable[tuple[str, Iterable[str]]]) -> dict[tuple[str, str], str]:
    """{(run name, score column): the column's name in a joined table}: the column itself,
    or `<run>.<column>` when several runs produce it."""
    runs = [(name, list(columns)) for name, columns in runs]
    counts: dict[str, int] = {}
    for _, columns in runs:
        for column in columns:
            counts[column] = counts.get(column, 0) + 1
    return {(name, column): column if counts[column] == 1 else f"{name}.{column}" for name, columns in runs for column in columns}

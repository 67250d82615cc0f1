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
named `<run>.<column>` (`output_names`).

Rows are identified by their shard and their id. A run under a metric folder knows the shard of
each file: the folder under the label (`OUT/<label>/<shard>/part-...`; `""` for files directly in
the label folder); a flat folder or one file has none. A run's frame is indexed by id, as long as
no id occurs twice in it; the job allows one id in several input shards, and then its frame is
indexed by (`id`, `shard`) instead (`SHARD`). The same (shard, id) twice, or an id twice in a run
without shards, is an error. `read_runs` keys every run it returns the same way, so they join
row for row: by id, or by (id, shard) as soon as one run needs it."""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from scoring import schema
from scoring.display_names import quoted
from scoring.errors import InputError

MANIFEST = "manifest.json"
SHARD = "shard"  # the index level (and `load_scores` column) naming a row's shard when ids repeat across shards


@dataclass
class RunFiles:
    """One metric run's files, before they are read."""

    name: str
    label: str
    files: list[str]
    score_columns: tuple[str, ...]
    signature: str | None
    shards: dict[str, str] | None = None  # file -> its shard (folder under the label); None: no shards


@dataclass
class Run:
    """One metric run's rows, indexed by id, or by (id, shard) where an id repeats across shards."""

    name: str
    frame: Any  # pandas.DataFrame indexed by id, or by (id, shard)
    score_columns: list[str]
    signatures: list[str] = field(default_factory=list)
    row_shards: Any = None  # each row's shard (a sequence as long as the frame), None without shards
    file_rows: tuple = ()  # (file, rows read from it), in the frame's row order

    @property
    def label(self) -> str:  # the name `load_scores` and compare always called it
        return self.name

    @property
    def by_shard(self) -> bool:
        """Whether the frame is indexed by (id, shard)."""
        return self.frame.index.nlevels == 2


def _filesystem(path: str, storage_options: Mapping[str, Any] | None):
    from scoring.s3_filesystem import url_to_fs

    fs, root = url_to_fs(path, storage_options)
    return fs, root.rstrip("/") or root


def _is_local(fs) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,))


def _refuse_special(fs, paths: Iterable[str]) -> None:
    """On a local disk, a device, named pipe or socket among the files of a scores folder (a
    symlink to `/dev/zero` named `manifest.json`, a FIFO named `part-0.parquet`) is an
    InputError naming it, before anything waits on it (`scoring.local_files`)."""
    if _is_local(fs):
        from scoring.local_files import refuse_not_regular

        for path in paths:
            refuse_not_regular(path, "scores ", InputError)


def _read_manifest(fs, path: str) -> dict:
    _refuse_special(fs, [path])
    with fs.open(path, "rb") as handle:
        try:
            manifest = json.loads(handle.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: not a JSON manifest ({exc})") from None
        except (ValueError, RecursionError) as exc:  # a number past 4,300 digits; nesting past the reader
            raise InputError(f"{path}: not a JSON manifest ({'nested too deep' if isinstance(exc, RecursionError) else exc})") from None
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
    config = manifest.get("config")
    written_to = config.get("output") if isinstance(config, dict) else None
    written_to = written_to if isinstance(written_to, str) else None  # an edited manifest: only strings name folders
    runs = []
    for label, report in manifest["metrics"].items():
        report = report if isinstance(report, dict) else {}
        outputs, kept = report.get("outputs"), report.get("kept_for_bad_shards")
        folders = [o.get("folder") for o in (outputs if isinstance(outputs, list) else []) if isinstance(o, dict)]
        folders += [f for f in (kept if isinstance(kept, list) else []) if isinstance(f, str)]
        folders = [f for f in folders if f and isinstance(f, str)]
        if not folders:  # an older manifest: the whole metric folder
            prefix = posixpath.join(root, label) + "/"
            runs.append((label, [f for f in files if f.startswith(prefix)]))
            continue
        wanted = {_local_folder(f, written_to, root, label) for f in folders}
        runs.append((label, [f for f in files if posixpath.dirname(f) in wanted]))
    return runs


def _labelled_files(fs, root: str) -> tuple[list[tuple[str, list[str]]], bool]:
    """(label, parquet files) per metric run under the folder `root`, and whether they sit in
    metric folders (`OUT/<label>/...`: a file's shard is its folder under the label) rather
    than directly in `root` (no shards)."""
    files = sorted(p for p in fs.find(root) if schema.is_data_file(p))
    _refuse_special(fs, files)
    manifest_path = posixpath.join(root, MANIFEST)
    if fs.exists(manifest_path):
        return _manifest_runs(_read_manifest(fs, manifest_path), files, root), True
    top = [f for f in files if posixpath.dirname(f).rstrip("/") == root]
    if top:  # a flat folder of shards: one run
        return [(posixpath.basename(root) or "scores", top)], False
    labels = sorted({posixpath.relpath(f, root).split("/")[0] for f in files})
    return [(label, [f for f in files if f.startswith(posixpath.join(root, label) + "/")]) for label in labels], True


def _shards(root: str, label: str, files: list[str]) -> dict[str, str]:
    """{file: its shard}: the file's folder relative to the metric folder `root/label`, as
    written (S3 keeps `a//b` apart from `a/b`: no path normalisation)."""
    prefix = posixpath.join(root, label) + "/"
    return {name: posixpath.dirname(name)[len(prefix):] if name.startswith(prefix) else "" for name in files}


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


def _split(fs, label: str, files: list[str], shards: dict[str, str] | None) -> list[RunFiles]:
    """A label's files kept apart by score columns and signature (`shards`: file -> shard)."""
    groups: dict[tuple, list[str]] = {}
    for name in files:
        columns, signature = _file_facts(fs, name)
        groups.setdefault((columns, signature), []).append(name)
    if len(groups) == 1:
        ((columns, signature),) = groups
        return [RunFiles(label, label, files, columns, signature, shards)]
    by_columns: dict[tuple, int] = {}
    for columns, _ in groups:
        by_columns[columns] = by_columns.get(columns, 0) + 1
    runs = []
    for (columns, signature), names in groups.items():
        name = f"{label}[{','.join(columns)}]" if len(by_columns) > 1 else label
        if by_columns[columns] > 1:
            name += "@" + hashlib.sha256(str(signature).encode()).hexdigest()[:8]
        runs.append(RunFiles(name, label, names, columns, signature,
                             None if shards is None else {n: shards[n] for n in names}))
    return runs


def list_runs(path: str, metrics: Iterable[str] | None = None, *,
              storage_options: Mapping[str, Any] | None = None) -> tuple[Any, list[RunFiles]]:
    """The filesystem and the metric runs under `path` (a folder or one file), `metrics`
    limiting them by label."""
    fs, root = _filesystem(str(path), storage_options)
    if not fs.exists(root):
        raise InputError(f"scores {path}: no such file, folder or prefix")
    sharded = False
    if fs.isdir(root):
        labelled, sharded = _labelled_files(fs, root)
        labelled = _select(labelled, metrics, root)
        if not labelled:
            raise InputError(f"scores {path}: no Parquet files under it")
    else:
        _refuse_special(fs, [root])
        labelled = _select([(posixpath.splitext(posixpath.basename(root))[0], [root])], metrics, root)
    runs = []
    for label, files in labelled:
        shards = _shards(root, label, files) if sharded else None
        runs += _split(fs, label, files, shards) if files else [RunFiles(label, label, [], (), None, shards)]
    return fs, runs


def run_files(path: str, metrics: Iterable[str] | None = None, *,
              storage_options: Mapping[str, Any] | None = None) -> list[tuple[str, list[str]]]:
    """(run name, Parquet file URLs) per metric run under `path`, for readers that aggregate
    file by file instead of loading the rows."""
    fs, runs = list_runs(path, metrics, storage_options=storage_options)
    local = _is_local(fs)
    return [(run.name, [name if local else fs.unstrip_protocol(name) for name in run.files]) for run in runs]


def read_run(fs, run: RunFiles) -> Run:
    """One run's files read into one frame indexed by id, or by (id, shard) where an id occurs in
    several of its shards (the module docstring); the same id twice in one shard, or twice in a
    run without shards, is an error."""
    import numpy as np
    import pandas as pd

    from scoring.parquet_read import read_parquet_here
    from scoring.utf8_text import text_or_bytes_series

    if not run.files:
        raise InputError(f"metric run {run.label!r}: no Parquet files")
    parts = []
    for name in run.files:
        with fs.open(name, "rb") as handle:
            try:  # decoded on this thread (scoring.parquet_read)
                parts.append(_text_keys(read_parquet_here(handle)).to_pandas())
            except Exception as exc:  # noqa: BLE001 - any unreadable file is named
                raise InputError(f"{name}: cannot read it as Parquet ({type(exc).__name__}: {exc})") from None
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    if schema.ID not in frame:
        raise InputError(f"{run.files[0]}: no column 'id'")
    frame[schema.ID] = text_or_bytes_series(frame[schema.ID])  # an id not UTF-8 as its bytes
    row_shards = None
    if run.shards is not None:  # one code per row, repeated file by file
        code = {shard: k for k, shard in enumerate(dict.fromkeys(run.shards[name] for name in run.files))}
        codes = np.repeat([code[run.shards[name]] for name in run.files], [len(part) for part in parts])
        row_shards = pd.Categorical.from_codes(codes, categories=list(code))
    duplicated = frame[schema.ID].duplicated()
    by_shard = False
    if duplicated.any():
        if row_shards is None:  # named by file and row, both times
            value = frame.loc[duplicated, schema.ID].iloc[0]
            same = (frame[schema.ID].isna() if pd.isna(value) else frame[schema.ID] == value).to_numpy()
            starts = np.cumsum([0] + [len(part) for part in parts])
            at = [(int(np.searchsorted(starts, row, "right")) - 1, int(row)) for row in np.flatnonzero(same)[:2]]
            where = ", ".join(f"{run.files[k]} row {row - starts[k]}" for k, row in at)
            what = "a null id" if pd.isna(value) else f"id {quoted(value)}"
            raise InputError(f"metric run {run.name!r}: {what} appears twice ({where})")
        keys = pd.DataFrame({schema.ID: frame[schema.ID].to_numpy(), SHARD: row_shards})
        twice = keys.duplicated()
        if twice.any():
            where = keys.loc[twice].iloc[0]
            raise InputError(f"metric run {run.name!r}: id {quoted(where[schema.ID])} appears twice in shard "
                             f"{where[SHARD]!r}")
        by_shard = True
    frame = frame.set_index(schema.ID)
    if by_shard:
        frame = _shard_keyed(frame, row_shards, run.name)
    signatures = sorted(map(str, frame[schema.SIGNATURE].dropna().unique())) if schema.SIGNATURE in frame else []
    return Run(name=run.name, frame=frame, score_columns=[c for c in frame.columns if schema.is_score_column(c)],
               signatures=signatures, row_shards=row_shards,
               file_rows=tuple((name, len(part)) for name, part in zip(run.files, parts)))


def combined(frames: list):
    """The frames' rows joined on their index, each cell from the first frame that has one
    (`DataFrame.combine_first`). An id kept as its bytes (not valid UTF-8) beside text ids makes
    pandas warn that it cannot sort their union; the readers sort the rows themselves, so that
    warning would only reach the console as noise and is not shown."""
    import warnings

    out = frames[0]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The values in the array are unorderable", RuntimeWarning)
        for frame in frames[1:]:
            out = out.combine_first(frame)
    return out


def _text_keys(table):
    """`table` with its key columns (`schema.CARRIED_COLUMNS`) stored as Parquet `binary` read as
    the text they hold (`scoring.utf8_text.binary_as_text`: a value that is not UTF-8 stays as
    its bytes, for the readers that leave its row out or return it as bytes)."""
    from scoring.utf8_text import binary_as_text

    for name in schema.CARRIED_COLUMNS:
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, binary_as_text(table.column(name)))
    return table


def _shard_keyed(frame, row_shards, name: str):
    """`frame` (indexed by id) indexed by (id, shard)."""
    import pandas as pd

    if SHARD in frame.columns:
        raise InputError(f"metric run {name!r}: has a column {SHARD!r}, the name of a row's shard "
                         "where ids repeat across shards")
    index = pd.MultiIndex.from_arrays([frame.index, pd.Index(row_shards, dtype=object)], names=[schema.ID, SHARD])
    return frame.set_axis(index, axis=0)


def key_by_shard(runs: list[Run]) -> list[Run]:
    """`runs` all indexed the same way, so they join row for row: by id, or, when one of them
    is indexed by (id, shard), every one by (id, shard)."""
    if not any(run.by_shard for run in runs):
        return runs
    keyed = []
    for run in runs:
        if not run.by_shard:
            if run.row_shards is None:  # not met in one listing: runs without shards are alone there
                raise InputError(f"metric run {run.name!r}: has no shards to tell apart the ids that repeat "
                                 "across the shards of the others")
            run = Run(run.name, _shard_keyed(run.frame, run.row_shards, run.name), run.score_columns,
                      run.signatures, run.row_shards, run.file_rows)
        keyed.append(run)
    return keyed


def read_runs(path: str, metrics: Iterable[str] | None = None, *,
              storage_options: Mapping[str, Any] | None = None) -> list[Run]:
    """Every metric run under `path`, read and keyed alike (`key_by_shard`): one frame per run,
    indexed by id, or by (id, shard) when some id repeats across shards."""
    fs, runs = list_runs(path, metrics, storage_options=storage_options)
    return key_by_shard([read_run(fs, run) for run in runs])


def output_names(runs: Iterable[tuple[str, Iterable[str]]]) -> dict[tuple[str, str], str]:
    """{(run name, score column): the column's name in a joined table}: the column itself,
    or `<run>.<column>` when several runs produce it."""
    runs = [(name, list(columns)) for name, columns in runs]
    counts: dict[str, int] = {}
    for _, columns in runs:
        for column in columns:
            counts[column] = counts.get(column, 0) + 1
    return {(name, column): column if counts[column] == 1 else f"{name}.{column}" for name, columns in runs for column in columns}

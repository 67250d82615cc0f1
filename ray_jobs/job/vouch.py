"""Stage 1 (driver), before the plan: is the previous manifest's record of the input true?

The plan takes an input shard's rows and column types from the previous manifest where the
listing shows the file it records (path, etag, size): no footer read. Types are checked when the
manifest is read (`manifest.unusable_manifest`), but an edited manifest can hold false numbers
of the right type, and a false row count would have rows scored that do not exist, or rows
never scored without a word. So a record is used as is only where the output corroborates it:
in some metric folder, parts of the shard's version (its bytes: `layout.input_version`), which
workers named by the rows they read, tile `[0, rows)` exactly, and no part of that version runs
past `rows`. On an unchanged night every shard is corroborated (each metric of the last run
covered it): nothing more is read. The footers of the others (a metric added, parts deleted, a
false record) are read; when one disagrees with its record, the manifest is false and is set
aside as a whole (`previous_manifest_ignored` says which file and why), so the plan reads every
footer, as without a manifest.
"""

from __future__ import annotations

from typing import Any

from ray_jobs.job import layout
from ray_jobs.storage import parallel, shard_checks, uris


def known_inputs(previous: dict[str, Any] | None) -> dict[tuple[str, str, int], tuple[int, dict[str, str]]]:
    """(uri, etag, size) -> (rows, columns) of the shards the previous manifest checked."""
    files = ((previous or {}).get("input") or {}).get("files") or []
    return {
        (f["file"], f["etag"], int(f["size"])): (int(f["rows"]), dict(f["columns"]))
        for f in files
        if isinstance(f, dict) and isinstance(f.get("columns"), dict) and {"file", "etag", "size", "rows"} <= f.keys()
    }


def _ranges(tree: dict[str, Any]) -> dict[str, set[tuple[int, int, str]]]:
    """Folder (fs path) -> the (start, stop, version) of the parts it holds, staged ones too."""
    found: dict[str, set[tuple[int, int, str]]] = {}
    for path in tree:
        folder, _, name = path.rpartition("/")
        part = layout.parse_part_file(name)
        if part is not None:
            found.setdefault(folder, set()).add((part.start, part.stop, part.version))
    return found


def _tiles(ranges: set[tuple[int, int]], rows: int) -> bool:
    """Whether some of `ranges` tile [0, rows) exactly (an empty shard: the part 0-0)."""
    if rows == 0:
        return (0, 0) in ranges
    stops: dict[int, list[int]] = {}
    for start, stop in ranges:
        if stop > start:
            stops.setdefault(start, []).append(stop)
    reach, frontier = {0}, [0]
    while frontier:
        for stop in stops.get(frontier.pop(), ()):
            if stop not in reach:
                reach.add(stop)
                frontier.append(stop)
    return rows in reach


def corroborated(config, labels, shard, by_folder: dict[str, set[tuple[int, int, str]]]) -> bool:
    """Whether the output (`by_folder`: `_ranges` of its listing) corroborates the shard's
    recorded rows (module docstring)."""
    tiled = False
    for label in labels:
        folder = uris.fs_path(layout.shard_dir(config.output, label, shard.rel)).rstrip("/")
        own = {(start, stop) for start, stop, version in by_folder.get(folder, ()) if version == shard.version}
        if any(stop > shard.num_rows for _, stop in own):
            return False  # a worker read rows past the recorded end
        tiled = tiled or _tiles(own, shard.num_rows)
    return tiled


def false_record(config, previous: dict[str, Any], shards, tree: dict[str, Any], in_fs, needed) -> tuple[str | None, bool]:
    """(why the previous manifest's record of an input file is false, or None; whether every
    shard taken from it was corroborated by the output). The footers of the shards it records
    that the output does not corroborate are read, in parallel, and compared with the record."""
    labels = list(dict.fromkeys([m.label or m.name for m in config.metrics]
                                + [k for k in (previous.get("metrics") or {}) if isinstance(k, str)]))
    known = known_inputs(previous)
    recorded = [s for s in shards if (s.info.uri, s.info.etag, s.info.size) in known]
    by_folder = _ranges(tree)
    doubtful = [s for s in recorded if not corroborated(config, labels, s, by_folder)]

    def check(shard):
        try:
            found = shard_checks.check_shard(shard.info, in_fs, needed, read_ids=False,
                                             max_inflation=config.limits.max_inflation)
        except shard_checks.BadShard:
            # not the record's fault alone (a metric added reads a column of another type; storage
            # down): the shard has rows to score, and the worker reading them refuses it (`read.py`)
            return None
        if found.num_rows != shard.num_rows:
            return f"it records {shard.num_rows} rows, the file's footer {found.num_rows}"
        if found.columns != shard.columns:
            return "its column types differ from the file's footer"
        return None

    for shard, problem in zip(doubtful, parallel.map_bounded(check, doubtful)):
        if problem is not None:
            return f"its record of input file {shard.info.uri} is false: {problem}", False
    return None, not doubtful

"""Reuse by content under another ETag (`ray_jobs.job.plan`'s module docstring, docs/job.md):
the row cache a shard without output of its own takes from folders scored from an input of
its size and row count, when no folder holds parts of its own version."""

from __future__ import annotations

import bisect
import heapq
import os
from typing import NamedTuple

from ray_jobs.job import layout
from ray_jobs.storage import uris

#: at most this many same-size folders lend their parts to one new shard: rows are found by
#: content, so a wrong lender costs reads, never a wrong row, but every worker that scores a unit
#: of the shard reads every lent part and holds their rows (up to this many times the shard's
#: rows): a folder of thousands of same-size shards must not make each read them all
MAX_LENDERS = 4
#: a group of more same-size folders than this is not compared whole with each new shard's name
#: (thousands of new shards beside thousands of folders: a quadratic plan): only the folders
#: named next to it in sorted order, forward and backward, and the first in listing order are
_COMPARED = 64


class _Folder(NamedTuple):
    stem: str
    owner: object  # the folder's present shard plan, or None for a vanished shard
    rows: int  # its input's rows
    cache: list[str]  # the parts it lends


class SameSizeFolders:
    """S3 gives an object uploaded in parts the ETag `<md5 of its parts' md5s>-<parts>`, which a
    copy (one CopyObject, or a copy in other part sizes) does not keep, so a renamed shard can
    hold the same bytes under another ETag. The complete parts, by this signature, of the other
    folders whose input had this shard's size and row count (a present shard's kept parts, or a
    vanished shard's parts as the previous manifest records them, name, size and etag, those of
    the chosen lenders read and checked against the record when a `check` is given) become the
    shard's row cache, the union of up to `MAX_LENDERS` of them:
    the workers read their rows and find each by `row_key` (the content the metric reads), so
    a row of the same content is reused whichever folder holds it, any other scored, and the
    parts are written anew under the shard's own version. Two shards of equal size renamed
    together each find their own rows. Lenders first: vanished folders (a renamed shard's old
    one) before present ones, names most like the shard's (`_likeness`; of more than
    `_COMPARED` folders, among those named next to it in sorted order, forward and backward),
    listing order.

    One per metric plan: the folders are indexed by input size on the first `apply`, once, not
    again for each new shard. `plan`: the metric's `plan.MetricPlan`; `files_by_stem`: its
    output files by folder; `recorded`: the previous manifest's part records; `check` (when
    given): reads and checks parts (`plan._check_parts`: [(listed part, shard rel)] -> uri ->
    `part_check.CheckedPart`), so a vanished folder's part is lent only when it agrees with
    itself and its record (a present folder lends its kept parts, checked already)."""

    def __init__(self, config, plan, files_by_stem, recorded, check=None) -> None:
        self.config, self.plan, self.files_by_stem, self.recorded = config, plan, files_by_stem, recorded
        self.check = check
        self._by_size: dict[str, list[_Folder]] | None = None
        self._groups: dict[tuple[str, int], tuple[_Group, _Group]] | None = None
        self._vanished: dict[str, tuple[object, str]] = {}  # part uri -> (listed part, its shard rel)
        self._lendable: dict[str, bool] = {}  # part uri -> whether its check found it true

    def apply(self, shard_plan) -> None:
        """Sets the shard plan's `previous` (the lent parts) and `reused_from` (the lending
        folders); nothing when no other folder of its input's size and rows has parts to lend."""
        shard = shard_plan.shard
        stem = layout.shard_stem(shard.rel)
        vanished, present = self._grouped().get((str(shard.info.size), shard.num_rows), (_Group([]), _Group([])))
        found = vanished.likest(stem)
        if len(found) < MAX_LENDERS:
            found += [folder for folder in present.likest(stem, 1) if folder.owner is not shard_plan]
        if not found:
            return
        lenders = heapq.nsmallest(MAX_LENDERS, found, key=lambda f: (f.owner is not None, -_likeness(stem, f.stem)))
        root = layout.metric_root(self.config.output, self.plan.metric.label)
        shard_plan.previous = self._checked([uri for folder in lenders for uri in folder.cache])
        shard_plan.reused_from = [uris.join(root, folder.stem) for folder in lenders]

    def _checked(self, lent: list[str]) -> list[str]:
        """`lent` without the vanished folders' parts that their check finds false (each read once)."""
        if self.check is None:
            return lent
        unchecked = [self._vanished[uri] for uri in lent if uri in self._vanished and uri not in self._lendable]
        for uri, part in self.check(unchecked).items():
            self._lendable[uri] = part.footer is not None
        return [uri for uri in lent if self._lendable.get(uri, True)]

    def _folders(self) -> dict[str, list[_Folder]]:
        """Input size -> the folders of inputs of that size, in listing order."""
        if self._by_size is None:
            self._by_size = {}
            digest = self.plan.metric.digest
            present = {layout.shard_stem(rel): p for rel, p in self.plan.shards.items()}
            for stem, files in self.files_by_stem.items():
                other = present.get(stem)
                if other is not None:
                    size, rows = other.shard.info.size, other.shard.num_rows
                    cache = [uri for _, uri, _ in other.kept]
                else:
                    record = self.recorded.get(stem + ".parquet") or {}
                    if record.get("digest") != digest or not isinstance(record.get("parts"), dict):
                        continue
                    entries = record["parts"]
                    size, rows = record.get("input_size"), _recorded_rows(entries)
                    cache = [listed.uri for listed in files if _vouched(entries.get(listed.uri.rsplit("/", 1)[-1]), listed)]
                    self._vanished.update((listed.uri, (listed, stem + ".parquet")) for listed in files)
                self._by_size.setdefault(str(size), []).append(_Folder(stem, other, rows, cache))
        return self._by_size

    def _grouped(self) -> dict[tuple[str, int], tuple[_Group, _Group]]:
        """(input size, rows) -> its folders with parts to lend: vanished, present."""
        if self._groups is None:
            self._groups = {}
            for size, folders in self._folders().items():
                keys = dict.fromkeys(folder.rows for folder in folders if folder.cache)
                for rows in keys:
                    lending = [folder for folder in folders if folder.cache and folder.rows == rows]
                    self._groups[size, rows] = (_Group([f for f in lending if f.owner is None]),
                                                _Group([f for f in lending if f.owner is not None]))
        return self._groups


class _Group:
    """Folders of one input size and row count, in listing order, and their names sorted
    forward and backward (`_COMPARED`)."""

    def __init__(self, folders: list[_Folder]) -> None:
        self.folders = folders
        self.forward = sorted(range(len(folders)), key=lambda i: folders[i].stem)
        self.forward_names = [folders[i].stem for i in self.forward]
        self.backward = sorted(range(len(folders)), key=lambda i: folders[i].stem[::-1])
        self.backward_names = [folders[i].stem[::-1] for i in self.backward]

    def likest(self, stem: str, more: int = 0) -> list[_Folder]:
        """The folders to compare with `stem`, in listing order: all of a small group; of a
        large one the `MAX_LENDERS` (+ `more`) named next to it on either side, forward and
        backward (those sharing most of its start, of its end), and the first in listing order."""
        if len(self.folders) <= _COMPARED:
            return list(self.folders)
        reach = MAX_LENDERS + more
        chosen = set(range(reach))
        for order, names, key in ((self.forward, self.forward_names, stem), (self.backward, self.backward_names, stem[::-1])):
            at = bisect.bisect_left(names, key)
            chosen.update(order[max(0, at - reach):at + reach])
        return [self.folders[i] for i in sorted(chosen)]


def _recorded_rows(entries: dict) -> int:
    """The rows of a vanished shard, from its recorded parts' names (a record is a whole cover)."""
    parts = [layout.parse_part(name) for name in entries if isinstance(name, str)]
    return max((part.stop for part in parts if part is not None), default=-1)


def _likeness(a: str, b: str) -> int:
    """How alike two folder names are: their common start and end, in characters (`old-7` and
    `new-7`: 2; a renamed folder often keeps most of its name)."""
    start = len(os.path.commonprefix([a, b]))
    end = len(os.path.commonprefix([a[start:][::-1], b[start:][::-1]]))
    return start + end


def _vouched(entry, listed) -> bool:
    """The listing shows the very part the manifest's `entry` records (size and etag): a part
    rewritten since (another signature of the same label) is not this signature's."""
    return isinstance(entry, dict) and entry.get("size") == listed.size and entry.get("etag") == listed.etag

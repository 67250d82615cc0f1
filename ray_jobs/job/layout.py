"""Where a metric's output lives (`docs/job.md`, "Output layout").

    OUT/manifest.json
    OUT/<label>/<shard path without .parquet>/part-<start>-<stop>-<version>.parquet

One folder per metric label is one Parquet dataset (`pd.read_parquet(OUT/<label>)`); the
manifest sits beside the metric folders, never inside. One folder per input shard holds that
shard's parts; a part holds the shard's rows `start <= row < stop` (0-based, in input order;
numbers zero-padded to 10 digits so names sort by row). `version` is a 12-hex digest of the
input shard's etag and size: a changed shard writes new names, so its old parts stay readable
(they are the row cache) until the new ones cover the shard.

A part whose name its shard's folder already holds (an unchanged shard scored again under a
new signature) is written *staged*, as `_next-part-...parquet` (hidden from readers and Parquet
datasets by the leading `_`), and renamed to its own name by the commit once the shard's new
parts cover it (`staged_filename`, `parse_part_file`, `unstaged_uri`): a shard that fails half
way keeps its old parts as they were.

On a case-insensitive, Unicode-normalising disk (macOS, Windows) two names that differ only in
case, normal form or trailing dots are one folder (`scoring.file_names.collision_key`): for a
local output, input shards whose folders would meet there (`a.parquet` and `A.parquet`, or
`A.parquet` and `a/b.parquet`) are bad shards, each named, and two such labels are refused
(`refuse_clashing_folders`), and so is a folder this run writes that the disk takes for an
existing one spelt otherwise (`refuse_folded_outputs`: a shard renamed by case only); S3 keys
are exact. A shard whose output name is too long, or whose folder would be named like a part
file, is a bad shard too (`set_aside_unwritable_names`).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from dataclasses import dataclass
from typing import Iterable

from ray_jobs.storage import uris
from scoring.errors import UsageError
from scoring.file_names import collision_key

MANIFEST = "manifest.json"
PART_PATTERN = re.compile(r"^part-(\d{10})-(\d{10})-([0-9a-f]{12})\.parquet$")
STAGED_PREFIX = "_next-"  # a part waiting for the commit to take its own name


@dataclass(frozen=True, order=True)
class PartName:
    start: int
    stop: int
    version: str

    @property
    def rows(self) -> int:
        return self.stop - self.start

    def filename(self) -> str:
        return f"part-{self.start:010d}-{self.stop:010d}-{self.version}.parquet"

    def staged_filename(self) -> str:
        return STAGED_PREFIX + self.filename()


def parse_part(filename: str) -> PartName | None:
    match = PART_PATTERN.match(filename)
    if not match or int(match.group(2)) < int(match.group(1)):
        return None
    return PartName(int(match.group(1)), int(match.group(2)), match.group(3))


def parse_part_file(filename: str) -> PartName | None:
    """The part a file holds, under its own name or staged (`STAGED_PREFIX`); None: not a part."""
    return parse_part(filename[len(STAGED_PREFIX):] if filename.startswith(STAGED_PREFIX) else filename)


def is_staged(uri: str) -> bool:
    return uri.rsplit("/", 1)[-1].startswith(STAGED_PREFIX)


def unstaged_uri(uri: str) -> str:
    """A staged part's own name, in its folder (`uri` itself when it is not staged)."""
    folder, name = uri.rsplit("/", 1)
    return f"{folder}/{name[len(STAGED_PREFIX):]}" if name.startswith(STAGED_PREFIX) else uri


def input_version(etag: str, size: int) -> str:
    return hashlib.sha256(f"{etag}|{size}".encode()).hexdigest()[:12]


def shard_stem(rel: str) -> str:
    """The shard's folder name inside a metric folder: its path relative to the input,
    without `.parquet`."""
    return rel[: -len(".parquet")] if rel.endswith(".parquet") else rel


def clashing_labels(labels: Iterable[str], reserved: Iterable[str] = (MANIFEST,)) -> tuple[str, str] | None:
    """Two metric labels (or a label and a `reserved` name beside them: the manifest, the id
    index) that are one name on a case-insensitive disk; None when there are none."""
    seen: dict[str, str] = {collision_key(name): name for name in reserved}
    for label in labels:
        first = seen.setdefault(collision_key(label), label)
        if first != label:
            return first, label
    return None


def clashing_rels(rels: Iterable[str]) -> dict[str, str]:
    """Every shard (by rel) whose output folder, or a folder above it, is one folder with
    another shard's on a case-insensitive disk (`collision_key`), mapped to the first such
    other shard (by sorted rel); {} when none are."""
    spellings: dict[tuple[str, ...], dict[str, list[str]]] = {}  # folder key -> its spellings -> their shards
    for rel in sorted(set(rels)):
        names = shard_stem(rel).split("/")
        for depth in range(1, len(names) + 1):
            key = tuple(collision_key(name) for name in names[:depth])
            spellings.setdefault(key, {}).setdefault("/".join(names[:depth]), []).append(rel)
    clashing: dict[str, str] = {}
    for spelt in spellings.values():
        if len(spelt) < 2:
            continue
        for folder, shards in spelt.items():
            other = min(rel for f, others in spelt.items() if f != folder for rel in others)
            for rel in shards:
                clashing.setdefault(rel, other)
    return clashing


def refuse_clashing_folders(config, shards):
    """`shards` (a `listing.Shards` of `ShardInfo`s: rel, uri), once checked for a local output
    (`config.output`). Two metric labels (or a label and the manifest or the id index) that are
    one folder on a case-insensitive disk (macOS, Windows) are refused (`UsageError`, exit 2).
    Input shards whose folders are one there (`A.parquet` and `a.parquet`: a prune or a
    replacement in one folder would remove the other's parts) are each set aside as a bad shard
    (in `unusable`, naming the other): input names are a stranger's, so one of them never
    fails the job (`skip_bad_shards` decides, as for any bad shard). An S3 output is left
    alone: its keys are exact."""
    from ray_jobs.job.id_index import INDEX_NAME

    output = config.output
    if uris.is_s3(output):
        return shards
    clash = clashing_labels([metric.label or metric.name for metric in config.metrics], (MANIFEST, INDEX_NAME))
    if clash:
        raise UsageError(f"metric labels {clash[0]!r} and {clash[1]!r} name one folder of {output} on a "
                         "case-insensitive disk (macOS, Windows); set another 'label'")
    clashing = clashing_rels(shard.rel for shard in shards)
    if not clashing:
        return shards
    uri = {shard.rel: shard.uri for shard in shards}
    return _set_aside(shards, {rel: f"its output folder is that of input shard {uri[other]!r} on a case-insensitive "
                                    "disk (macOS, Windows: names that differ only in case, Unicode normal form or "
                                    "trailing dots): not scored; rename one of them" for rel, other in clashing.items()})


NAME_MAX_BYTES = 255  # a file or folder name on a local disk (ext4, APFS, NTFS)
PATH_MAX_BYTES = 4095  # a local path (Linux)
S3_KEY_MAX_BYTES = 1024
LONGEST_PART = len(PartName(0, 0, "0" * 12).staged_filename())


def too_long(output: str, label: str, rel: str) -> str | None:
    """Why a shard's output cannot be written where `output` is (a local folder name over 255
    bytes or a path over 4,095; an S3 key over 1,024 bytes), or None. Input keys may be longer
    than any local name, and an output key is longer than its input key."""
    part = uris.fs_path(shard_dir(output, label, rel)) + "/" + "x" * LONGEST_PART
    if uris.is_s3(output):
        size = len(part.split("/", 1)[1].encode("utf-8", "surrogateescape"))
        return f"its output key would be {size} bytes long, over S3's {S3_KEY_MAX_BYTES}" if size > S3_KEY_MAX_BYTES else None
    longest = max(len(name.encode("utf-8", "surrogateescape")) for name in shard_stem(rel).split("/"))
    if longest > NAME_MAX_BYTES:
        return f"its output folder would have a name of {longest} bytes, over a disk's {NAME_MAX_BYTES}"
    size = len(part.encode("utf-8", "surrogateescape"))
    return f"its output path would be {size} bytes long, over {PATH_MAX_BYTES}" if size > PATH_MAX_BYTES else None


def named_like_a_part(rel: str) -> str | None:
    """Why a shard's output folder would clash with the job's own files, or None: a folder name
    of its path that reads as a part's (`part-<start>-<stop>-<version>.parquet`, in any case,
    staged or not) is the name of a part file its parent folder holds, for the shard of that
    parent (`s.parquet` writes `s/part-0000000000-0000000003-<version>.parquet`, and
    `s/part-0000000000-0000000003-<version>.parquet.parquet` would write into a folder of that
    name; the version comes from a listing, so anyone who can list the input can aim at it). A
    disk cannot hold both, and on S3 the part's key would be a prefix of the other's keys."""
    names = shard_stem(rel).split("/")
    clash = next((name for name in names if parse_part_file(name.lower()) is not None), None)
    return None if clash is None else f"its output folder {clash!r} would be named like one of the job's part files"


def set_aside_unwritable_names(config, shards):
    """`shards` (a `listing.Shards`) without those whose output no metric can write
    (`named_like_a_part`, `too_long`), each set aside as a bad shard (in `unusable`, named with
    the reason): one input name never fails the job."""
    labels = [metric.label or metric.name for metric in config.metrics]
    why = {shard.rel: named_like_a_part(shard.rel)
           or next(filter(None, (too_long(config.output, label, shard.rel) for label in labels)), None)
           for shard in shards}
    return _set_aside(shards, {rel: f"{reason}: not scored; rename it" for rel, reason in why.items() if reason})


def _set_aside(shards, reasons: dict[str, str]):
    """`shards` (a `listing.Shards`) less those `reasons` names (rel -> why), each added to its
    `unusable` as a bad shard, in the order of `shards`; `shards` itself when none is named."""
    from ray_jobs.storage.listing import Shards

    if not reasons:
        return shards
    return Shards([shard for shard in shards if shard.rel not in reasons], getattr(shards, "not_read", ()),
                  [*getattr(shards, "unusable", ()),
                   *((shard.uri, shard.rel, reasons[shard.rel]) for shard in shards if shard.rel in reasons)])


def _same_folder(first: str, second: str) -> bool:
    """Whether two existing local paths are one folder (this disk folds their names together)."""
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them is not there: two folders
        return False


def refuse_folded_outputs(config, shards, tree: dict, same_folder=None) -> None:
    """A local output whose disk takes a folder this run writes (a label's, or a shard's, or one
    above it) for an existing folder spelt otherwise (a shard or a label renamed by case only,
    its old output still there: the listing shows the old spelling, so the new shard's parts
    would look orphaned, be pruned or not be read) is refused (`UsageError`, exit 2), naming
    both. `tree`: the output's listing (fs paths); `same_folder(a, b)` asks the disk."""
    if uris.is_s3(config.output):
        return
    same_folder = same_folder or _same_folder
    root = uris.fs_path(config.output).rstrip("/")
    spelt: dict[tuple[str, ...], set[str]] = {}  # key of an existing folder path -> its spellings
    folders = {posixpath.dirname(path[len(root) + 1:]) for path in tree if path.startswith(root + "/")}
    for names in (folder.split("/") for folder in folders if folder):
        for depth in range(1, len(names) + 1):
            spelt.setdefault(tuple(collision_key(n) for n in names[:depth]), set()).add("/".join(names[:depth]))
    checked: set[str] = set()
    for label in [metric.label or metric.name for metric in config.metrics]:
        for shard in shards:
            names = [label, *shard_stem(shard.rel).split("/")]
            for depth in range(1, len(names) + 1):
                folder = "/".join(names[:depth])
                if folder in checked:
                    continue
                checked.add(folder)
                for other in spelt.get(tuple(collision_key(n) for n in names[:depth]), ()):
                    if other != folder and same_folder(posixpath.join(root, other), posixpath.join(root, folder)):
                        whose = f"metric label {label!r}" if depth == 1 else f"input shard {shard.uri!r}"
                        raise UsageError(f"{whose} writes to {posixpath.join(root, folder)!r}, which this disk takes "
                                         f"for the existing folder {posixpath.join(root, other)!r} (names that differ "
                                         "only in case, Unicode normal form or trailing dots); remove or rename that "
                                         "folder")


def metric_root(output: str, label: str) -> str:
    return uris.join(output, label)


def shard_dir(output: str, label: str, rel: str) -> str:
    return uris.join(output, label, shard_stem(rel))


def part_uri(output: str, label: str, rel: str, part: PartName) -> str:
    return uris.join(shard_dir(output, label, rel), part.filename())


def staged_part_uri(output: str, label: str, rel: str, part: PartName) -> str:
    return uris.join(shard_dir(output, label, rel), part.staged_filename())


def manifest_uri(output: str) -> str:
    return uris.join(output, MANIFEST)

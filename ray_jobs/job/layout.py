"""Where a metric's output lives (`docs/job.md`, "Output layout").

    OUT/manifest.json
    OUT/<label>/<shard path without .parquet>/part-<start>-<stop>-<version>.parquet

One folder per metric label is one Parquet dataset (`pd.read_parquet(OUT/<label>)`); the
manifest sits beside the metric folders, never inside. One folder per input shard holds that
shard's parts; a part holds the shard's rows `start <= row < stop` (0-based, in input order;
numbers zero-padded to 10 digits so names sort by row). `version` is a 12-hex digest of the
input shard's etag and size: a changed shard writes new names, so its old parts stay readable
(they are the row cache) until the new ones cover the shard.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ray_jobs.storage import uris

MANIFEST = "manifest.json"
PART_PATTERN = re.compile(r"^part-(\d{10})-(\d{10})-([0-9a-f]{12})\.parquet$")


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


def parse_part(filename: str) -> PartName | None:
    match = PART_PATTERN.match(filename)
    if not match or int(match.group(2)) < int(match.group(1)):
        return None
    return PartName(int(match.group(1)), int(match.group(2)), match.group(3))


def input_version(etag: str, size: int) -> str:
    return hashlib.sha256(f"{etag}|{size}".encode()).hexdigest()[:12]


def shard_stem(rel: str) -> str:
    """The shard's folder name inside a metric folder: its path relative to the input,
    without `.parquet`."""
    return rel[: -len(".parquet")] if rel.endswith(".parquet") else rel


def metric_root(output: str, label: str) -> str:
    return uris.join(output, label)


def shard_dir(output: str, label: str, rel: str) -> str:
    return uris.join(output, label, shard_stem(rel))


def part_uri(output: str, label: str, rel: str, part: PartName) -> str:
    return uris.join(shard_dir(output, label, rel), part.filename())


def manifest_uri(output: str) -> str:
    return uris.join(output, MANIFEST)

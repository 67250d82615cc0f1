"""Reuse by content under another ETag (`ray_jobs.job.plan`'s module docstring, docs/job.md):
the row cache a shard without output of its own takes from a folder scored from an input of
its size, when no folder holds parts of its own version."""

from __future__ import annotations

from ray_jobs.job import layout
from ray_jobs.storage import uris


class SameSizeFolders:
    """S3 gives an object uploaded in parts the ETag `<md5 of its parts' md5s>-<parts>`, which a
    copy (one CopyObject, or a copy in other part sizes) does not keep, so a renamed shard can
    hold the same bytes under another ETag. The complete parts, by this signature, of the first
    other folder whose input had this shard's size (a present shard's kept parts, or a vanished
    shard's parts as the previous manifest records them, name, size and etag: no footer is read)
    become the shard's row cache: the workers read its rows and find each by `row_key` (the
    content the metric reads), so a row of the same content is reused, any other scored, and
    the parts are written anew under the shard's own version.

    One per metric plan: the folders are indexed by input size on the first `apply`, once, not
    again for each new shard. `plan`: the metric's `plan.MetricPlan`; `files_by_stem`: its
    output files by folder; `recorded`: the previous manifest's part records."""

    def __init__(self, config, plan, files_by_stem, recorded) -> None:
        self.config, self.plan, self.files_by_stem, self.recorded = config, plan, files_by_stem, recorded
        self._by_size: dict[str, list[tuple[str, object, list[str]]]] | None = None

    def apply(self, shard_plan) -> None:
        """Sets the shard plan's `previous` and `reused_from` (the folder); nothing when no
        other folder of its input's size has parts to lend."""
        for stem, owner, cache in self._folders().get(str(shard_plan.shard.info.size), []):
            if owner is not shard_plan and cache:
                shard_plan.previous = list(cache)
                shard_plan.reused_from = uris.join(layout.metric_root(self.config.output, self.plan.metric.label), stem)
                return

    def _folders(self) -> dict[str, list[tuple[str, object, list[str]]]]:
        """Input size -> (folder, its present shard plan or None, the parts it lends), folders
        in listing order."""
        if self._by_size is None:
            self._by_size = {}
            digest = self.plan.metric.digest
            present = {layout.shard_stem(rel): p for rel, p in self.plan.shards.items()}
            for stem, files in self.files_by_stem.items():
                other = present.get(stem)
                if other is not None:
                    size, cache = other.shard.info.size, [uri for _, uri, _ in other.kept]
                else:
                    record = self.recorded.get(stem + ".parquet") or {}
                    if record.get("digest") != digest or not isinstance(record.get("parts"), dict):
                        continue
                    entries = record["parts"]
                    size = record.get("input_size")
                    cache = [listed.uri for listed in files if _vouched(entries.get(listed.uri.rsplit("/", 1)[-1]), listed)]
                self._by_size.setdefault(str(size), []).append((stem, other, cache))
        return self._by_size


def _vouched(entry, listed) -> bool:
    """The listing shows the very part the manifest's `entry` records (size and etag): a part
    rewritten since (another signature of the same label) is not this signature's."""
    return isinstance(entry, dict) and entry.get("size") == listed.size and entry.get("etag") == listed.etag

"""Reuse by content under another ETag (`ray_jobs.job.plan`'s module docstring, docs/job.md):
the row cache a shard without output of its own takes from a folder scored from an input of
its size, when no folder holds parts of its own version."""

from __future__ import annotations

from ray_jobs.job import layout
from ray_jobs.storage import uris


def same_size_cache(config, plan, shard_plan, files_by_stem, recorded) -> None:
    """S3 gives an object uploaded in parts the ETag `<md5 of its parts' md5s>-<parts>`, which a
    copy (one CopyObject, or a copy in other part sizes) does not keep, so a renamed shard can
    hold the same bytes under another ETag. The complete parts, by this signature, of the first other folder whose input had this
    shard's size (a present shard's kept parts, or a vanished shard's parts as the previous
    manifest records them, name, size and etag: no footer is read) become the shard's row cache: the workers read its
    rows and find each by `row_key` (the content the metric reads), so a row of the same content
    is reused, any other scored, and the parts are written anew under the shard's own version.
    Sets the shard plan's `previous` and `reused_from` (the folder); nothing when none fits.
    `plan`: the metric's `plan.MetricPlan`; `recorded`: the previous manifest's part records."""
    shard, digest = shard_plan.shard, plan.metric.digest
    present = {layout.shard_stem(rel): p for rel, p in plan.shards.items()}
    for stem, files in files_by_stem.items():
        other = present.get(stem)
        if other is not None:
            same = other is not shard_plan and other.shard.info.size == shard.info.size
            cache = [uri for _, uri, _ in other.kept] if same else []
        else:
            record = recorded.get(stem + ".parquet") or {}
            same = record.get("digest") == digest and str(record.get("input_size")) == str(shard.info.size)
            entries = record.get("parts") if same and isinstance(record.get("parts"), dict) else {}
            cache = [listed.uri for listed in files if _vouched(entries.get(listed.uri.rsplit("/", 1)[-1]), listed)]
        if cache:
            shard_plan.previous = cache
            shard_plan.reused_from = uris.join(layout.metric_root(config.output, plan.metric.label), stem)
            return


def _vouched(entry, listed) -> bool:
    """The listing shows the very part the manifest's `entry` records (size and etag): a part
    rewritten since (another signature of the same label) is not this signature's."""
    return isinstance(entry, dict) and entry.get("size") == listed.size and entry.get("etag") == listed.etag

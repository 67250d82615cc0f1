"""Stage 1 (driver): what this run has to do, from listings, the previous manifest and the
Parquet footers the manifest does not vouch for (`docs/job.md`, "Planning from the manifest").

* `read_shards`: list the input shards; a shard the previous manifest lists with the same
  etag and size keeps its recorded rows and column types, every other footer is checked
  (readable, `id`/`text` present, canonical column types, no absurd declared size), in
  parallel; no rows are read;
* `plan_metric`: per metric and shard, the committed parts that can be kept, the row ranges
  (units) still to score, the earlier parts that serve as the row cache, the parts a new
  cover will supersede, and outputs whose shard is gone or unreadable. A part the manifest
  records with the listed name, size and etag is known without a read; others' footers are
  read in parallel;
* reuse by content: a shard with no output of its own whose bytes (etag and size, so the same
  part names) another shard's complete parts were scored from, by this signature (a renamed
  or copied input), gets those parts copied under its own folder and kept: none of its rows is
  scored again. A renamed input's old folder stays, reported as orphaned, until `prune: true`
  removes it. Failing that (on S3 a copy of an object uploaded in parts gets another ETag), the
  complete parts of the other folders scored from an input of the same size and rows (up to
  `reuse_cache.MAX_LENDERS`) serve as its row cache: rows of the same content are reused, not
  scored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray_jobs import incremental
from ray_jobs.config import JobConfig
from ray_jobs.job import layout
from ray_jobs.job.errors import JobError
from ray_jobs.job.metrics import ResolvedMetric
from ray_jobs.job.reuse_cache import SameSizeFolders
from ray_jobs.job.vouch import known_inputs
from ray_jobs.storage import listing, parallel, reads, shard_checks, uris, writes


@dataclass
class Shard:
    info: listing.ShardInfo
    num_rows: int
    columns: dict[str, str]
    version: str

    @property
    def rel(self) -> str:
        return self.info.rel


@dataclass
class ShardPlan:
    shard: Shard
    kept: list[tuple[layout.PartName, str, int]] = field(default_factory=list)  # (part, uri, errors)
    kept_skipped: dict[str, int] = field(default_factory=dict)  # part uri -> rows the metric does not apply to
    units: list[tuple[int, int]] = field(default_factory=list)  # row ranges to score
    previous: list[str] = field(default_factory=list)  # older parts, same signature: the row cache
    superseded: list[str] = field(default_factory=list)  # removed once the shard's new cover is complete
    # the folders whose parts were copied here (one: a shard of the same bytes) or lent as its row cache
    # (`reuse_cache.SameSizeFolders`: the same size and rows)
    reused_from: list[str] = field(default_factory=list)
    existing: set[str] = field(default_factory=set)  # its folder's files when planned: kept as they were if it turns bad


@dataclass
class MetricPlan:
    metric: ResolvedMetric
    shards: dict[str, ShardPlan] = field(default_factory=dict)  # by shard rel
    outside: dict[str, list[str]] = field(default_factory=dict)  # shard stem -> files of shards not planned
    footers_read: int = 0  # part footers read while planning (parts the manifest did not vouch for)

    @property
    def pending_rows(self) -> int:
        return sum(stop - start for plan in self.shards.values() for start, stop in plan.units)


def read_shards(config: JobConfig, in_fs, needed: tuple[str, ...], previous: dict[str, Any] | None = None):
    """Every input shard, from one listing: rows and column types from the previous manifest where it lists the
    same etag and size, else from its footer (no rows read). Returns (good, bad, `listing.Shards.not_read`)."""
    infos = layout.refuse_clashing_folders(config, listing.list_shards(config.input, in_fs))
    infos = layout.set_aside_unwritable_names(config, infos)
    if not infos and not infos.unusable:
        note = listing.not_read_note(infos.not_read)
        raise JobError(f"no *.parquet shards under {config.input}" + (f" ({note})" if note else ""))
    known = known_inputs(previous)
    to_check = [info for info in infos if (info.uri, info.etag, info.size) not in known]
    max_inflation = config.limits.max_inflation
    checked = parallel.map_bounded(lambda info: _check(info, in_fs, needed, max_inflation), to_check)
    results = dict(zip((info.uri for info in to_check), checked))
    shards = []
    bad = [{"file": uri, "rel": rel, "error": why} for uri, rel, why in infos.unusable]
    for info in infos:
        found = known.get((info.uri, info.etag, info.size)) or results[info.uri]
        if isinstance(found, shard_checks.BadShard):
            bad.append({"file": found.uri, "rel": info.rel, "error": found.reason})
            continue
        rows, columns = found
        shards.append(Shard(info, rows, columns, layout.input_version(info.etag, info.size)))
    return shards, bad, infos.not_read


def _check(info, in_fs, needed, max_inflation: float) -> tuple[int, dict[str, str]] | shard_checks.BadShard:
    try:
        check = shard_checks.check_shard(info, in_fs, needed, read_ids=False, max_inflation=max_inflation)
    except shard_checks.BadShard as exc:
        return exc
    return check.num_rows, check.columns


def plan_metric(
    out_fs,
    config: JobConfig,
    metric: ResolvedMetric,
    shards: list[Shard],
    tree: dict[str, dict] | None = None,
    previous: dict[str, Any] | None = None,
) -> MetricPlan:
    """Per shard: keep the committed parts that cover rows from 0 on; schedule the gaps as
    units aligned to multiples of `part_rows` (so a resumed run writes the same names).

    `tree` is one listing of the output prefix (made here when not given). A part the previous manifest records with the
    same name, size and etag (and the shard's input etag, size and this signature digest) is
    known without reading it; every other part's footer is read, with bounded concurrency."""
    plan = MetricPlan(metric=metric)
    by_stem = {layout.shard_stem(shard.rel): shard for shard in shards}
    root = layout.metric_root(config.output, metric.label)
    if tree is None:
        tree = listing.list_tree(out_fs, root)
    files_by_stem: dict[str, list[listing.ListedFile]] = {}
    for listed in listing.output_files(root, tree):
        inner = listed.uri[len(root) + 1 :]
        stem = inner.rsplit("/", 1)[0] if "/" in inner else ""
        files_by_stem.setdefault(stem, []).append(listed)
    for stem, files in files_by_stem.items():
        if stem not in by_stem:
            plan.outside[stem] = [listed.uri for listed in files]
    recorded = manifest_parts(previous, metric.label)
    footers: dict[str, reads.Footer | None] = {}
    unknown: list[listing.ListedFile] = []
    for shard in shards:
        record = recorded.get(shard.rel)
        for listed in files_by_stem.get(layout.shard_stem(shard.rel), []):
            footer = _recorded_footer(record, listed, shard.rel, metric.digest)
            if footer is not None:
                footers[listed.uri] = footer
            elif layout.parse_part_file(listed.uri.rsplit("/", 1)[-1]) is not None:
                unknown.append(listed)
    read = parallel.map_bounded(lambda listed: reads.read_footer_metadata(out_fs, listed.uri, listed.size), unknown)
    footers.update(zip((listed.uri for listed in unknown), read))
    plan.footers_read = len(unknown)
    for shard in shards:
        files = [listed.uri for listed in files_by_stem.get(layout.shard_stem(shard.rel), [])]
        plan.shards[shard.rel] = _plan_shard(config.part_rows, metric.digest, shard, files, footers)
        plan.shards[shard.rel].existing = set(files)
    _reuse_by_content(out_fs, config, plan, files_by_stem, recorded, footers)
    return plan


def _reuse_by_content(out_fs, config: JobConfig, plan: MetricPlan, files_by_stem, recorded, known) -> None:
    """Reuse by content (module docstring): for each shard without output of its own, the
    complete parts of another shard's folder (a vanished one: a renamed input; or a present
    one: a copy) with the same bytes (the same version in their names, footers of the same
    etag, size and signature) are copied under the shard's folder, then planned as its own
    (kept; only rows no such part covers are scored). `known`: footers already read."""
    metric = plan.metric
    wanting = [p for p in plan.shards.values()
               if p.shard.num_rows and not files_by_stem.get(layout.shard_stem(p.shard.rel))]
    if not wanting:
        return
    by_version: dict[str, list[tuple[str, listing.ListedFile, layout.PartName]]] = {}
    for stem, files in files_by_stem.items():
        for listed in files:
            part = layout.parse_part(listed.uri.rsplit("/", 1)[-1])
            if part is not None:
                by_version.setdefault(part.version, []).append((stem, listed, part))
    same_size = SameSizeFolders(config, plan, files_by_stem, recorded)
    for shard_plan in wanting:
        shard = shard_plan.shard
        candidates = by_version.get(shard.version) or []
        if not candidates:
            same_size.apply(shard_plan)
            continue
        footers: dict[str, Any] = {}
        unknown = []
        for stem, listed, _part in candidates:
            footer = known.get(listed.uri) or _recorded_footer(recorded.get(stem + ".parquet"), listed, stem + ".parquet", metric.digest)
            if footer is None:
                unknown.append(listed)
            else:
                footers[listed.uri] = footer
        read = parallel.map_bounded(lambda listed: reads.read_footer_metadata(out_fs, listed.uri, listed.size), unknown)
        footers.update(zip((listed.uri for listed in unknown), read))
        plan.footers_read += len(unknown)
        for stem in dict.fromkeys(stem for stem, _, _ in candidates):  # the first folder whose parts cover rows
            files = [listed.uri for s, listed, _ in candidates if s == stem]
            found = _plan_shard(config.part_rows, metric.digest, shard, files, footers)
            if not found.kept:
                continue
            copies = {uri: layout.part_uri(config.output, metric.label, shard.rel, part) for part, uri, _ in found.kept}
            parallel.map_bounded(lambda pair: writes.copy_atomic(out_fs, *pair), list(copies.items()))
            adopted = _plan_shard(config.part_rows, metric.digest, shard, list(copies.values()),
                                  {copies[uri]: footers[uri] for uri in copies})
            adopted.reused_from = [uris.join(layout.metric_root(config.output, metric.label), stem)]
            adopted.existing = set(copies.values())
            plan.shards[shard.rel] = adopted
            break
        else:
            same_size.apply(shard_plan)


def manifest_parts(manifest: dict[str, Any] | None, label: str) -> dict[str, dict[str, Any]]:
    """A manifest's record of one metric's committed parts, by shard rel (empty when absent)."""
    try:
        records = manifest["metrics"][label]["parts"]
    except (KeyError, TypeError):
        return {}
    return records if isinstance(records, dict) else {}


def _recorded_footer(record: dict[str, Any] | None, listed, rel: str, digest: str) -> reads.Footer | None:
    """The footer a part has, rebuilt from the manifest's record of it, when the listing shows
    the very object the record describes (name, size, etag) and the signature is the same."""
    if not record or record.get("digest") != digest:
        return None
    name = listed.uri.rsplit("/", 1)[-1]
    part = layout.parse_part(name)
    entry = (record.get("parts") or {}).get(name)
    if part is None or not entry or entry.get("size") != listed.size or entry.get("etag") != listed.etag:
        return None
    if "skipped" not in entry or "retry" not in entry:
        return None  # a record from before skipped (or retry) rows were counted: its footer decides
    meta = incremental.part_metadata(
        rel, record["input_etag"], int(record["input_size"]), "", digest, part.start, part.stop,
        int(entry.get("errors", 0)), int(entry["skipped"]), int(entry["retry"]),
    )
    return int(entry.get("rows", -1)), meta


def _plan_shard(part_rows: int, digest: str, shard: Shard, files: list[str], footers: dict[str, Any]) -> ShardPlan:
    plan = ShardPlan(shard=shard)
    candidates: list[tuple[layout.PartName, str, int]] = []
    for uri in files:
        part = layout.parse_part_file(uri.rsplit("/", 1)[-1])
        if part is None:
            continue  # not ours: left alone
        footer = footers.get(uri)
        etag, size = shard.info.etag, shard.info.size
        if part.version == shard.version and incremental.part_is_complete(footer, etag, size, digest, part.start, part.stop):
            candidates.append((part, uri, incremental.footer_errors(footer)))  # staged: an interrupted run's, renamed at commit
            plan.kept_skipped[uri] = incremental.footer_skipped(footer)
            continue
        if incremental.footer_digest(footer) == digest:
            plan.previous.append(uri)
        plan.superseded.append(uri)  # no cover's: goes once the cover is whole (a same name is replaced: `units.staged_units`)
    candidates.sort(key=lambda item: (item[0].start, -item[0].stop, layout.is_staged(item[1])))  # own names first
    total = shard.num_rows
    if total == 0:  # an empty shard still gets one (empty) part
        empty = [c for c in candidates if c[0].start == c[0].stop == 0]
        if empty:
            plan.kept.append(empty[0])
        else:
            plan.units.append((0, 0))
        plan.superseded.extend(uri for _, uri, _ in candidates if not empty or uri != empty[0][1])
        return plan
    position, index = 0, 0
    while position < total:
        while index < len(candidates) and candidates[index][0].start < position:
            plan.superseded.append(candidates[index][1])  # overlaps the cover chosen so far
            index += 1
        if index < len(candidates) and candidates[index][0].start == position and candidates[index][0].stop > position:
            plan.kept.append(candidates[index])
            position = candidates[index][0].stop
            index += 1
            continue
        if index < len(candidates) and candidates[index][0].start == position:
            plan.superseded.append(candidates[index][1])  # an empty part inside a non-empty shard
            index += 1
            continue
        gap_end = candidates[index][0].start if index < len(candidates) else total
        plan.units.extend(_aligned_units(position, gap_end, part_rows))
        position = gap_end
    plan.superseded.extend(uri for _, uri, _ in candidates[index:])
    return plan


def _aligned_units(start: int, stop: int, part_rows: int) -> list[tuple[int, int]]:
    bounds = [start]
    boundary = (start // part_rows + 1) * part_rows
    while boundary < stop:
        bounds.append(boundary)
        boundary += part_rows
    bounds.append(stop)
    return list(zip(bounds[:-1], bounds[1:]))

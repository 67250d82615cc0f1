"""Stage 1 (driver): what this run has to do, from listings, the previous manifest, the input
footers the manifest does not vouch for and every part's footer (`docs/job.md`, "Planning from
the manifest").

* `read_shards`: list the input shards; a shard the previous manifest lists with the same
  etag and size keeps its recorded rows and column types, every other footer is checked
  (readable, `id`/`text` present, canonical column types, no absurd declared size), in
  parallel; no rows are read;
* `plan_metric`: per metric and shard, the committed parts that can be kept, the row ranges
  (units) still to score, the earlier parts that serve as the row cache, the parts a new
  cover will supersede, and outputs whose shard is gone or unreadable. Every part's footer is
  read, in parallel, and checked against itself and the manifest's record of it
  (`part_check`): a part that disagrees is not reused, and the report names it;
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
from ray_jobs.job.part_check import CheckedPart, check_part, manifest_parts, recorded_entry
from ray_jobs.job.reuse_cache import SameSizeFolders
from ray_jobs.job.vouch import known_inputs
from ray_jobs.storage import listing, parallel, shard_checks, uris, writes


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
    kept_md5: dict[str, str] = field(default_factory=dict)  # part uri -> md5 of its bytes, as read while planning
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
    footers_read: int = 0  # part footers read while planning
    # parts not reused because they disagree with themselves or the manifest: {file, field, why}
    not_reused: list[dict[str, str]] = field(default_factory=list)
    # parts of earlier runs set aside unread because no signed manifest vouches for them (`trusted=False`)
    not_trusted: int = 0
    # a signed manifest vouches (`signed=True`): a part of this signature it does not record is not reused
    recorded_only: bool = False

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
    trusted: bool = True,
    signed: bool = False,
) -> MetricPlan:
    """Per shard: keep the committed parts that cover rows from 0 on; schedule the gaps as
    units aligned to multiples of `part_rows` (so a resumed run writes the same names).

    `tree` is one listing of the output prefix (made here when not given). Every part's footer
    is read, with bounded concurrency, and checked (`part_check.check_part`) against itself and
    the previous manifest's record of it, where that record is of this signature.

    `trusted=False` (a signing key is set and no manifest it signed vouches for the folder,
    `manifest_key`): no part of an earlier run is read, kept, copied or lent as the row cache;
    every row is scored again and the new parts replace the old ones (`not_trusted` counts them).
    `signed=True` (`previous` is a manifest the key signed): a part of this signature that the
    manifest does not record (added to the folder since) is not reused, and is named."""
    plan = MetricPlan(metric=metric, recorded_only=signed)
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
    ours = [(listed, shard.rel) for shard in shards for listed in files_by_stem.get(layout.shard_stem(shard.rel), [])
            if layout.parse_part_file(listed.uri.rsplit("/", 1)[-1]) is not None]
    if trusted:
        checked = _check_parts(out_fs, plan, ours, recorded)
    else:  # unread, so no footer: each part is superseded by the new cover, none kept or lent
        checked = {}
        plan.not_trusted = len(ours)
    for shard in shards:
        files = [listed.uri for listed in files_by_stem.get(layout.shard_stem(shard.rel), [])]
        plan.shards[shard.rel] = _plan_shard(config.part_rows, metric.digest, shard, files, checked)
        plan.shards[shard.rel].existing = set(files)
    if trusted:
        _reuse_by_content(out_fs, config, plan, files_by_stem, recorded, checked)
    return plan


def _check_parts(out_fs, plan: MetricPlan, parts: list[tuple[listing.ListedFile, str]],
                 recorded: dict[str, dict[str, Any]]) -> dict[str, CheckedPart]:
    """Read and check `parts` ((listed part, the shard rel whose record may name it)), in
    parallel; each disagreement goes to `plan.not_reused`. Returns each part's check by uri."""
    digest = plan.metric.digest

    def check(item: tuple[listing.ListedFile, str]) -> CheckedPart:
        listed, rel = item
        entry = recorded_entry(recorded.get(rel), listed.uri, digest)
        found = check_part(out_fs, listed, entry, digest)
        if plan.recorded_only and entry is None and incremental.footer_digest(found.footer) == digest:
            return CheckedPart(None, found.md5, ("record", "the signed manifest does not record it (added since)"))
        return found

    found = dict(zip((listed.uri for listed, _ in parts), parallel.map_bounded(check, parts)))
    plan.footers_read += len(parts)
    plan.not_reused.extend({"file": uri, "field": part.problem[0], "why": part.problem[1]}
                           for uri, part in found.items() if part.problem is not None)
    return found


def _reuse_by_content(out_fs, config: JobConfig, plan: MetricPlan, files_by_stem, recorded,
                      known: dict[str, CheckedPart]) -> None:
    """Reuse by content (module docstring): for each shard without output of its own, the
    complete parts of another shard's folder (a vanished one: a renamed input; or a present
    one: a copy) with the same bytes (the same version in their names, footers of the same
    etag, size and signature) are copied under the shard's folder, then planned as its own
    (kept; only rows no such part covers are scored). `known`: the parts already checked."""
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
    same_size = SameSizeFolders(config, plan, files_by_stem, recorded,
                                check=lambda parts: _check_parts(out_fs, plan, parts, recorded))
    for shard_plan in wanting:
        shard = shard_plan.shard
        candidates = by_version.get(shard.version) or []
        if not candidates:
            same_size.apply(shard_plan)
            continue
        unknown = [(listed, stem + ".parquet") for stem, listed, _part in candidates if listed.uri not in known]
        known.update(_check_parts(out_fs, plan, unknown, recorded))
        footers = {listed.uri: known[listed.uri] for _, listed, _ in candidates}
        for stem in dict.fromkeys(stem for stem, _, _ in candidates):  # the first folder whose parts cover rows
            files = [listed.uri for s, listed, _ in candidates if s == stem]
            found = _plan_shard(config.part_rows, metric.digest, shard, files, footers)
            if not found.kept:
                continue
            copies = {uri: layout.part_uri(config.output, metric.label, shard.rel, part) for part, uri, _ in found.kept}
            parallel.map_bounded(lambda pair: writes.copy_atomic(out_fs, *pair), list(copies.items()))
            adopted = _plan_shard(config.part_rows, metric.digest, shard, list(copies.values()),
                                  {copies[uri]: footers[uri] for uri in copies})  # the same bytes: the same check
            adopted.reused_from = [uris.join(layout.metric_root(config.output, metric.label), stem)]
            adopted.existing = set(copies.values())
            plan.shards[shard.rel] = adopted
            break
        else:
            same_size.apply(shard_plan)


def _plan_shard(part_rows: int, digest: str, shard: Shard, files: list[str], checked: dict[str, CheckedPart]) -> ShardPlan:
    plan = ShardPlan(shard=shard)
    candidates: list[tuple[layout.PartName, str, int]] = []
    for uri in files:
        part = layout.parse_part_file(uri.rsplit("/", 1)[-1])
        if part is None:
            continue  # not ours: left alone
        found = checked.get(uri)
        footer = found.footer if found is not None else None
        etag, size = shard.info.etag, shard.info.size
        if part.version == shard.version and incremental.part_is_complete(footer, etag, size, digest, part.start, part.stop):
            candidates.append((part, uri, incremental.footer_errors(footer)))  # staged: an interrupted run's, renamed at commit
            plan.kept_skipped[uri] = incremental.footer_skipped(footer)
            if found.md5:
                plan.kept_md5[uri] = found.md5
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

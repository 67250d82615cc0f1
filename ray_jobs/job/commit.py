"""Stage 4 (driver): settle each shard's output from part names and the workers' reports.

Per metric and shard:
* a shard scored this run is covered when its kept parts and new parts tile its rows
  `[0, num_rows)` exactly (names only; `verify` then reads their footers); then its staged
  parts (written under `_next-` names because the folder held their names: an unchanged shard
  under a new signature; or left by an interrupted run) take their own names, replacing the
  old parts there, and the parts the new cover replaces (an older version of the shard,
  overlaps) are removed: replaced, not lost; a gap is a `JobError` (rows lost);
* a shard that is bad this run (unreadable, failed the checks, failed while scoring) keeps
  the output it had, as it was: nothing of it is removed or renamed, and the parts this run
  wrote for it, staged or under names its folder did not hold, are removed (a shard that failed
  half way must not show half its rows); its folder, when it held output before, is reported in
  the manifest (`kept_for_bad_shards`);
* output of a shard that is no longer in the input is kept and reported, and removed only
  with `prune: true`, each removal recorded in the manifest (and the summary line).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ray_jobs.job import layout
from ray_jobs.job.errors import JobError
from ray_jobs.job.plan import MetricPlan
from ray_jobs.storage import parallel, uris, writes


@dataclass
class Cover:
    """The parts that make up one shard's output after this run."""

    rel: str
    uri: str
    num_rows: int
    parts: list[tuple[layout.PartName, str]] = field(default_factory=list)
    new: set[str] = field(default_factory=set)  # uris written this run (staged ones by their staged uri)
    renamed: dict[str, str] = field(default_factory=dict)  # uri in `parts` -> the staged uri it was committed from


@dataclass
class CommitResult:
    covers: list[Cover] = field(default_factory=list)
    replaced: int = 0  # older parts removed because a new complete cover replaced them
    renamed: int = 0  # staged parts moved to their own names (replacing parts of another signature there)
    kept_for_bad_shards: list[str] = field(default_factory=list)  # shard folders kept as they were
    orphaned: list[str] = field(default_factory=list)  # shard folders whose input is gone, kept
    pruned: list[str] = field(default_factory=list)  # files removed by `prune: true`


def commit_metric(out_fs, output: str, plan: MetricPlan, reports: list[dict], bad_uris: set[str], bad_rels: set[str], prune: bool) -> CommitResult:
    label = plan.metric.label
    result = CommitResult()
    removals: list[str] = []
    moves: list[tuple[str, str]] = []  # (staged uri, its own name)
    new_by_rel: dict[str, list[tuple[layout.PartName, str]]] = {}
    for report in reports:
        name = layout.parse_part_file(report["part"].rsplit("/", 1)[-1])
        new_by_rel.setdefault(report["rel"], []).append((name, report["part"]))
    for rel, shard_plan in plan.shards.items():
        shard = shard_plan.shard
        new = new_by_rel.get(rel, [])
        if shard.info.uri in bad_uris:
            removals.extend(uri for _, uri in new if layout.is_staged(uri) or uri not in shard_plan.existing)
            if shard_plan.existing:
                result.kept_for_bad_shards.append(layout.shard_dir(output, label, rel))
            continue
        parts = sorted([(part, uri) for part, uri, _ in shard_plan.kept] + new)
        position = 0
        for part, _ in parts:
            if part.start != position:
                break
            position = part.stop
        if position != shard.num_rows or (shard.num_rows == 0 and not parts):
            raise JobError(
                f"metric {label}: {shard.info.uri}: rows {position} to {shard.num_rows} have no committed output "
                f"(parts: {', '.join(part.filename() for part, _ in parts) or 'none'})"
            )
        renamed = {layout.unstaged_uri(uri): uri for _, uri in parts if layout.is_staged(uri)}
        moves.extend((staged, own) for own, staged in renamed.items())
        chosen = {uri for _, uri in parts} | set(renamed)
        for uri in shard_plan.superseded:
            if uri not in chosen:
                removals.append(uri)
                result.replaced += 1
        parts = [(part, layout.unstaged_uri(uri)) for part, uri in parts]
        result.covers.append(Cover(rel, shard.info.uri, shard.num_rows, parts, {uri for _, uri in new}, renamed))
    bad_stems = {layout.shard_stem(rel) for rel in bad_rels}
    for stem, files in sorted(plan.outside.items()):
        folder = uris.join(layout.metric_root(output, label), stem) if stem else layout.metric_root(output, label)
        if stem in bad_stems:
            result.kept_for_bad_shards.append(folder)
        elif prune:
            removals.extend(files)
            result.pruned.extend(files)
        else:
            result.orphaned.append(folder)
    # after every cover is settled: staged parts into place first, then what the covers replaced
    parallel.map_bounded(lambda move: writes.move_into_place(out_fs, *move), moves)
    result.renamed = len(moves)
    parallel.map_bounded(lambda uri: writes.remove(out_fs, uri), removals)
    return result

"""The scoring job, stage by stage (`docs/job.md`): each metric resolved once, then

    plan (driver) -> check (workers) -> score (workers: read -> [prepare] -> score + write, per metric)
    -> commit (driver) -> verify and report (driver) -> manifest (driver, last)

The driver handles shards and parts, never rows."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from ray_jobs.config import JobConfig
from ray_jobs.job import check as check_stage
from ray_jobs.job import cluster, id_index, layout, manifest_key, vouch
from ray_jobs.job.commit import commit_metric
from ray_jobs.job.errors import JobError
from ray_jobs.job.manifest import build_manifest, previous_manifest, write_manifest
from ray_jobs.job.metrics import resolve_metrics
from ray_jobs.job.pipeline import run_units
from ray_jobs.job.plan import plan_metric, read_shards
from ray_jobs.job.report import metric_report
from ray_jobs.job.verify import verify_metric
from ray_jobs.session import RaySession
from ray_jobs.storage import clients, listing, uris, writes
from ray_jobs.storage.metering import RequestMeter
from scoring import applicability
from scoring.schema import carried_columns


def run_job(config: JobConfig) -> dict[str, Any]:
    """Run a validated job; returns the manifest (also written to `OUT/manifest.json`)."""
    key = manifest_key.load_key(config.manifest_key_env)  # on the driver, before any work; never leaves it
    session = RaySession(address=config.ray.address, num_cpus=config.ray.num_cpus, temp_dir=config.ray.temp_dir,
                         object_store_memory=config.ray.object_store_memory)
    try:
        return _run(config, session, key)
    finally:
        session.close()


def _run(config: JobConfig, session: RaySession, key: manifest_key.ManifestKey | None = None) -> dict[str, Any]:
    started_at = dt.datetime.now(dt.timezone.utc)
    t0 = time.perf_counter()
    metrics = resolve_metrics(config, session)
    pools = [metric.pool for metric in metrics]
    meter = RequestMeter()
    in_fs = clients.fsspec_filesystem(config.input, config.s3, meter)
    out_fs = clients.fsspec_filesystem(config.output, config.s3, meter)
    skip_bad = config.skip_bad_shards

    # 1. plan: shards and parts from listings and the previous manifest; input footers only
    #    where the manifest does not vouch for them; every part's footer, checked against it
    needed = tuple(dict.fromkeys(c for metric in metrics for c in metric.read_columns))
    with meter.waiting():
        previous, previous_problem = previous_manifest(out_fs, config, key)
        shards, bad, not_read = _read_input(config, in_fs, needed, previous, metrics)
        writes.probe_writable(out_fs, config.output)
        tree = listing.list_tree(out_fs, config.output)
        vouched = previous is None
        if previous is not None:  # numbers of the right type may still be false (`vouch.py`)
            false, vouched = vouch.false_record(config, previous, shards, tree, in_fs, needed)
            if false is not None:  # set aside whole: every footer read, as without a manifest
                previous, previous_problem = None, false
                shards, bad, not_read = _read_input(config, in_fs, needed, None, metrics)
        layout.refuse_folded_outputs(config, [s.info for s in shards], tree)  # renamed by case only, on macOS/Windows
        writes.clean_leftovers(out_fs, config.output, tree=tree)
        manifest_uri = layout.manifest_uri(config.output)
        if uris.fs_path(manifest_uri) in tree:
            writes.remove(out_fs, manifest_uri)  # no manifest while outputs may change
        # with a key, earlier parts are reused only under a manifest it signed (a forged part can agree with itself)
        trusted = key is None or previous is not None
        signed = key is not None and previous is not None  # only the parts it records are reused
        plans = [plan_metric(out_fs, config, metric, shards, tree, previous, trusted, signed) for metric in metrics]

    # 2. check: ids per shard and across shards, in the workers; only the shards the id index
    #    does not know are read (all of them without a usable index)
    duplicates = _carried_duplicates(previous, shards) if vouched else None  # a record not corroborated: ids checked
    id_check: dict[str, Any] = {"index": "not needed", "id_columns_read": 0, "index_written": False}
    if duplicates is None:
        session.ensure()
        cluster.check_pool_fits(pools, session)
        with meter.waiting():
            header = id_index.read_index_header(out_fs, config.output, tree) if trusted else None
        checked = check_stage.check_shards(shards, config, header)
        bad_ids, duplicates = checked.bad, checked.duplicates
        id_check = {"index": checked.index, "id_columns_read": checked.id_columns_read,
                    "index_written": checked.index_written}
        if checked.unusable:
            id_check["index_unusable"] = checked.unusable
        if bad_ids:
            failed = [{"file": uri, "rel": _rel(shards, uri), "error": reason} for uri, reason in bad_ids.items()]
            _refuse_bad(skip_bad, failed)
            bad += failed
            shards = [s for s in shards if s.info.uri not in bad_ids]
            for plan in plans:  # nothing of theirs is scored; the commit keeps their output as it was
                for shard_plan in plan.shards.values():
                    if shard_plan.shard.info.uri in bad_ids:
                        shard_plan.units = []
            if not shards:
                raise JobError(f"every shard under {config.input} is bad")

    # 3. score: workers read, score and write parts (`ray_jobs/job/pipeline.py`)
    carried = [c for c in carried_columns({c for s in shards for c in s.columns}) if c != "id"]
    metric_started = time.perf_counter()
    scored: dict[str, Any] = {"reports": {}, "bad": {}, "first_at": None, "rows_after_first": 0}
    if any(p.units for plan in plans for p in plan.shards.values()):
        session.ensure()
        cluster.check_pool_fits(pools, session)
        scored = run_units(config, plans, carried)
    if scored["bad"]:
        failed = [{"file": uri, "rel": _rel(shards, uri), "error": reason} for uri, reason in scored["bad"].items()]
        _refuse_bad(skip_bad, failed)
        bad += failed
    bad_uris = {item["file"] for item in bad}
    bad_rels = {item["rel"] for item in bad if item.get("rel")}
    reports = {plan.metric.label: scored["reports"].get(plan.metric.label, []) for plan in plans}

    # 4. commit per metric, from the workers' reports, then one listing
    with meter.waiting():
        committed = [commit_metric(out_fs, config.output, plan, reports[plan.metric.label], bad_uris, bad_rels, config.prune)
                     for plan in plans]
        listed = _listed_after(out_fs, config.output, plans, committed, tree, any(reports.values()))

    # 5. verify and report per metric: rows out == rows in
    verified = [verify_metric(plan, done, reports[plan.metric.label], listed) for plan, done in zip(plans, committed)]
    metrics_report = {
        plan.metric.label: metric_report(config.output, plan, done, check, reports[plan.metric.label], scored, metric_started)
        for plan, done, check in zip(plans, committed, verified)
    }

    # 6. manifest, last
    good = [s for s in shards if s.info.uri not in bad_uris]
    schema_notes = [
        f"{s.info.uri} lacks column '{column}' read by metric {metric.label} (the scores that need it are left out of its rows)"
        for metric in metrics
        for s in good
        for column in metric.read_columns
        if column not in s.columns and column != "id"
    ]
    manifest = build_manifest(
        config, metrics_report, {metric.label: metric.signature for metric in metrics}, good,
        [{"file": item["file"], "error": item["error"]} for item in bad], schema_notes, duplicates, started_at,
        time.perf_counter() - t0,
    )
    manifest["id_check"] = id_check
    if previous_problem:  # the previous manifest was set aside: its footers were read instead
        manifest["previous_manifest_ignored"] = previous_problem
    not_trusted = sum(plan.not_trusted for plan in plans)
    if not_trusted:  # a key is set and no manifest it signed vouched for the earlier parts
        why = (f"previous manifest set aside: {previous_problem}" if previous_problem
               else "no readable previous manifest to vouch for it")
        manifest["earlier_output_not_trusted"] = {"why": why, "parts": not_trusted}
    if not_read:  # named like Parquet, yet no shard: their rows are not in rows_in
        manifest["inputs_not_read"] = not_read
    with meter.waiting():
        written = write_manifest(out_fs, config, manifest, meter, key)
    for label, report in metrics_report.items():  # its columns are there, but null in every row
        if report["rows_out"] and report["rows_skipped"] == report["rows_out"]:
            raise applicability.NotApplicable(
                applicability.no_row_message(label, report["rows_out"], report.get("skip_reasons") or {}))
    return written


def _read_input(config: JobConfig, in_fs, needed, previous, metrics):
    """`read_shards`, then the bad shards refused (unless skipped) and every metric checked
    to find its columns in some shard (exit 2 before any work)."""
    shards, bad, not_read = read_shards(config, in_fs, needed, previous)
    _refuse_bad(config.skip_bad_shards, bad)
    if not shards:
        raise JobError(f"every shard under {config.input} is bad")
    present = {column for shard in shards for column in shard.columns}
    for metric in metrics:  # a metric no shard has the columns for
        applicability.check_columns(metric.label, metric.score_needs, present, "absent from every input shard")
    return shards, bad, not_read


def _listed_after(out_fs, output: str, plans, committed, tree, wrote: bool) -> dict[str, Any]:
    """The output files after the commit: the folders this run wrote to or removed from are
    listed again when they are few; many (a first run): the whole prefix, in fewer LISTs;
    elsewhere the plan's listing stands."""
    touched = {
        layout.shard_dir(output, plan.metric.label, rel)
        for plan in plans
        for rel, shard_plan in plan.shards.items()
        if shard_plan.units or shard_plan.superseded or shard_plan.reused_from
    } | {uri.rsplit("/", 1)[0] for result in committed for uri in result.pruned} | {
        layout.shard_dir(output, plan.metric.label, cover.rel)
        for plan, result in zip(plans, committed) for cover in result.covers if cover.renamed
    }
    reused = any(p.reused_from for plan in plans for p in plan.shards.values())
    if wrote or reused or any(c.replaced or c.pruned or c.renamed for c in committed):
        few = len(touched) <= len(plans)
        tree = listing.relist(out_fs, output, tree, touched) if few else listing.list_tree(out_fs, output)
    return {f.uri: f for f in listing.output_files(output, tree)}


def _rel(shards, uri: str) -> str | None:
    return next((s.rel for s in shards if s.info.uri == uri), None)


def _refuse_bad(skip_bad_shards: bool, bad: list[dict[str, str]]) -> None:
    if bad and not skip_bad_shards:
        listed = "; ".join(f"{item['file']}: {item['error']}" for item in bad[:5])
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        raise JobError(
            f"{len(bad)} bad input shard(s) (set skip_bad_shards: true to skip them and record them in the manifest): {listed}{more}"
        )


def _carried_duplicates(previous: dict[str, Any] | None, shards) -> dict[str, Any] | None:
    """The previous run's cross-shard duplicate note, when it was made over the same files."""
    if not previous or previous.get("duplicate_ids_across_shards") is None:
        return None
    files = {(f["file"], f["etag"], f["size"]) for f in previous.get("input", {}).get("files", [])}
    if files != {(s.info.uri, s.info.etag, s.info.size) for s in shards}:
        return None
    return previous["duplicate_ids_across_shards"]

"""The scoring job: Parquet shards (local or `s3://`) -> Ray Data actor pools -> Parquet.

    python -m ray_jobs.score_corpus --config JOB.yaml       # or: ctgscore run JOB.yaml
    ray job submit --working-dir . -- python -m ray_jobs.score_corpus --config JOB.yaml

`run_job` runs the stages of `ray_jobs/job/` in order: plan (driver: listings and footers)
-> check (workers: ids, of the shards the id index does not know) -> score (workers: read once, every metric's pool in turn, each
writes its own parts) -> commit (driver: which parts form each shard's output) -> verify
(driver: rows out == rows in from footers) -> manifest (written last). The driver handles
shards and parts, never rows. Layout and guarantees: `docs/job.md`.

The Ray layer only moves data: scores come from `metric.score_rows(rows)` (`scoring/metric.py`),
which keeps one result per row, with `error`/`warning`, and bisects failing batches.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from typing import Any

from ray_jobs.config import ConfigError, JobConfig, load_config, metric_pool
from ray_jobs.job import check as check_stage
from ray_jobs.job import layout
from ray_jobs.job.commit import commit_metric
from ray_jobs.job.errors import JobError
from ray_jobs.job.manifest import build_manifest, error_rate_exceeded, read_previous, summary_line, write_manifest
from ray_jobs.job.plan import MetricPlan, describe_metric, plan_metric, read_shards
from ray_jobs.job.score import run_units
from ray_jobs.job.verify import verify_metric
from ray_jobs.session import RaySession
from ray_jobs.storage import clients, listing, uris, writes
from ray_jobs.storage.metering import RequestMeter
from scoring.schema import carried_columns

__all__ = ["ConfigError", "JobError", "error_rate_exceeded", "load_config", "run_job", "summary_line"]

MAX_ERROR_SAMPLES = 20


def run_job(config: JobConfig) -> dict[str, Any]:
    """Run a validated job; returns the manifest (also written to `OUT/manifest.json`)."""
    session = RaySession(
        address=config.ray.address,
        num_cpus=config.ray.num_cpus,
        temp_dir=config.ray.temp_dir,
        object_store_memory=config.ray.object_store_memory,
    )
    try:
        return _run(config, session)
    finally:
        session.close()


def _run(config: JobConfig, session: RaySession) -> dict[str, Any]:
    started_at = dt.datetime.now(dt.timezone.utc)
    t0 = time.perf_counter()
    if any(metric_pool(config, spec).num_gpus for spec in config.metrics):
        session.ensure()  # the metric is described on a GPU worker
        _check_local_gpus(config, session)
    infos = [describe_metric(config, spec) for spec in config.metrics]
    meter = RequestMeter()
    in_fs = clients.fsspec_filesystem(config.input, config.s3, meter)
    out_fs = clients.fsspec_filesystem(config.output, config.s3, meter)

    # 1. plan: shards and parts from listings and the previous manifest; footers only where
    #    the manifest does not vouch for them
    needed = tuple(dict.fromkeys(c for info in infos for c in info.read_columns))
    with meter.waiting():
        previous = read_previous(out_fs, config)
        shards, bad = read_shards(config, in_fs, needed, previous)
        _refuse_bad(config, bad)
        if not shards:
            raise JobError(f"every shard under {config.input} is bad")
        writes.probe_writable(out_fs, config.output)
        tree = listing.list_tree(out_fs, config.output)
        writes.clean_leftovers(out_fs, config.output, tree=tree)
        manifest_uri = layout.manifest_uri(config.output)
        if uris.fs_path(manifest_uri) in tree:
            writes.remove(out_fs, manifest_uri)  # no manifest while outputs may change
        plans = [plan_metric(out_fs, config, info, shards, tree, previous) for info in infos]

    # 2. check: ids per shard and across shards, in the workers; only the shards the id index
    #    does not know are read (all of them without a usable index)
    duplicates = _carried_duplicates(previous, shards)
    id_check: dict[str, Any] = {"index": "not needed", "id_columns_read": 0, "index_written": False}
    if duplicates is None:
        session.ensure()
        _check_pool_fits(config, session)
        with meter.waiting():
            header = check_stage.read_index_header(out_fs, config.output, tree)
        checked = check_stage.check_shards(shards, config, header)
        bad_ids, duplicates = checked.bad, checked.duplicates
        id_check = {"index": checked.index, "id_columns_read": checked.id_columns_read,
                    "index_written": checked.index_written}
        if checked.unusable:
            id_check["index_unusable"] = checked.unusable
        if bad_ids:
            failed = [{"file": uri, "rel": _rel(shards, uri), "error": reason} for uri, reason in bad_ids.items()]
            _refuse_bad(config, failed)
            bad += failed
            shards = [s for s in shards if s.info.uri not in bad_ids]
            for plan in plans:
                for shard_rel in [r for r, p in plan.shards.items() if p.shard.info.uri in bad_ids]:
                    del plan.shards[shard_rel]
            if not shards:
                raise JobError(f"every shard under {config.input} is bad")

    # 3. score: workers read, score and write parts
    carried = [c for c in carried_columns({c for s in shards for c in s.columns}) if c != "id"]
    metric_started = time.perf_counter()
    scored: dict[str, Any] = {"reports": {}, "bad": {}, "first_at": None, "rows_after_first": 0}
    if any(p.units for plan in plans for p in plan.shards.values()):
        session.ensure()
        _check_pool_fits(config, session)
        scored = run_units(config, plans, carried)
    if scored["bad"]:
        failed = [{"file": uri, "rel": _rel(shards, uri), "error": reason} for uri, reason in scored["bad"].items()]
        _refuse_bad(config, failed)
        bad += failed
    bad_uris = {item["file"] for item in bad}
    bad_rels = {item["rel"] for item in bad if item.get("rel")}

    # 4.-5. commit and verify, per metric, from the workers' reports and one listing
    metrics_report = {}
    with meter.waiting():
        committed = {
            plan.info.spec.label: commit_metric(out_fs, config.output, plan, scored["reports"].get(plan.info.spec.label, []),
                                                bad_uris, bad_rels, config.prune)
            for plan in plans
        }
        # the folders this run wrote to or removed from are listed again; elsewhere the plan's listing stands
        touched = {
            layout.shard_dir(config.output, plan.info.spec.label, rel)
            for plan in plans
            for rel, shard_plan in plan.shards.items()
            if shard_plan.units or shard_plan.superseded
        } | {uri.rsplit("/", 1)[0] for result in committed.values() for uri in result.pruned}
        changed = any(scored["reports"].values()) or any(c.replaced or c.pruned for c in committed.values())
        if changed:  # a few touched folders: those; many (a first run): the whole prefix, in fewer LISTs
            few = len(touched) <= len(plans)
            tree = listing.relist(out_fs, config.output, tree, touched) if few else listing.list_tree(out_fs, config.output)
        listed = {f.uri: f for f in listing.output_files(config.output, tree)}
    for plan in plans:
        label = plan.info.spec.label
        reports = scored["reports"].get(label, [])
        metrics_report[label] = _settle_metric(config, plan, committed[label], reports, listed, scored, metric_started)

    # 6. manifest, last
    good = [s for s in shards if s.info.uri not in bad_uris]
    schema_notes = [
        f"{s.info.uri} lacks column '{column}' read by metric {info.spec.label} (its rows get an error)"
        for info in infos
        for s in good
        for column in info.read_columns
        if column not in s.columns and column != "id"
    ]
    manifest = build_manifest(
        config,
        metrics_report,
        {info.spec.label: info.signature for info in infos},
        good,
        [{"file": item["file"], "error": item["error"]} for item in bad],
        schema_notes,
        duplicates,
        started_at,
        time.perf_counter() - t0,
    )
    manifest["id_check"] = id_check
    with meter.waiting():
        return write_manifest(out_fs, config, manifest, meter)


def _settle_metric(config, plan: MetricPlan, committed, reports, listed, scored, metric_started) -> dict[str, Any]:
    info = plan.info
    verified = verify_metric(plan, committed, reports, listed)
    rows_out, rows_error = verified.rows_out, verified.rows_error
    covered = {cover.rel for cover in committed.covers}
    rows_in = sum(p.shard.num_rows for rel, p in plan.shards.items() if rel in covered)
    if rows_out != rows_in:
        raise JobError(f"metric {info.spec.label}: {rows_out} rows out != {rows_in} rows in")
    good_reports = [r for r in reports if r["rel"] in covered]
    rows_new = sum(r["rows"] for r in good_reports)
    cache_hits = sum(r["cached"] for r in good_reports)
    reasons: dict[str, int] = {}
    samples: list[dict] = []
    for report in good_reports:
        for reason, count in report["reasons"].items():
            reasons[reason] = reasons.get(reason, 0) + count
        samples.extend(report["samples"][: max(0, MAX_ERROR_SAMPLES - len(samples))])
    wall = (scored.get("ended") or time.perf_counter()) - scored.get("started", metric_started)
    first_at, ended = scored.get("first_at"), scored.get("ended")
    steady = scored["rows_after_first"] / (ended - first_at) if first_at and ended and ended > first_at else None
    scored_rows = rows_new - cache_hits
    rows_skipped = sum(r.get("skipped", 0) for r in good_reports) + sum(
        p.kept_skipped.get(uri, 0) for rel, p in plan.shards.items() if rel in covered for _, uri, _ in p.kept
    )
    return {
        "metric": info.spec.name,
        "params": info.params,
        "signature": info.signature,
        "signature_digest": info.digest,
        "described_on": info.described_on,
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_scored": scored_rows,
        "rows_cached": rows_out - scored_rows,
        "rows_error": rows_error,
        "rows_skipped": rows_skipped,
        "rows_retry": sum(r.get("retry", 0) for r in good_reports),  # errors the next run scores again (single-row OOM)
        "error_rate": round(rows_error / rows_out, 6) if rows_out else 0.0,
        "parts_written": len(good_reports),
        "parts_kept": sum(len(p.kept) for rel, p in plan.shards.items() if rel in covered),
        "parts_replaced": committed.replaced,
        "shards_reused": sum(1 for rel, p in plan.shards.items() if rel in covered and not p.units),
        "shards_scored": sum(1 for rel, p in plan.shards.items() if rel in covered and p.units),
        "kept_for_bad_shards": committed.kept_for_bad_shards,
        "orphaned_outputs": committed.orphaned,
        "pruned_outputs": committed.pruned,
        "error_reasons": dict(sorted(reasons.items(), key=lambda item: -item[1])[:20]),
        "error_samples": samples,
        "wall_s": round(wall, 3) if good_reports else 0.0,
        "rows_per_s": round(scored_rows / wall, 2) if good_reports and wall > 0 else 0.0,
        "steady_rows_per_s": round(steady, 2) if steady else None,
        "footers_read": plan.footers_read,
        "parts": verified.parts,
        "outputs": [
            {"input": cover.uri, "folder": layout.shard_dir(config.output, info.spec.label, cover.rel),
             "parts": len(cover.parts), "rows": cover.num_rows}
            for cover in committed.covers
        ],
    }


def _rel(shards, uri: str) -> str | None:
    return next((s.rel for s in shards if s.info.uri == uri), None)


def _refuse_bad(config: JobConfig, bad: list[dict[str, str]]) -> None:
    if bad and not config.skip_bad_shards:
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


def _check_local_gpus(config: JobConfig, session: RaySession) -> None:
    if session.local:
        import ray

        gpus = ray.cluster_resources().get("GPU", 0)
        wanted = max(metric_pool(config, spec).num_gpus for spec in config.metrics)
        if gpus < wanted:  # a local Ray has no autoscaler: it would wait forever
            raise ConfigError(f"'pool.num_gpus' is {wanted:g} but this local Ray has {gpus:g} GPU(s)")


def _check_pool_fits(config: JobConfig, session: RaySession) -> None:
    """On a local Ray (fixed size, no autoscaler), a pool whose actors take every CPU starves
    Ray Data's read tasks and hangs without an error (measured on 2 cores): refuse it."""
    if not session.local:
        return
    import ray

    cpus = ray.cluster_resources().get("CPU", 0)
    needed = sum(metric_pool(config, spec).min_size * metric_pool(config, spec).num_cpus for spec in config.metrics)
    if cpus and needed > cpus - 0.5:
        raise ConfigError(
            f"pool.min_size x pool.num_cpus x {len(config.metrics)} metric(s) = {needed:g} CPUs leaves less than half "
            f"of one of this local Ray's {cpus:g} CPUs for reading; Ray Data would hang. Use fractional num_cpus "
            f"(e.g. 0.25) or a smaller pool"
        )


if __name__ == "__main__":  # for `ray job submit`: the flags of `ctgscore run`, without the CLI package
    from ray_jobs.entrypoint import main

    sys.exit(main())

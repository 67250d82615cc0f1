"""Stage 5, the per-metric report of the manifest (driver): verified rows out == rows in,
then rows scored, reused, in error and skipped, parts written and kept, errors by reason,
throughput, and the outputs per input shard."""

from __future__ import annotations

import time
from typing import Any

from ray_jobs.job import layout
from ray_jobs.job.errors import JobError

MAX_ERROR_SAMPLES = 20
KEPT_ERRORS = "in parts kept from earlier runs (each row's reason is in its error column)"


def metric_report(output: str, plan, committed, verified, reports, scored, metric_started) -> dict[str, Any]:
    """The manifest's entry for one metric (`verified`: `verify.verify_metric`'s result)."""
    metric = plan.metric
    rows_out, rows_error = verified.rows_out, verified.rows_error
    covered = {cover.rel for cover in committed.covers}
    rows_in = sum(p.shard.num_rows for rel, p in plan.shards.items() if rel in covered)
    if rows_out != rows_in:
        raise JobError(f"metric {metric.label}: {rows_out} rows out != {rows_in} rows in")
    good_reports = [r for r in reports if r["rel"] in covered]
    rows_new = sum(r["rows"] for r in good_reports)
    cache_hits = sum(r["cached"] for r in good_reports)
    reasons: dict[str, int] = {}
    samples: list[dict] = []
    for report in good_reports:
        for reason, count in report["reasons"].items():
            reasons[reason] = reasons.get(reason, 0) + count
        samples.extend(report["samples"][: max(0, MAX_ERROR_SAMPLES - len(samples))])
    kept_errors = sum(errors for rel, p in plan.shards.items() if rel in covered for _, _, errors in p.kept)
    if kept_errors:  # their reasons are in those parts' rows, not read again: counted, so the reasons add up
        reasons[KEPT_ERRORS] = kept_errors
    wall = (scored.get("ended") or time.perf_counter()) - scored.get("started", metric_started)
    first_at, ended = scored.get("first_at"), scored.get("ended")
    steady = scored["rows_after_first"] / (ended - first_at) if first_at and ended and ended > first_at else None
    scored_rows = rows_new - cache_hits
    rows_skipped = sum(r.get("skipped", 0) for r in good_reports) + sum(
        p.kept_skipped.get(uri, 0) for rel, p in plan.shards.items() if rel in covered for _, uri, _ in p.kept
    )
    summary = {
        "metric": metric.spec.name,
        "params": metric.params,
        "signature": metric.signature,
        "signature_digest": metric.digest,
        "described_on": metric.described_on,
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_scored": scored_rows,
        "rows_cached": rows_out - scored_rows,
        "rows_error": rows_error,
        "rows_skipped": rows_skipped,
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
            {"input": cover.uri, "folder": layout.shard_dir(output, metric.label, cover.rel),
             "parts": len(cover.parts), "rows": cover.num_rows}
            for cover in committed.covers
        ],
    }
    skip_reasons: dict[str, int] = {}
    for report in good_reports:  # parts written this run (a kept part's reasons are not read again)
        for reason, count in (report.get("skip_reasons") or {}).items():
            skip_reasons[reason] = skip_reasons.get(reason, 0) + count
    partial = sum(r.get("partial", 0) for r in good_reports)
    if partial:  # rows that got some of their scores, the others left out for lack of a column
        summary["rows_partial"] = partial
    warned = sum(r.get("warnings", 0) for r in good_reports)
    if warned:  # rows with a `warning` (truncation, special tokens), of the parts written this run
        summary["rows_warning"] = warned
    by_rel: dict[str, list[dict]] = {}  # grouped once: one pass per renamed shard would be quadratic
    for report in good_reports:
        by_rel.setdefault(report["rel"], []).append(report)
    reused = {rel: _lenders(p, by_rel.get(rel, [])) for rel, p in plan.shards.items()
              if rel in covered and p.reused_from}
    reused = {rel: folders for rel, folders in reused.items() if folders}
    if reused:  # renamed inputs: their scores copied (or, under another ETag, found in the row cache) from the same content
        summary["reused_by_content"] = reused
    if skip_reasons:
        summary["skip_reasons"] = dict(sorted(skip_reasons.items(), key=lambda item: -item[1])[:20])
    retry = sum(r.get("retry", 0) for r in good_reports)
    if retry:  # errors the next run scores again (out of memory on a single row), counted apart
        summary["rows_retry"] = retry
    if plan.not_reused:  # parts of earlier runs that disagree with themselves or the manifest: scored again
        summary["parts_not_reused"] = list(plan.not_reused)
    return summary


def _lenders(shard_plan, reports: list[dict]) -> list[str]:
    """The folders that supplied a renamed shard's rows: the one its parts were copied from, or,
    of the folders lent as its row cache (`reuse_cache.SameSizeFolders`), those some row was
    found in, as the workers counted them (`lent` of their reports), in the plan's order."""
    if shard_plan.kept:
        return list(shard_plan.reused_from)
    supplied = {folder for report in reports for folder, count in (report.get("lent") or {}).items() if count}
    return [folder for folder in shard_plan.reused_from if folder in supplied] + sorted(supplied - set(shard_plan.reused_from))

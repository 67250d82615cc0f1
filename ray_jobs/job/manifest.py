"""Stage 6 (driver): the run's manifest, written last and atomically beside the metric
folders (`OUT/manifest.json`; its presence means a complete run), the one-line summary, and
the error-rate check the CLI turns into its exit code.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ray_jobs import io as jio
from ray_jobs.config import JobConfig
from ray_jobs.job import layout

VERSION = "2"
LAYOUT = "OUT/<label>/<shard path without .parquet>/part-<start>-<stop>-<input version>.parquet"


def build_manifest(
    config: JobConfig,
    metrics: dict[str, dict[str, Any]],
    metric_signatures: dict[str, str],
    shards: list,
    bad: list[dict[str, str]],
    schema_notes: list[str],
    duplicates: dict[str, Any] | None,
    started_at: dt.datetime,
    wall_s: float,
) -> dict[str, Any]:
    from scoring.signature import Signature, library_versions

    job_signature = Signature(
        "ctgscore.ray_job",
        VERSION,
        {
            "metrics": metric_signatures,
            "batch_size": config.batch_size,
            "part_rows": config.part_rows,
            "libraries": library_versions("ray", "pyarrow", "torch", "transformers"),
        },
    )
    rows_in = sum(shard.num_rows for shard in shards)
    return {
        "signature": str(job_signature),
        "signature_digest": job_signature.digest,
        "config": config.as_dict(),
        "layout": LAYOUT,
        "started_at": started_at.isoformat(),
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "wall_s": round(wall_s, 3),
        "rows_per_s": round(rows_in * len(metrics) / wall_s, 2) if wall_s > 0 else None,
        "input": {
            "prefix": config.input,
            "files": [
                {"file": s.info.uri, "size": s.info.size, "etag": s.info.etag, "rows": s.num_rows} for s in shards
            ],
            "rows": rows_in,
        },
        "bad_shards": bad,
        "schema_notes": schema_notes,
        "duplicate_ids_across_shards": duplicates,
        "metrics": metrics,
    }


def write_manifest(out_fs, config: JobConfig, manifest: dict[str, Any]) -> dict[str, Any]:
    uri = layout.manifest_uri(config.output)
    jio.put_json_atomic(out_fs, uri, manifest)
    return {**manifest, "manifest": uri}


def read_previous(out_fs, config: JobConfig) -> dict[str, Any] | None:
    """The last complete run's manifest, if any (used for notes that depend on every shard)."""
    import json

    uri = layout.manifest_uri(config.output)
    try:
        with out_fs.open(jio.fs_path(uri), "rb") as handle:
            return json.loads(handle.read())
    except Exception:  # noqa: BLE001 - no (readable) previous manifest: nothing carried over
        return None


def error_rate_exceeded(manifest: dict[str, Any], max_error_rate: float | None = None) -> list[str]:
    """One message per metric whose share of error rows is above `max_error_rate` (default:
    the job config's, 0.1 unless set). Empty when every metric is within it. Skipped rows
    (rows a metric does not apply to) are not errors."""
    if max_error_rate is None:
        max_error_rate = float(manifest.get("config", {}).get("max_error_rate", 0.1))
    messages = []
    for label, report in manifest["metrics"].items():
        rows = report.get("rows_out") or 0
        errors = report.get("rows_error") or 0
        if rows and errors / rows > max_error_rate:
            messages.append(
                f"metric {label}: {errors} of {rows} rows ({100 * errors / rows:.1f}%) have an error, "
                f"above max_error_rate {max_error_rate:g}"
            )
    return messages


def summary_line(manifest: dict[str, Any]) -> str:
    parts = []
    for label, report in manifest["metrics"].items():
        parts.append(
            f"{label}: {report['rows_in']} in -> {report['rows_out']} out, {report['rows_scored']} scored, "
            f"{report['rows_cached']} reused, {report['rows_error']} errors"
            + (f", {report['rows_skipped']} skipped" if report.get("rows_skipped") else "")
        )
    notes = []
    if manifest["bad_shards"]:
        notes.append(f"{len(manifest['bad_shards'])} bad shard(s) skipped, their earlier output kept")
    duplicates = manifest.get("duplicate_ids_across_shards") or {}
    if duplicates.get("count"):
        notes.append(f"{duplicates['count']} id(s) in more than one shard")
    pruned = sorted({uri for report in manifest["metrics"].values() for uri in report.get("pruned_outputs", [])})
    if pruned:
        notes.append(f"pruned {len(pruned)} output file(s) of vanished shards: " + ", ".join(pruned))
    orphaned = sorted({uri for report in manifest["metrics"].values() for uri in report.get("orphaned_outputs", [])})
    if orphaned:
        notes.append(f"{len(orphaned)} output folder(s) of vanished shards kept (prune: true removes them)")
    extra = "".join(f", {note}" for note in notes)
    return (
        f"ctgscore run: {len(manifest['input']['files'])} shards{extra}; " + "; ".join(parts)
        + f"; {manifest['wall_s']:.1f} s; manifest {manifest.get('manifest')}"
    )

"""Stage 6 (driver): the run's manifest, written last and atomically beside the metric
folders (`OUT/manifest.json`; its presence means a complete run), the one-line summary, and
the error-rate check the CLI turns into its exit code.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ray_jobs.config import JobConfig
from ray_jobs.job import layout
from ray_jobs.storage import listing, reads, uris, writes
from scoring.error_rate import exceeds

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
                {"file": s.info.uri, "size": s.info.size, "etag": s.info.etag, "rows": s.num_rows, "columns": s.columns}
                for s in shards
            ],
            "rows": rows_in,
        },
        "bad_shards": bad,
        "schema_notes": schema_notes,
        "duplicate_ids_across_shards": duplicates,
        "metrics": metrics,
    }


def write_manifest(out_fs, config: JobConfig, manifest: dict[str, Any], meter=None, key=None) -> dict[str, Any]:
    """Write the manifest last, atomically. `meter`'s counts (`requests`) include the
    manifest's own PUT: they are what the whole run asked of storage from the driver. `key`
    (`manifest_key.ManifestKey`, when `manifest_key_env` is set) signs it: `manifest_hmac`."""
    uri = layout.manifest_uri(config.output)
    if meter is not None:
        manifest = {**manifest, "requests": _requests(manifest, meter, uris.is_s3(uri))}
    if key is not None:
        manifest = key.signed(manifest)
    writes.put_json_atomic(out_fs, uri, manifest)
    return {**manifest, "manifest": uri}


def _requests(manifest: dict[str, Any], meter, s3: bool) -> dict[str, Any]:
    driver = meter.report()
    if s3:
        driver["PUT"] += 1  # the manifest itself, sent right after this is built
        driver["total"] += 1
    parts_written = sum(int(report.get("parts_written") or 0) for report in manifest["metrics"].values())
    footers = sum(int(report.get("footers_read") or 0) for report in manifest["metrics"].values())
    return {"driver": driver, "footers_read": footers, "worker_part_puts": parts_written if s3 else 0}


def previous_manifest(out_fs, config: JobConfig, key=None) -> tuple[dict[str, Any] | None, str | None]:
    """(the last complete run's manifest, why a manifest that is there was not used), each None
    when not applicable: the plan trusts the manifest's record of inputs and parts where the
    listings agree with it. Missing or unreadable: (None, None), and footers are read. A
    manifest edited into other types (a string where a size was, a list for a part record)
    would otherwise fail the plan with a bare exception; it is set aside as a whole and the
    job reads the footers instead, which only costs time. With a signing `key`
    (`manifest_key.ManifestKey`) a manifest it did not sign is set aside the same way, first."""
    found = reads.read_json(out_fs, layout.manifest_uri(config.output))
    if found is None:
        return None, None
    problem = (key.problem(found) if key is not None else None) or unusable_manifest(found)
    return (None, problem) if problem else (found, None)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def unusable_manifest(found: Any) -> str | None:
    """What makes `found` no manifest the plan can read (the first problem, naming its key),
    or None: every field the plan, the reuse by content and the id check read back has the
    type a run writes."""
    if not isinstance(found, dict) or not isinstance(found.get("metrics"), dict):
        return "no 'metrics' object"
    inputs = found.get("input")
    if inputs is not None and not isinstance(inputs, dict):
        return "'input' is not an object"
    files = (inputs or {}).get("files")
    if files is not None and not isinstance(files, list):
        return "'input.files' is not a list"
    for index, entry in enumerate(files or []):
        where = f"input.files[{index}]"
        if not isinstance(entry, dict):
            return f"'{where}' is not an object"
        if not (isinstance(entry.get("file"), str) and isinstance(entry.get("etag"), str)):
            return f"'{where}': 'file' and 'etag' must be strings"
        if not (_count(entry.get("size")) and _count(entry.get("rows"))):
            return f"'{where}': 'size' and 'rows' must be whole numbers >= 0"
        columns = entry.get("columns")
        if not isinstance(columns, dict) or not all(isinstance(v, str) for v in columns.values()):
            return f"'{where}.columns' is not an object of column types"
    duplicates = found.get("duplicate_ids_across_shards")
    if duplicates is not None and not isinstance(duplicates, dict):
        return "'duplicate_ids_across_shards' is not an object"
    for label, report in found["metrics"].items():
        parts = report.get("parts") if isinstance(report, dict) else None
        if parts is None:
            continue
        if not isinstance(parts, dict):
            return f"'metrics.{label}.parts' is not an object"
        for rel, record in parts.items():
            where = f"metrics.{label}.parts.{rel}"
            if not isinstance(record, dict):
                return f"'{where}' is not an object"
            if not (isinstance(record.get("digest"), str) and isinstance(record.get("input_etag"), str)
                    and _count(record.get("input_size")) and isinstance(record.get("parts"), dict)):
                return f"'{where}': 'digest', 'input_etag', 'input_size' or 'parts' has another type than a run writes"
            for name, entry in record["parts"].items():
                if not isinstance(entry, dict) or not all(_count(entry.get(key, 0)) for key in ("rows", "errors", "skipped")):
                    return f"'{where}.parts.{name}': 'rows', 'errors' and 'skipped' must be whole numbers >= 0"
                if not _count(entry.get("retry", 0)):
                    return f"'{where}.parts.{name}': 'retry' must be a whole number >= 0"
                if not isinstance(entry.get("md5", ""), str):
                    return f"'{where}.parts.{name}': 'md5' must be a string"
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
        if exceeds(errors, rows, max_error_rate):
            messages.append(
                f"metric {label}: {errors} of {rows} rows ({100 * errors / rows:.1f}%) have an error, "
                f"above max_error_rate {max_error_rate:g}"
            )
    return messages


def pruned_outputs(manifest: dict[str, Any]) -> list[str]:
    return sorted({uri for report in manifest.get("metrics", {}).values() for uri in report.get("pruned_outputs", [])})


def _reasons(counts: dict[str, int]) -> str:
    """The most frequent skip reasons of a metric, for the summary line."""
    shown = sorted(counts.items(), key=lambda item: -item[1])[:3]
    more = f", {len(counts) - 3} more reasons" if len(counts) > 3 else ""
    return ", ".join(f"{count} x {reason!r}" for reason, count in shown) + more


def _folders(folders) -> str:
    """The folders a shard's scores were reused from (`reused_by_content`): the one its parts
    were copied from, or those of the folders lent as its row cache that supplied rows; a
    manifest from before the list, one string."""
    return folders if isinstance(folders, str) else " and ".join(map(str, folders))


def summary_line(manifest: dict[str, Any]) -> str:
    parts = []
    for label, report in manifest["metrics"].items():
        parts.append(
            f"{label}: {report['rows_in']} in -> {report['rows_out']} out, {report['rows_scored']} scored, "
            f"{report['rows_cached']} reused, {report['rows_error']} errors"
            + (f", {report['rows_skipped']} skipped" if report.get("rows_skipped") else "")
            + (f", {report['rows_partial']} with some scores left out" if report.get("rows_partial") else "")
            + (f" ({_reasons(report['skip_reasons'])})" if report.get("skip_reasons") else "")
            + (f", {report['rows_warning']} with a warning" if report.get("rows_warning") else "")
            + (f", {report['rows_retry']} to retry next run" if report.get("rows_retry") else "")
        )
    notes = []
    if manifest["bad_shards"]:
        notes.append(f"{len(manifest['bad_shards'])} bad shard(s) skipped, their earlier output kept")
    if manifest.get("inputs_not_read"):
        notes.append(listing.not_read_note(manifest["inputs_not_read"]))
    duplicates = manifest.get("duplicate_ids_across_shards") or {}
    if duplicates.get("count"):
        notes.append(f"{duplicates['count']} id(s) in more than one shard")
    pruned = pruned_outputs(manifest)
    if pruned:
        notes.append(f"pruned {len(pruned)} output file(s) of vanished shards: " + ", ".join(pruned))
    reused = {rel: folder for report in manifest["metrics"].values()
              for rel, folder in (report.get("reused_by_content") or {}).items()}
    if reused:
        notes.append(f"{len(reused)} new shard name(s) reused the scores of the same content (renamed or copied): "
                     + ", ".join(f"{rel} from {_folders(folders)}" for rel, folders in sorted(reused.items())[:5]))
    distrusted = [item for report in manifest["metrics"].values() for item in report.get("parts_not_reused") or []]
    if distrusted:
        shown = "; ".join(f"{item['file']} ({item['field']}: {item['why']})" for item in distrusted[:5])
        more = f"; and {len(distrusted) - 5} more (manifest: parts_not_reused)" if len(distrusted) > 5 else ""
        notes.append(f"{len(distrusted)} part(s) of earlier runs not reused, their rows scored again: {shown}{more}")
    untrusted = manifest.get("earlier_output_not_trusted")
    if isinstance(untrusted, dict):
        notes.append(f"earlier output not trusted ({untrusted.get('why')}): none of its {untrusted.get('parts')} "
                     f"part(s) reused, every row scored again")
    orphaned = sorted({uri for report in manifest["metrics"].values() for uri in report.get("orphaned_outputs", [])})
    if orphaned:
        shown = ", ".join(orphaned[:5]) + (f" and {len(orphaned) - 5} more" if len(orphaned) > 5 else "")
        notes.append(f"{len(orphaned)} output folder(s) of vanished shards kept: {shown} "
                     f"(remove them with --prune, or prune: true in the config)")
    extra = "".join(f", {note}" for note in notes)
    driver = (manifest.get("requests") or {}).get("driver") or {}
    if driver.get("total"):
        parts.append(
            f"storage: {driver['total']} requests ({', '.join(f'{k} {v}' for k, v in driver.items() if k.isupper() and v)}), "
            f"{driver.get('storage_wait_s', 0):.1f} s waiting"
        )
    shards = len(manifest["input"]["files"])
    return (
        f"ctgscore run: {shards} shard{'' if shards == 1 else 's'}{extra}; " + "; ".join(parts)
        + f"; {manifest['wall_s']:.1f} s; manifest {manifest.get('manifest')}"
    )

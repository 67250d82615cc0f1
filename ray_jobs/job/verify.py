"""Stage 5 (driver): rows out == rows in, from the workers' reports and one listing of the
output prefix; no part is read again.

Parts kept from earlier runs were checked when planned (their footers, against themselves and
the manifest's record of them: `part_check`). A part written this run is accepted when its worker reported it for this
row range (as many rows as the range), and the listing made after the commit shows an object
of the size the worker wrote and, on S3, the object it wrote (`_matches`). The result also gives the record of every committed
part that the manifest keeps for the next run's plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray_jobs.job.commit import CommitResult
from ray_jobs.job.errors import JobError
from ray_jobs.job.plan import MetricPlan
from ray_jobs.storage.listing import ListedFile


@dataclass
class Verified:
    rows_out: int = 0
    rows_error: int = 0
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)  # shard rel -> manifest record


def verify_metric(plan: MetricPlan, committed: CommitResult, reports: list[dict], listed: dict[str, ListedFile]) -> Verified:
    label = plan.metric.label
    result = Verified()
    kept_errors = {uri: count for shard_plan in plan.shards.values() for _, uri, count in shard_plan.kept}
    kept_skipped = {uri: count for shard_plan in plan.shards.values() for uri, count in shard_plan.kept_skipped.items()}
    kept_md5 = {uri: md5 for shard_plan in plan.shards.values() for uri, md5 in shard_plan.kept_md5.items()}
    by_part = {report["part"]: report for report in reports if report.get("part")}
    for cover in committed.covers:
        shard = plan.shards[cover.rel].shard
        record: dict[str, Any] = {
            "input_etag": shard.info.etag, "input_size": shard.info.size, "digest": plan.metric.digest, "parts": {},
        }
        for part, uri in cover.parts:
            found = listed.get(uri)
            origin = cover.renamed.get(uri, uri)  # a staged part moved into place by the commit: as written
            if origin in cover.new:
                report = by_part.get(origin)
                if report is None or found is None or not _matches(report, part.rows, found, moved=origin != uri):
                    raise JobError(
                        f"metric {label}: part {uri} does not hold rows {part.start} to {part.stop} of {cover.uri} "
                        f"as its worker wrote them (missing or overwritten)"
                    )
                errors = int(report.get("errors", 0))
                skipped = int(report.get("skipped", 0))
                retry = int(report.get("retry", 0))
                md5 = report.get("md5")
            else:
                if found is None:
                    raise JobError(f"metric {label}: kept part {uri} of {cover.uri} vanished during the run")
                errors = kept_errors.get(origin, 0)
                skipped = kept_skipped.get(origin, 0)
                retry = 0  # kept: complete, so none to retry
                md5 = kept_md5.get(origin)
            result.rows_error += errors
            result.rows_out += part.rows
            entry = {"rows": part.rows, "errors": errors, "skipped": skipped, "retry": retry, "size": found.size,
                     "etag": found.etag}
            if md5:  # of the bytes as written (or as read while planning): the next plan checks the file against it
                entry["md5"] = md5
            record["parts"][part.filename()] = entry
        if sum(part.rows for part, _ in cover.parts) != cover.num_rows:
            raise JobError(f"metric {label}: {cover.uri}: output rows differ from its {cover.num_rows} input rows")
        result.parts[cover.rel] = record
    return result


def _matches(report: dict, rows: int, found: ListedFile, moved: bool = False) -> bool:
    """Whether the listed object is the part as its worker reported it: its rows and size, and
    on S3 its ETag. The ETag is the md5 of the bytes for a one-part PUT stored unencrypted or
    with SSE-S3; then it must be the worker's md5. A bucket that encrypts with SSE-KMS or SSE-C
    gives an ETag that is no md5: the worker's own PUT then got one too (`put_etag`), and the
    listing must show that same ETag, or, for a staged part the commit copied into place
    (`moved`: a copy has an ETag of its own), any ETag: size and the report only. A multipart
    ETag (`<md5>-<parts>`) is no md5 of the bytes either: size only then."""
    if report.get("rows") != rows or report.get("size") != found.size:
        return False
    if not found.uri.startswith("s3://") or "-" in found.etag:
        return True
    md5 = report.get("md5")
    if found.etag == md5:
        return True
    put_etag = report.get("put_etag")
    if not put_etag or put_etag == md5:  # the worker's PUT got the md5 (or said nothing): another object is listed
        return False
    return moved or found.etag == put_etag

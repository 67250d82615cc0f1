"""Score stage, the end of a metric's step: one part per unit and metric, written atomically
by the actor that scored it, and the small report the driver gets instead of rows."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from ray_jobs.job import device_guard, layout

MAX_SAMPLES_PER_PART = 5


def write_part(out_fs, output: str, metric, signature: str, unit: dict[str, Any], ids: list, carried: dict[str, list],
               keys: list[str], results: list[dict[str, Any]], cached: int,
               lent: dict[str, int] | None = None) -> dict[str, Any]:
    """Write the unit's part for `metric` (`scoring.schema.output_table`, footer
    `incremental.part_metadata`) and return its report: rows, rows from the cache (`lent`: how
    many from each folder that supplied them, `rows.settle_rows`), errors with
    a few examples, skipped rows, and the size and md5 of the bytes written and the ETag S3 gave
    them (what verification checks against the output listing)."""
    from ray_jobs import incremental
    from ray_jobs.storage import writes
    from scoring.schema import output_table

    out = output_table(ids, results, metric.output_columns, signature, keys, carried)
    reasons: Counter = Counter()
    samples = []
    for index, result in enumerate(results):
        reason = result.get("error")
        if reason is None:
            continue
        reasons[reason if len(reason) < 80 else reason[:77] + "..."] += 1
        if len(samples) < MAX_SAMPLES_PER_PART:
            samples.append({"file": unit["uri"], "row": unit["start"] + index, "id": ids[index], "error": reason})
    errors = sum(reasons.values())
    # skipped: rows the metric does not apply to (no score at all); partial: rows that got some
    # scores, the others left out for lack of a column; both say why in `skipped`
    skip_reasons: Counter = Counter(result["skipped"] for result in results if result.get("skipped"))
    skipped = sum(1 for result in results
                  if result.get("skipped") and all(result.get(column) is None for column in metric.output_columns))
    partial = sum(skip_reasons.values()) - skipped
    warnings = sum(1 for result in results if result.get("warning"))  # rows with a note (truncation, special tokens)
    retry = device_guard.retry_rows(results)  # single-row out-of-memory: scored again by the next run
    metadata = incremental.part_metadata(
        unit["rel"], unit["etag"], unit["size"], signature, metric.digest, unit["start"], unit["stop"], errors, skipped,
        retry,
    )
    # staged: its name is taken by a part of another signature, replaced only by the commit
    where = layout.staged_part_uri if metric.label in unit.get("staged", ()) else layout.part_uri
    uri = where(output, metric.label, unit["rel"], layout.PartName(unit["start"], unit["stop"], unit["version"]))
    data = writes.table_bytes(out, metadata)
    put_etag = writes.put_atomic(out_fs, uri, data)
    return {
        "size": len(data),
        "md5": hashlib.md5(data).hexdigest(),
        "put_etag": put_etag,  # S3's ETag for this PUT: the md5 above unless the bucket encrypts with KMS or SSE-C
        "label": metric.label,
        "rel": unit["rel"],
        "start": unit["start"],
        "stop": unit["stop"],
        "part": uri,
        "rows": len(results),
        "cached": cached,
        "lent": dict(lent or {}),
        "errors": errors,
        "skipped": skipped,
        "partial": partial,
        "warnings": warnings,
        "skip_reasons": {reason if len(reason) < 120 else reason[:117] + "...": count
                         for reason, count in skip_reasons.most_common(20)},
        "retry": retry,
        "reasons": dict(reasons),
        "samples": samples,
    }

"""Stage 5 (driver): rows out == rows in, from the committed parts' footers only.

Parts kept from earlier runs were checked when planned; parts written this run are checked
here: each footer must name this shard's bytes (etag, size), this metric's signature digest,
its own row range, and hold one row per input row of that range.
"""

from __future__ import annotations

from ray_jobs import incremental
from ray_jobs import io as jio
from ray_jobs.job.commit import CommitResult
from ray_jobs.job.errors import JobError
from ray_jobs.job.plan import MetricPlan


def verify_metric(out_fs, plan: MetricPlan, committed: CommitResult) -> tuple[int, int]:
    """Returns (rows out, error rows) over every covered shard."""
    label = plan.info.spec.label
    rows_out = errors = 0
    kept_errors = {uri: count for shard_plan in plan.shards.values() for _, uri, count in shard_plan.kept}
    for cover in committed.covers:
        shard = plan.shards[cover.rel].shard
        for part, uri in cover.parts:
            if uri in cover.new:
                footer = jio.read_footer_metadata(out_fs, uri)
                if not incremental.part_is_complete(footer, shard.info.etag, shard.info.size, plan.info.digest, part.start, part.stop):
                    raise JobError(
                        f"metric {label}: part {uri} does not hold rows {part.start} to {part.stop} of {cover.uri} "
                        f"for this signature (missing, unreadable or overwritten)"
                    )
                errors += incremental.footer_errors(footer)
            else:
                errors += kept_errors.get(uri, 0)
            rows_out += part.rows
        if sum(part.rows for part, _ in cover.parts) != cover.num_rows:
            raise JobError(f"metric {label}: {cover.uri}: output rows differ from its {cover.num_rows} input rows")
    return rows_out, errors

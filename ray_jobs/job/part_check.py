"""Stage 1 (driver), while planning: is a part of an earlier run what it says, and what the
previous manifest says, before it is reused (`docs/job.md`, "Planning from the manifest")?

An output folder may sit in shared storage: a manifest may have been edited and a part
replaced, truncated or given another footer. So every part of ours is read and compared,
field by field:

* with itself: the rows its footer declares and the rows its row groups hold; the errors its
  footer counts (`ctgscore.rows_error`) and the rows its `error` column holds (that column's
  null count, from the Parquet statistics the writer computed);
* with the manifest's record of it, where the record is of this metric's signature: that its
  bytes are the ones recorded, then its rows, errors, rows skipped and rows to retry.

What vouches for the bytes: on local disk the md5 of the whole file, hashed, against the md5
its worker reported. On S3 the object's ETag against the ETag the record took from the
listing when the part was committed (one ranged GET of the tail, for the footer): S3 gives an
object a new ETag whenever it is written, whatever the encryption, but the ETag is the md5 of
the bytes only for a one-part upload stored unencrypted or with SSE-S3 (not with SSE-KMS or
SSE-C, nor for a multipart upload), so it is compared as an identity, never as an md5. The
same object keeps its recorded md5 for the next record. A record with an md5 but no ETag (not
one a run writes) has the whole object hashed; with neither, its size is compared.

The first disagreement is the part's problem: `(field, why)`. Such a part is neither kept nor
used as a row cache; its rows are scored again and the report names it (`parts_not_reused`).
A part the manifest does not record (no manifest: a resumed run) is judged by itself alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ray_jobs import incremental
from ray_jobs.storage import reads
from ray_jobs.storage.shard_checks import footer_rows_problem
from ray_jobs.storage.uris import is_s3
from scoring.display_names import quoted

PREFIX = incremental.META_PREFIX
_PLAIN = re.compile(r"[0-9]{1,18}|[0-9a-f]{32}")


@dataclass(frozen=True)
class CheckedPart:
    footer: reads.Footer | None  # (rows, footer metadata) when the part may be reused, else None
    md5: str | None  # of its bytes, for the next manifest's record
    problem: tuple[str, str] | None = None  # (field, why) when it is not what it or its record says


def check_part(out_fs, listed, entry: dict[str, Any] | None, digest: str) -> CheckedPart:
    """Read the part `listed` (`listing.ListedFile`) and compare it with itself and with the
    manifest's `entry` for it (None when not recorded under this signature `digest`)."""
    by_etag = _recorded_etag(entry, listed) is not None  # S3, and the record names the object it saw
    hashed = not is_s3(listed.uri) or (not by_etag and entry is not None and entry.get("md5") is not None)
    meta, md5, missing = reads.read_footer_and_md5(out_fs, listed.uri, listed.size, hashed=hashed)
    if meta is None:
        gone = missing and entry is None  # vanished since the listing, and unrecorded: simply missing
        return CheckedPart(None, md5, None if gone else ("footer", "not a readable Parquet file (truncated or replaced)"))
    if by_etag and listed.etag == entry.get("etag"):
        md5 = entry.get("md5") if isinstance(entry.get("md5"), str) else None  # the same object: the bytes recorded
    kv = reads.footer_text_metadata(meta)
    if kv is None:
        return CheckedPart(None, md5, ("footer", "its footer metadata is not UTF-8"))
    rows = sum(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    ours = kv.get(PREFIX + "signature_digest") == digest
    problem = _own_problem(meta, kv) if ours or entry is not None else None
    if problem is None and entry is not None:
        problem = _record_problem(entry, listed, md5, rows, kv)
    if problem is not None:
        return CheckedPart(None, md5, problem)
    return CheckedPart((rows, kv), md5)


def _own_problem(meta, kv: dict[str, str]) -> tuple[str, str] | None:
    """Where the part contradicts itself: declared rows, or its error count."""
    if (declared := footer_rows_problem(meta)) is not None:
        return "rows", declared
    held = error_rows(meta)
    if held is None:
        return "errors", "its 'error' column has no statistics to count errors from"
    claimed = kv.get(PREFIX + "rows_error")
    if claimed != str(held):
        return "errors", f"its footer counts {_shown(claimed)} errors, its 'error' column holds {held}"
    return None


def _record_problem(entry: dict[str, Any], listed, md5: str | None, rows: int, kv: dict[str, str]) -> tuple[str, str] | None:
    """Where the part differs from the manifest's record of it."""
    recorded_etag = _recorded_etag(entry, listed)
    if recorded_etag is not None:
        if recorded_etag != listed.etag:
            return "etag", (f"the manifest records ETag {_shown(recorded_etag)}, the object now has "
                            f"{_shown(listed.etag)} (written again since it was recorded)")
    elif (recorded_md5 := entry.get("md5")) is not None and recorded_md5 != md5:
        return "md5", f"the manifest records md5 {_shown(recorded_md5)}, the file's bytes have md5 {md5}"
    elif recorded_md5 is None and entry.get("size") != listed.size:  # a record from before md5 was kept
        return "size", f"the manifest records {_shown(entry.get('size'))} bytes, the file has {listed.size}"
    found = {"rows": rows, "errors": kv.get(PREFIX + "rows_error"), "skipped": kv.get(PREFIX + "rows_skipped"),
             "retry": kv.get(PREFIX + "rows_retry", "0")}
    for field, value in found.items():
        if field in entry and str(entry[field]) != str(value):
            return field, f"the manifest records {_shown(entry[field])} {_NOUN[field]}, the part {_shown(value)}"
    return None


def _recorded_etag(entry: dict[str, Any] | None, listed) -> str | None:
    """The S3 ETag the record took from the listing when the part was committed, when it
    applies: an S3 part and a non-empty string recorded (local etags are modification times,
    which a copy or an edit can keep)."""
    if entry is None or not is_s3(listed.uri):
        return None
    etag = entry.get("etag")
    return etag if isinstance(etag, str) and etag else None


_NOUN = {"rows": "rows", "errors": "errors", "skipped": "rows skipped", "retry": "rows to retry"}


def error_rows(meta) -> int | None:
    """Rows of a part with an error, from its `error` column's null counts (Parquet statistics,
    per row group), or None when a row group has none to read."""
    column = next((i for i in range(meta.num_columns) if meta.schema.column(i).path == "error"), None)
    if column is None:
        return None
    total = 0
    for index in range(meta.num_row_groups):
        group = meta.row_group(index)
        statistics = group.column(column).statistics
        if group.num_rows and (statistics is None or not statistics.has_null_count):
            return None
        total += group.num_rows - (statistics.null_count if group.num_rows else 0)
    return total


def _shown(value: Any) -> str:
    """A value from a file or a manifest for a message: a count as it is, anything else quoted
    and cut (`scoring.display_names.quoted`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and _PLAIN.fullmatch(value):  # a count or an md5
        return value
    return quoted(value, 40)


def manifest_parts(manifest: dict[str, Any] | None, label: str) -> dict[str, dict[str, Any]]:
    """A manifest's record of one metric's committed parts, by shard rel (empty when absent)."""
    try:
        records = manifest["metrics"][label]["parts"]
    except (KeyError, TypeError):
        return {}
    return records if isinstance(records, dict) else {}


def recorded_entry(record: dict[str, Any] | None, uri: str, digest: str) -> dict[str, Any] | None:
    """The manifest's entry for the part at `uri` in a shard's `record`, when that record is of
    the signature `digest` (a part the plan could reuse); else None."""
    if not record or record.get("digest") != digest:
        return None
    entry = (record.get("parts") or {}).get(uri.rsplit("/", 1)[-1])
    return entry if isinstance(entry, dict) else None

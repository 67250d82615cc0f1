"""What a run costs in storage requests: a `RequestMeter` counts every HTTP request the
driver's S3 client sends (each retry counts), by kind, and the wall time the driver spends
waiting on storage (listings, footer reads, the probe, commits, the manifest).

Kinds: LIST (GET on a bucket with a list query), HEAD, GET, PUT, DELETE, POST (batch delete).
Local files are not requests: on local disk the counts stay zero.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

KINDS = ("LIST", "HEAD", "GET", "PUT", "DELETE", "POST")


class RequestMeter:
    def __init__(self) -> None:
        self.counts = dict.fromkeys(KINDS, 0)
        self.wait_s = 0.0
        self._lock = threading.Lock()

    def count(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def on_request(self, request: Any = None, **_: Any) -> None:
        """botocore `before-send` handler: classify one outgoing request."""
        method = str(getattr(request, "method", "") or "").upper()
        url = str(getattr(request, "url", "") or "")
        query = url.split("?", 1)[1] if "?" in url else ""
        if method == "GET" and ("list-type=" in query or query.startswith(("prefix=", "delimiter=")) or "&prefix=" in query):
            method = "LIST"
        self.count(method if method in KINDS else "POST")

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Time the driver spends in a storage phase (wall time, not summed over threads)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.wait_s += time.perf_counter() - start

    def report(self) -> dict[str, Any]:
        counts = {kind: n for kind, n in self.counts.items() if n or kind in KINDS[:4]}
        return {**counts, "total": sum(self.counts.values()), "storage_wait_s": round(self.wait_s, 3)}

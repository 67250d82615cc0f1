"""Bounded-concurrency map for storage calls (listings, footer reads) that mostly wait on
the network: a thread pool, results in input order, the first failure re-raised."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")

STORAGE_CONCURRENCY = 32  # requests in flight from the driver (the S3 connection pool is sized to it)


def map_bounded(function: Callable[[T], R], items: Iterable[T], limit: int = STORAGE_CONCURRENCY) -> list[R]:
    items = list(items)
    if len(items) <= 1 or limit <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(limit, len(items)), thread_name_prefix="ctgscore-storage") as pool:
        return list(pool.map(function, items))

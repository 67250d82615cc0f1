"""How statistics fan out their independent work units (resample blocks, draws).

A runner takes a function `fn(shared, items) -> list` (one result per item, in order), the data
every call needs (`shared`) and the items, and returns the results of all items in item order.
`local_runner` runs everything in this process; `ray_jobs.runners.ray_runner(tasks)` spreads
contiguous runs of items over Ray tasks. The statistics in `meta_eval` never import Ray: they
take a runner and default to the local one, and every item draws its own random numbers, so the
answer does not depend on which runner executes it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

Task = Callable[[Any, list], list]
Runner = Callable[[Task, Any, Sequence], list]


def local_runner(fn: Task, shared: Any, items: Sequence) -> list:
    """Run all items in this process."""
    out = fn(shared, list(items))
    if len(out) != len(items):
        raise RuntimeError(f"task returned {len(out)} results for {len(items)} items")
    return list(out)


def contiguous_groups(items: Sequence, parts: int) -> list[list]:
    """`items` cut into at most `parts` contiguous runs of near-equal length (none empty)."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    groups, start = [], 0
    for k in range(parts):
        stop = start + size + (1 if k < extra else 0)
        if stop > start:
            groups.append(list(items[start:stop]))
        start = stop
    return groups

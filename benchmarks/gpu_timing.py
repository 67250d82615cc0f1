"""Steady-state timing for the GPU benchmarks: a measurement repeats a call until at least
`min_seconds` of wall time have passed (the device synchronised at its end) and gives the
time per call; a figure is the median of `repeats` measurements. Short single calls measure
prologue, drain and boost clocks, not the steady rate a scoring job runs at."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def steady_seconds(run: Callable[[], object], device: str, min_seconds: float, repeats: int,
                   deadline: float | None = None) -> dict:
    """{'seconds': median seconds per call, 'runs': seconds per call of each measurement,
    'calls': calls per measurement, 'wall': seconds of each measurement, 'result': the last
    call's result, 'cut_short': measurements left out because `deadline` (time.monotonic)
    passed}. At least one measurement always runs.

    A call that only queues device work (a matmul) returns at once, and the host could queue
    a thousand of them (the launch queue's depth) before its clock reads `min_seconds`: a
    measurement would then last a thousand calls, 23 s for a float32 8192-cube matmul on an
    H200 instead of 1 s. So calls go in batches sized from the rate measured so far, each
    batch ends with a synchronisation, and a measurement ends at the first batch that brings
    it to `min_seconds`."""
    runs, calls, walls, result = [], [], [], None
    synchronize(device)
    start = time.perf_counter()
    result = run()  # one call, finished: the first batch's size
    synchronize(device)
    single = max(time.perf_counter() - start, 1e-9)
    for _ in range(repeats):
        if runs and deadline is not None and time.monotonic() > deadline:
            break
        count, batch, start = 0, max(1, math.ceil(min_seconds / single)), time.perf_counter()
        while True:
            for _ in range(batch):
                result = run()
            count += batch
            synchronize(device)  # queued work counts: the batch ends when the device is done
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
            batch = max(1, math.ceil((min_seconds - elapsed) / (elapsed / count)))
        runs.append(elapsed / count)
        calls.append(count)
        walls.append(elapsed)
    return {"seconds": statistics.median(runs), "runs": runs, "calls": calls, "wall": walls, "result": result,
            "cut_short": repeats - len(runs)}

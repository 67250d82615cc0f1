"""Steady-state timing for the GPU benchmarks: a measurement repeats a call until at least
`min_seconds` of wall time have passed (the device synchronised at its end) and gives the
time per call; a figure is the median of `repeats` measurements. Short single calls measure
prologue, drain and boost clocks, not the steady rate a scoring job runs at."""

from __future__ import annotations

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
    passed}. At least one measurement always runs."""
    runs, calls, walls, result = [], [], [], None
    for _ in range(repeats):
        if runs and deadline is not None and time.monotonic() > deadline:
            break
        synchronize(device)
        count, start = 0, time.perf_counter()
        while True:
            result = run()
            count += 1
            if time.perf_counter() - start >= min_seconds:
                synchronize(device)  # queued work counts: the run ends when the device is done
                break
        wall = time.perf_counter() - start
        runs.append(wall / count)
        calls.append(count)
        walls.append(wall)
    return {"seconds": statistics.median(runs), "runs": runs, "calls": calls, "wall": walls, "result": result,
            "cut_short": repeats - len(runs)}

"""What a scoring actor does about the GPU faults a CPU never shows (docs/gpu.md, "Failure
table for GPU faults"). Used by `ray_jobs.job.scorer.PartScorer` and `ray_jobs.job.write`:

- `require_cuda(metric, num_gpus)` in the constructor: an actor of a GPU pool that sees no CUDA
  device (a lost GPU, a driver that did not load; `device: auto` would fall back to the CPU and
  score one or two orders of magnitude slower without a word) fails with one line instead;
- `Watchdog` around each unit's device work: a call that runs past `pool.unit_timeout_s`
  (a hung kernel blocks the final collect forever) prints one line and ends the process, so Ray
  restarts the actor and retries the unit (`pool.max_restarts`, `pool.max_task_retries`);
- `retry_rows(results)`: rows whose error is marked retryable (out of memory on a single row,
  `scoring.errors.RETRY_PREFIX`) are counted apart; their part is not reused by the next run,
  which scores them again.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any, Sequence

from scoring.console_text import console_line
from scoring.errors import RETRY_PREFIX, CtgscoreError

HANG_EXIT = 71
# a cluster whose GPUs are logical only (a CPU machine simulating a GPU cluster, in tests) sets
# this to "1" so its GPU pools may score on the CPU; never set on a real cluster
SIMULATED_GPUS = "CTGSCORE_SIMULATED_GPUS"


class NoCudaInGpuPool(CtgscoreError):
    """A GPU pool's actor found no CUDA device: never scored on the CPU."""


def require_cuda(device: str | None, num_gpus: float | None, cuda_available: bool | None = None) -> None:
    """Raise one line when the pool gives this actor GPUs but the metric's model is not on
    CUDA (no CUDA device visible, or `device` resolved to the CPU). A metric without a model
    (`device` None: a rule metric in a GPU pool) is left alone; `auto` (a model loaded later,
    CoDI-Eval's classifiers) needs a visible CUDA device."""
    if not num_gpus or device is None or os.environ.get(SIMULATED_GPUS) == "1":
        return
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    if not cuda_available or not (str(device).startswith("cuda") or device == "auto"):
        raise NoCudaInGpuPool(
            f"this actor of a GPU pool (num_gpus={num_gpus}) finds no CUDA device (model on {device or 'cpu'}, "
            f"torch.cuda.is_available()={cuda_available}); refusing to score on the CPU"
        )


class Watchdog:
    """`with watchdog.guard(what):` ends the process (exit 71, one line on stderr) when the
    block runs longer than `seconds`; None or 0 turns it off. The timer is a daemon thread,
    so a hung CUDA call in the guarded thread cannot stop it."""

    def __init__(self, seconds: float | None, label: str = ""):
        self.seconds = float(seconds) if seconds else None
        self.label = label

    @contextlib.contextmanager
    def guard(self, what: str):
        if self.seconds is None:
            yield
            return
        timer = threading.Timer(self.seconds, self._expire, args=(what,))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _expire(self, what: str) -> None:
        print(console_line(f"ctgscore: metric {self.label}: scoring {what} ran past unit_timeout_s={self.seconds:g}; "
                           "ending this actor so Ray restarts it and retries the unit"), file=sys.stderr, flush=True)
        os._exit(HANG_EXIT)


def retry_rows(results: Sequence[dict[str, Any] | None]) -> int:
    """How many results carry a retryable error (not committed for good: the next run scores
    them again)."""
    return sum(1 for result in results if result and (result.get("error") or "").startswith(RETRY_PREFIX))

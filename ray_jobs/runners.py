"""Ray runners: the statistics of `meta_eval` and `splits` fanned out as Ray tasks.

`ray_runner(tasks)` (the `meta_eval.runner.Runner` contract) deals contiguous runs of work
items (bootstrap resample blocks) to `tasks` Ray tasks with a fraction of a CPU each (a task
per full CPU starves Ray's own work on small machines), puts the shared data into the object
store once, and returns the results in item order. `splits_runner(tasks)` does the same for
the CompMCTG climb's restart blocks (the `splits.protocols` runner contract). The statistics
draw their random numbers per item (per restart), so any number of tasks gives the same
answer as running in-process.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from meta_eval.runner import Runner, Task, contiguous_groups

TASK_CPUS = 0.5


def ensure_ray() -> None:
    """Join or start Ray through `ray_jobs.session` (the one place Ray is started), quiet as
    `RaySession` but leaving the native stderr alone (there is no `close()` to give it back).
    Workers of a new local Ray run at normal priority: Ray's default niceness 15 starves
    CPU-bound tasks on a shared machine."""
    import ray

    if ray.is_initialized():
        return
    from ray_jobs.session import RaySession

    os.environ.setdefault("RAY_worker_niceness", "0")
    RaySession(quiet=True, capture_native_stderr=False).ensure()


def ray_runner(tasks: int, num_cpus: float = TASK_CPUS) -> Runner:
    """A runner that spreads the items over `tasks` Ray tasks of `num_cpus` CPUs each."""
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")

    def run(fn: Task, shared: Any, items: Sequence) -> list:
        import ray

        ensure_ray()
        remote = ray.remote(num_cpus=num_cpus)(fn)
        shared_ref = ray.put(shared)
        groups = contiguous_groups(items, tasks)
        parts = ray.get([remote.remote(shared_ref, group) for group in groups])
        out = [result for part in parts for result in part]
        if len(out) != len(items):
            raise RuntimeError(f"Ray tasks returned {len(out)} results for {len(items)} items")
        return out

    return run


def _climb_blocks(problem, blocks: Sequence[tuple[int, int]]) -> list[list]:
    """One list of restart results per block (the item order `ray_runner` keeps)."""
    return [problem.run_blocks([block]) for block in blocks]


def splits_runner(tasks: int, num_cpus: float = TASK_CPUS):
    """A `splits.protocols.build_splits` runner: the climb's restart blocks over `tasks` Ray
    tasks, results in block order, so the splits are the same for any number of tasks."""
    run_items = ray_runner(tasks, num_cpus)

    def run(problem, blocks: Sequence[tuple[int, int]]) -> list:
        per_block = run_items(_climb_blocks, problem, list(blocks))
        return [result for block in per_block for result in block]

    return run

"""Ray runners for the statistics in `meta_eval` (the `meta_eval.runner.Runner` contract).

`ray_runner(tasks)` deals contiguous runs of work items (bootstrap resample blocks) to `tasks`
Ray tasks with a fraction of a CPU each (a task per full CPU starves Ray's own work on small
machines), puts the shared data into the object store once, and returns the results in item
order; the statistics draw their random numbers per item, so any number of tasks gives the
same answer as `meta_eval.runner.local_runner`.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from meta_eval.runner import Runner, Task, contiguous_groups

TASK_CPUS = 0.5


def ensure_ray() -> None:
    """Join or start Ray through `ray_jobs.session` (the one place Ray is started). Workers of a
    new local Ray run at normal priority: Ray's default niceness 15 starves CPU-bound tasks on
    a shared machine."""
    import ray

    if ray.is_initialized():
        return
    from ray_jobs import session

    os.environ.setdefault("RAY_worker_niceness", "0")
    session.ensure_ray()


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

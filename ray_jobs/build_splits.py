"""CompMCTG split search with restarts fanned out as Ray tasks (`ctgscore splits --tasks N`).

Restarts are grouped into blocks (`ClimbProblem.blocks`, size fixed by the problem) and the
blocks are dealt to `tasks` Ray tasks in contiguous runs; each restart draws from its own
`SeedSequence([seed, salt, restart])`, and results are gathered in block order, so the splits
are the same for any number of tasks. Tasks take a fraction of a CPU: a pool that takes every
CPU starves Ray's own work on small machines.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from splits.search import ClimbProblem

TASK_CPUS = 0.5


def _run_blocks(problem: ClimbProblem, blocks: Sequence[tuple[int, int]]) -> list:
    return problem.run_blocks(blocks)


def _ensure_ray() -> None:
    import ray

    if ray.is_initialized():
        return
    try:
        from ray_jobs import session
    except ImportError:
        session = None
    if session is not None and hasattr(session, "ensure_ray"):
        session.ensure_ray()
    else:
        ray.init(include_dashboard=False, log_to_driver=False)


def ray_runner(tasks: int, num_cpus: float = TASK_CPUS):
    """A `splits.protocols` runner that spreads the blocks over `tasks` Ray tasks."""
    import ray

    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    remote = ray.remote(num_cpus=num_cpus)(_run_blocks)

    def run(problem: ClimbProblem, blocks: Sequence[tuple[int, int]]) -> list:
        _ensure_ray()
        groups = [list(g) for g in np.array_split(np.arange(len(blocks)), min(tasks, len(blocks))) if len(g)]
        problem_ref = ray.put(problem)
        refs = [remote.remote(problem_ref, [blocks[i] for i in g]) for g in groups]
        out = []
        for part in ray.get(refs):
            out.extend(part)
        return out

    return run


def build_splits_ray(universe, protocol: str, seed: int = 0, restarts: int = 1000, tasks: int = 2, **kwargs):
    """`splits.protocols.build_splits` with the climb's restarts run as Ray tasks."""
    from splits.protocols import build_splits

    return build_splits(universe, protocol, seed=seed, restarts=restarts, runner=ray_runner(tasks), tasks=tasks, **kwargs)

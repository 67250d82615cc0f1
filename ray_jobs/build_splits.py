"""CompMCTG split search with restarts fanned out as Ray tasks (issue 5).

Restarts are grouped into blocks (`ClimbProblem.blocks`, size fixed by the problem) and the
blocks are dealt to `tasks` Ray tasks in contiguous runs; each restart draws from its own
`SeedSequence([seed, salt, restart])`, and results are gathered in block order, so the splits
are the same for any number of tasks. Tasks take a fraction of a CPU (Ray Data starvation on
2 cores, spec `infra.md`).

    python -m ray_jobs.build_splits --aspects Fyelp --protocol acd --seed 0 --restarts 3000 --tasks 4 --out splits.json
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import numpy as np

from splits.search import ClimbProblem

TASK_CPUS = 0.5


def _run_blocks(problem: ClimbProblem, blocks: Sequence[tuple[int, int]]) -> list:
    return problem.run_blocks(blocks)


def ray_runner(tasks: int, num_cpus: float = TASK_CPUS):
    """A `protocols.Runner` that spreads the blocks over `tasks` Ray tasks."""
    import ray

    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    remote = ray.remote(num_cpus=num_cpus)(_run_blocks)

    def run(problem: ClimbProblem, blocks: Sequence[tuple[int, int]]) -> list:
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
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


def main(argv: list[str] | None = None) -> int:
    from splits.cli import add_arguments, run

    parser = argparse.ArgumentParser(prog="python -m ray_jobs.build_splits", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.force_ray = True
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

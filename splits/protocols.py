"""CompMCTG split protocols (spec "Protocols"): Original, Hold-Out, ACD, Few-Shot, plus
minimum-divergence and random splits for comparison.

- original: everything seen (unseen empty → D = 1 by the spec's convention).
- holdout: each combination held out once (|C| splits; ineligible ones are skipped).
- acd: |seen| = floor(|C|/2), maximise D; best compared at 3 decimals.
- fewshot: |seen| = largest aspect cardinality, maximise D; best compared at 2 decimals.
- mindiv: |seen| = floor(|C|/2) (or `seen_size`), minimise D.
- random: distinct random eligible splits of that size.

Search: exhaustive enumeration when C(|C|, k) ≤ `exhaustive_limit` ("auto"), else hill
climbing with `restarts` independent restarts. With 2 aspects every eligible split has D = 1,
so ACD reuses the Few-Shot splits (as CompMCTG does for Amazon and Mixture).

Kept splits are distinct as sets by default. `duplicates="ordered"` reproduces CompMCTG's
lists, distinct only as ordered lists (its Yelp Few-Shot keeps 8 splits of 4 distinct sets,
Mixture 10 of 7), which weights averages over the kept splits; it always climbs (an
enumeration has no list order) and keeps the first optimal lists in restart order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from scoring.errors import UsageError
from scoring.signature import Signature, library_versions
from splits.aspects import BENCHMARK_COUNTS, SplitsInputError, Universe
from splits.divergence import DEFAULT_ALPHA, divergence
from splits.search import (
    DISTINCT,
    ClimbProblem,
    exhaustive,
    n_subsets,
    original_search,
    random_eligible_start,
    restart_rng,
    select_splits,
)

VERSION = "1"
PROTOCOLS = ("original", "holdout", "acd", "fewshot", "mindiv", "random")
DEFAULT_MAX_SPLITS = 10
DECIMALS = {"acd": 3, "fewshot": 2, "mindiv": 3}
SALTS = {"acd": 1, "fewshot": 2, "mindiv": 3, "random": 4}
TASKS_NOTE = ("restart i draws from SeedSequence([seed, salt, i]) and restarts run in blocks "
              "whose size depends only on the problem: the splits do not depend on the number of tasks")

# A runner executes the climb's blocks: (problem, blocks) -> per-restart results in block order.
Runner = Callable[[ClimbProblem, Sequence[tuple[int, int]]], list]


def local_runner(problem: ClimbProblem, blocks: Sequence[tuple[int, int]], progress: bool = True) -> list:
    """Run every block in this process (with a progress bar on a terminal when there are many)."""
    import sys

    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    out = []
    iterator = blocks
    if progress and tqdm is not None and len(blocks) > 4 and sys.stderr.isatty():
        iterator = tqdm(blocks, desc="restart blocks", leave=False)
    for start, stop in iterator:
        out.extend(problem.run_block(start, stop))
    return out


@dataclass
class Split:
    seen: tuple[int, ...]
    divergence: float

    def to_json(self, universe: Universe) -> dict[str, Any]:
        unseen = universe.unseen_of(self.seen)
        return {
            "seen": [universe.combo_dict(i) for i in self.seen],
            "unseen": [universe.combo_dict(i) for i in unseen],
            "divergence": self.divergence,
        }


@dataclass
class SplitResult:
    universe: Universe
    protocol: str
    splits: list[Split]
    signature: Signature
    stats: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "splits": [s.to_json(self.universe) for s in self.splits],
            "signature": {**self.signature.as_dict(), "string": str(self.signature)},
            "aspects": self.universe.describe()["aspects"],
            "stats": self.stats,
        }


def default_max_splits(universe: Universe, protocol: str) -> int:
    """Benchmark split count for a known CompMCTG dataset, else 10."""
    if universe.name in BENCHMARK_COUNTS:
        count = BENCHMARK_COUNTS[universe.name].get(protocol)
        if count:
            return count
    return DEFAULT_MAX_SPLITS


def seen_size_for(universe: Universe, protocol: str, seen_size: int | None = None) -> int:
    """|seen|: `seen_size` when given (a whole number from 1 to |C| - 1, so both sides of a
    split hold a combination), else the protocol's own."""
    if seen_size is not None:
        if isinstance(seen_size, bool) or not isinstance(seen_size, (int, np.integer)) \
                or not 1 <= seen_size <= universe.n_combos - 1:
            raise UsageError(f"seen_size must be a whole number from 1 to {universe.n_combos - 1} "
                             f"(the {universe.n_combos} attribute combinations less one), got {seen_size!r}")
        return int(seen_size)
    if protocol == "fewshot":
        return universe.max_cardinality()
    return universe.n_combos // 2


def build_splits(
    universe: Universe,
    protocol: str,
    seed: int = 0,
    restarts: int = 1000,
    alpha: float = DEFAULT_ALPHA,
    max_splits: int | None = None,
    seen_size: int | None = None,
    search: str = "auto",
    moves: str = "coverage",
    max_iters: int = 1000,
    patience: int | None = None,
    exhaustive_limit: int = 1_000_000,
    recombine: bool | None = None,
    runner: Runner | None = None,
    tasks: int = 1,
    duplicates: str = "sets",
) -> SplitResult:
    """Splits of `universe` under `protocol` (see the module docstring)."""
    if protocol not in PROTOCOLS:
        raise UsageError(f"protocol must be one of {list(PROTOCOLS)}, got {protocol!r}")
    if search not in ("auto", "exhaustive", "climb", "original"):
        raise UsageError(f"search must be auto, exhaustive, climb or original, got {search!r}")
    if duplicates not in DISTINCT:
        raise UsageError(f"duplicates must be one of {list(DISTINCT)}, got {duplicates!r}")
    if duplicates == "ordered" and search == "exhaustive":
        raise UsageError("duplicates='ordered' keeps the climb's ordered lists; it cannot be combined with search='exhaustive'")
    for name, value in (("restarts", restarts), ("max_iters", max_iters), ("tasks", tasks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{name} must be a positive integer, got {value!r}")
    if max_splits is not None and (isinstance(max_splits, bool) or not isinstance(max_splits, int) or max_splits < 1):
        raise UsageError(f"max_splits must be a positive integer, got {max_splits!r}")
    if not 0.0 < float(alpha) < 1.0:
        raise UsageError(f"alpha must be between 0 and 1 (exclusive), got {alpha!r}")
    runner = runner or local_runner
    params: dict[str, Any] = {"protocol": protocol, "alpha": alpha, "seed": seed, "aspects": universe.describe()["aspects"],
                              "n_combos": universe.n_combos, "libraries": library_versions("numpy")}
    stats: dict[str, Any] = {}
    effective = protocol
    if protocol == "acd" and len(universe.aspects) == 2 and seen_size is None:
        effective = "fewshot"
        params["degenerate"] = "2 aspects: every eligible split has D = 1; ACD reuses the Few-Shot splits"
    if max_splits is None:
        max_splits = default_max_splits(universe, protocol if protocol != "acd" or effective == "acd" else "fewshot")
    if protocol == "original":
        splits = [Split(tuple(range(universe.n_combos)), 1.0)]
    elif protocol == "holdout":
        splits = []
        for i in range(universe.n_combos):
            seen = tuple(j for j in range(universe.n_combos) if j != i)
            if universe.is_eligible(seen):
                splits.append(Split(seen, divergence(universe, seen, alpha)))
        stats["skipped_ineligible"] = universe.n_combos - len(splits)
    elif protocol == "random":
        k = seen_size_for(universe, "acd", seen_size)
        splits, keys = [], set()
        attempts = 0
        while len(splits) < max_splits and attempts < max(100, 20 * max_splits):
            seen = tuple(int(i) for i in random_eligible_start(universe, k, restart_rng(seed, attempts, SALTS["random"])))
            attempts += 1
            if frozenset(seen) not in keys:
                keys.add(frozenset(seen))
                splits.append(Split(seen, divergence(universe, seen, alpha)))
        params.update(seen_size=k, max_splits=max_splits)
    else:
        k = seen_size_for(universe, effective, seen_size)
        maximize = effective != "mindiv"
        decimals = DECIMALS[effective]
        space = n_subsets(universe.n_combos, k)
        use_exhaustive = search == "exhaustive" or (search == "auto" and space <= exhaustive_limit and duplicates == "sets")
        params.update(seen_size=k, max_splits=max_splits, decimals=decimals,
                      objective="max" if maximize else "min")
        if search == "original":  # the original's draws, climb and kept lists (splits.search.original_search)
            candidates, climbed = original_search(universe, k, seed, restarts, alpha, max_iters, maximize)
            if not candidates:
                raise SplitsInputError(f"none of {restarts} random draws of {k} seen combinations is eligible; draw more")
            duplicates = "ordered"
            params.update(search="original", draws=restarts, max_iters=max_iters, rng="python random.Random(seed).sample")
            stats.update(eligible_draws=climbed, search_space=space)
        elif use_exhaustive:
            sets, divs = exhaustive(universe, k, alpha)
            if not len(sets):
                raise SplitsInputError(f"no eligible split with {k} seen combinations")
            # candidate order: a seeded shuffle, so ties are broken by the seed, not by index order
            order = restart_rng(seed, 0, SALTS[effective]).permutation(len(sets))
            candidates = [(tuple(int(x) for x in sets[i]), float(divs[i])) for i in order]
            params.update(search="exhaustive")
            stats.update(eligible_sets=len(sets), search_space=space)
        else:
            problem = ClimbProblem(universe, k, seed, alpha=alpha, maximize=maximize, moves=moves,
                                   max_iters=max_iters, patience=patience, salt=SALTS[effective], recombine=recombine,
                                   keep_order=duplicates == "ordered")
            blocks = problem.blocks(restarts)
            results = runner(problem, blocks)
            if len(results) != restarts:
                raise RuntimeError(f"runner returned {len(results)} restarts, expected {restarts}")
            candidates = [(r[0], r[1]) for r in results]
            params.update(search="climb", restarts=restarts, moves=moves, recombine=problem.use_recombine(), max_iters=max_iters,
                          patience=patience, block_size=problem.block_size, tasks_independent=TASKS_NOTE)
            ds = np.array([r[1] for r in results])
            stats.update(restart_best_max=float(ds.max()), restart_best_mean=float(ds.mean()),
                         restart_moves_mean=float(np.mean([r[2] for r in results])), tasks=tasks,
                         search_space=space)
        if duplicates == "ordered":
            params["duplicates"] = "ordered"
        chosen = select_splits(candidates, decimals, max_splits, maximize=maximize, distinct=duplicates)
        splits = [Split(s, d) for s, d in chosen]
        rounded = [round(d, decimals) for _, d in candidates]
        best = max(rounded) if maximize else min(rounded)
        stats.update(best_rounded=best, n_distinct_optimal=len({frozenset(s) for (s, _), r in zip(candidates, rounded) if r == best}),
                     n_kept=len(splits), n_kept_distinct_sets=len({frozenset(s.seen) for s in splits}))
    for s in splits:
        if protocol != "original" and not universe.is_eligible(s.seen):
            raise AssertionError(f"internal error: ineligible split {s.seen}")
    signature = Signature("compmctg_splits", VERSION, params)
    return SplitResult(universe, protocol, splits, signature, stats)

"""Searching for maximum (or minimum) divergence splits of a fixed seen size (spec "Protocols").

- `random_eligible_start`: a random split whose seen side covers every atom.
- `ClimbProblem.run_block`: greedy hill climbing from random eligible starts, a block of
  independent restarts advanced together (one batched numpy step per iteration). Each step
  evaluates every swap (one seen combo ↔ one unseen combo) incrementally with
  `divergence.move_gains` and takes a uniformly random strictly improving move (= the first
  improving move in a random order), else a random tie move; it stops when no move is left,
  after `max_iters` moves, or after `patience` consecutive tie moves (None: no limit).
  Move rules: "original" never removes from seen the last carrier of an atom; "coverage"
  (default) also allows removing it when the incoming combo carries the same atoms, i.e.
  every move keeps the seen side covering all atoms. The original rule gets stuck on
  Few-Shot splits with one carrier per value (spec "Oracles", Fyelp Few-Shot 0.45 vs 0.5414).
  With "coverage", small seen sides (see `use_recombine`) also get recombination moves, tried
  when no single swap improves, on entering a plateau or when no single swap is left
  (strict improvements only, no tie walks): two seen combos
  exchange their values on some aspects (a 2-for-2 swap that keeps every atom's seen count),
  which moves between exact covers where every single swap is blocked.
- `exhaustive`: every eligible seen set of size k with its D, when C(|C|, k) is small.
- `original_search` / `original_climb`: the original CompMCTG search, to rebuild the paper's
  splits: `times` seeded `random.sample` draws (ineligible draws are spent), each climbed with
  the original's move rule (first improving outgoing combo judged alone, then the first
  improving incoming one, cyclic scans resuming after the last swap, protected atoms) and
  stopping rule (no move found, or 1000 iterations). On Fyelp Few-Shot no move is ever
  possible, so the result is the best of the eligible draws (D 0.45 with seed 2023 and 3,000
  draws), where the exhaustive optimum is 0.5414.
- `select_splits`: the best D after rounding and up to n optimal splits, distinct as sets
  (default) or, to reproduce CompMCTG's kept lists, distinct as ordered lists: a climb with
  `keep_order` reports its seen side in the original's list order (the random start's draw
  order, each swap putting the incoming combination in the outgoing one's place), so the
  same set reached in two orders is kept twice and weights averages over kept splits.

Restart i of a job with seed s draws from `numpy.random.SeedSequence([s, salt, i])`, and
restarts are grouped in blocks whose size depends only on the problem, so results do not
depend on how blocks are spread over workers.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import partial
from typing import Sequence

import numpy as np

from splits.aspects import SplitsInputError, Universe
from splits.divergence import DEFAULT_ALPHA, CountTerms, divergence, divergence_from_counts, move_gains

EPS = 1e-9  # gains of Σ_k c_s^α c_u^(1-α) below this count as ties
MOVE_RULES = ("coverage", "original")
DISTINCT = ("sets", "ordered")


def restart_rng(seed: int, restart: int, salt: int = 0) -> np.random.Generator:
    """Generator of restart `restart` of a job seeded `seed` (independent of worker layout)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(salt), int(restart)]))


def random_eligible_start(universe: Universe, k: int, rng: np.random.Generator, tries: int = 20, ordered: bool = False) -> np.ndarray:
    """Sorted indices (in draw order with `ordered`) of a random seen set of size k that
    covers every atom.

    Uniform over eligible sets by rejection (up to `tries` draws); when eligible sets are
    rare (e.g. Few-Shot sizes), a randomised greedy cover (pick an uncovered atom at random,
    then a random carrier of it among those covering the most uncovered atoms) filled up
    with random combinations.
    """
    n = universe.n_combos
    if not 1 <= k <= n:
        raise SplitsInputError(f"seen size {k} is outside 1..{n}")
    amat = universe.atom_matrix
    for _ in range(tries):
        seen = rng.choice(n, size=k, replace=False)
        if (amat[seen].sum(axis=0) > 0).all():
            return seen if ordered else np.sort(seen)
    for _ in range(100):
        uncovered = np.ones(amat.shape[1], dtype=bool)
        chosen: list[int] = []
        free = np.ones(n, dtype=bool)
        while uncovered.any() and len(chosen) <= k:
            atom = rng.choice(np.flatnonzero(uncovered))
            carriers = np.flatnonzero(free & (amat[:, atom] > 0))
            gain = amat[carriers] @ uncovered
            best = carriers[gain == gain.max()]
            pick = int(rng.choice(best))
            chosen.append(pick)
            free[pick] = False
            uncovered &= amat[pick] == 0
        if len(chosen) <= k:
            rest = rng.choice(np.flatnonzero(free), size=k - len(chosen), replace=False)
            drawn = np.concatenate([np.array(chosen, dtype=np.int64), rest.astype(np.int64)])
            return drawn if ordered else np.sort(drawn)
    raise SplitsInputError(f"no eligible split with {k} seen combinations found: {k} combinations cannot cover every atom")


def block_size_for(n_combos: int, k: int) -> int:
    """Restarts per batched block: bounded so one step's (B, k, N−k) arrays stay ~32 MB."""
    per = max(1, k * (n_combos - k))
    return int(max(1, min(32, (4 << 20) // per)))


@dataclass
class ClimbProblem:
    """One hill-climbing job: what to climb and how. Picklable (sent to Ray tasks)."""

    universe: Universe
    k: int
    seed: int
    alpha: float = DEFAULT_ALPHA
    maximize: bool = True
    moves: str = "coverage"
    max_iters: int = 1000
    patience: int | None = None
    salt: int = 0
    recombine: bool | None = None
    keep_order: bool = False  # report seen sides in list order (module docstring)

    def use_recombine(self) -> bool:
        """Recombination moves: on unless disabled; "auto" (None) turns them on for small seen
        sides (k ≤ 2 × largest cardinality, e.g. Few-Shot) where coverage is tight and
        single swaps are often blocked, and only under the "coverage" move rule."""
        if self.moves != "coverage":
            return False
        n_aspects = len(self.universe.aspects)
        work = math.comb(self.k, 2) * (2 ** (n_aspects - 1) - 1)
        if self.recombine is None:
            return self.k <= 2 * self.universe.max_cardinality() and work <= 200_000
        return bool(self.recombine)

    def __post_init__(self) -> None:
        if self.moves not in MOVE_RULES:
            raise SplitsInputError(f"moves must be one of {MOVE_RULES}, got {self.moves!r}")
        if not 1 <= self.k < self.universe.n_combos:
            raise SplitsInputError(f"seen size {self.k} must be in 1..{self.universe.n_combos - 1}")

    @property
    def block_size(self) -> int:
        return block_size_for(self.universe.n_combos, self.k)

    def blocks(self, restarts: int) -> list[tuple[int, int]]:
        b = self.block_size
        return [(i, min(i + b, restarts)) for i in range(0, restarts, b)]

    def run_blocks(self, blocks: Sequence[tuple[int, int]]) -> list[tuple[tuple[int, ...], float, int]]:
        out = []
        for start, stop in blocks:
            out.extend(self.run_block(start, stop))
        return out

    def recombinations(self, seen_row: np.ndarray, cs_row: np.ndarray, total: np.ndarray, terms: CountTerms):
        """Coverage-preserving 2-for-2 moves: two seen combinations exchange their values on a
        set T of aspects, giving two unseen combinations (the seen atoms are unchanged).
        Returns (gain of Σ per move, s1, s2, u1, u2, compound-count change per move)."""
        uni = self.universe
        n = len(uni.aspects)
        seen_ids = np.flatnonzero(seen_row)
        vals = uni.value_index[seen_ids]
        i, j = np.triu_indices(len(seen_ids), 1)
        t = np.arange(1, 2 ** (n - 1))
        masks = ((t[:, None] >> np.arange(n)[None, :]) & 1).astype(bool)  # never the last aspect
        new1 = np.where(masks[None], vals[j][:, None, :], vals[i][:, None, :])
        new2 = np.where(masks[None], vals[i][:, None, :], vals[j][:, None, :])
        u1 = uni.lookup_values(new1).ravel()
        u2 = uni.lookup_values(new2).ravel()
        s1 = np.repeat(seen_ids[i], len(t))
        s2 = np.repeat(seen_ids[j], len(t))
        ok = (u1 >= 0) & (u2 >= 0)
        ok[ok] = ~seen_row[u1[ok]] & ~seen_row[u2[ok]]
        s1, s2, u1, u2 = s1[ok], s2[ok], u1[ok], u2[ok]
        cmat = uni.compound_matrix
        delta = (cmat[u1] + cmat[u2] - cmat[s1] - cmat[s2]).round().astype(np.int64)
        cu_row = total - cs_row
        base = terms.table[cs_row, cu_row].sum()
        gains = terms.table[cs_row[None, :] + delta, cu_row[None, :] - delta].sum(axis=1) - base
        return gains, s1, s2, u1, u2, delta

    @staticmethod
    def _apply_recombination(seen: np.ndarray, cs: np.ndarray, r: int, rec, m: int, order: np.ndarray | None) -> None:
        _, s1, s2, u1, u2, delta = rec
        seen[r, [s1[m], s2[m]]] = False
        seen[r, [u1[m], u2[m]]] = True
        cs[r] += delta[m]
        if order is not None:
            _swap_in_place(order[r], s1[m], u1[m])
            _swap_in_place(order[r], s2[m], u2[m])

    def run_block(self, start: int, stop: int) -> list[tuple[tuple[int, ...], float, int]]:
        """Climb restarts start..stop−1 together; returns (seen indices, D, moves) per restart."""
        uni = self.universe
        n, k = uni.n_combos, self.k
        m = uni.compounds_per_combo
        cmat = uni.compound_matrix
        amat = uni.atom_matrix
        terms = CountTerms(n, self.alpha)
        total = cmat.sum(axis=0).astype(np.int64)
        rngs = [restart_rng(self.seed, r, self.salt) for r in range(start, stop)]
        b = len(rngs)
        seen = np.zeros((b, n), dtype=bool)
        order = np.zeros((b, k), dtype=np.int64)  # seen combinations in list order
        for r, rng in enumerate(rngs):
            order[r] = random_eligible_start(uni, k, rng, ordered=self.keep_order)
            seen[r, order[r]] = True
        cs = (seen.astype(np.float64) @ cmat).round().astype(np.int64)
        ac = (seen.astype(np.float64) @ amat).round().astype(np.int64)
        active = np.ones(b, dtype=bool)
        tie_run = np.zeros(b, dtype=np.int64)
        n_moves = np.zeros(b, dtype=np.int64)
        sign = -1.0 if self.maximize else 1.0  # maximising D = minimising Σ
        recombine = self.use_recombine()
        for _ in range(self.max_iters):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            sm = seen[idx]
            seen_idx = np.nonzero(sm)[1].reshape(idx.size, k)
            unseen_idx = np.nonzero(~sm)[1].reshape(idx.size, n - k)
            csb = cs[idx]
            gain = sign * move_gains(terms, cmat, seen_idx, unseen_idx, csb, total - csb)
            protected = (ac[idx] == 1).astype(np.float64)
            a_seen = amat[seen_idx] * protected[:, None, :]
            n_prot = a_seen.sum(axis=-1)
            if self.moves == "coverage":
                carried = np.matmul(a_seen, amat[unseen_idx].transpose(0, 2, 1))
                valid = carried == n_prot[:, :, None]
            else:
                valid = np.broadcast_to((n_prot == 0)[:, :, None], gain.shape)
            improving = valid & (gain > EPS)
            ties = valid & (np.abs(gain) <= EPS)
            for j, r in enumerate(idx):
                cand = np.flatnonzero(improving[j])
                # recombinations: when a plateau is entered, or when no single swap is left
                if not cand.size and recombine and (tie_run[r] == 0 or not ties[j].any()):
                    rec = self.recombinations(seen[r], cs[r], total, terms)
                    rec_gain = sign * rec[0]
                    rec_improving = np.flatnonzero(rec_gain > EPS)
                    if rec_improving.size:
                        tie_run[r] = 0
                        self._apply_recombination(seen, cs, r, rec, int(rec_improving[rngs[r].integers(rec_improving.size)]),
                                                  order if self.keep_order else None)
                        n_moves[r] += 1
                        continue
                if cand.size:
                    tie_run[r] = 0
                else:
                    if self.patience is not None and tie_run[r] >= self.patience:
                        active[r] = False
                        continue
                    cand = np.flatnonzero(ties[j])
                    if not cand.size:
                        active[r] = False
                        continue
                    tie_run[r] += 1
                pick = int(cand[rngs[r].integers(cand.size)])
                s_out = int(seen_idx[j, pick // (n - k)])
                u_in = int(unseen_idx[j, pick % (n - k)])
                seen[r, s_out] = False
                seen[r, u_in] = True
                if self.keep_order:
                    _swap_in_place(order[r], s_out, u_in)
                cs[r] += (cmat[u_in] - cmat[s_out]).astype(np.int64)
                ac[r] += (amat[u_in] - amat[s_out]).astype(np.int64)
                n_moves[r] += 1
        d = divergence_from_counts(terms, cs, total[None, :] - cs, k, n - k, m)
        if self.keep_order:
            return [(tuple(int(i) for i in order[r]), float(d[r]), int(n_moves[r])) for r in range(b)]
        return [(tuple(int(i) for i in np.flatnonzero(seen[r])), float(d[r]), int(n_moves[r])) for r in range(b)]


def _swap_in_place(order_row: np.ndarray, outgoing: int, incoming: int) -> None:
    """The incoming combination takes the outgoing one's place in the seen list."""
    order_row[int(np.flatnonzero(order_row == outgoing)[0])] = incoming


def n_subsets(n: int, k: int) -> int:
    return math.comb(n, k)


def exhaustive(universe: Universe, k: int, alpha: float = DEFAULT_ALPHA, chunk: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
    """Every eligible seen set of size k (lexicographic order) and its D."""
    n = universe.n_combos
    m = universe.compounds_per_combo
    cmat = universe.compound_matrix.astype(np.int16)
    amat = universe.atom_matrix.astype(np.int16)
    total = universe.compound_matrix.sum(axis=0).astype(np.int64)
    terms = CountTerms(n, alpha)
    it = itertools.combinations(range(n), k)
    sets, divs = [], []
    while True:
        block = list(itertools.islice(it, chunk))
        if not block:
            break
        idx = np.array(block, dtype=np.int64).reshape(len(block), k)
        ok = (amat[idx].sum(axis=1) > 0).all(axis=1)
        idx = idx[ok]
        if not idx.size:
            continue
        cs = cmat[idx].sum(axis=1, dtype=np.int64)
        sets.append(idx)
        divs.append(divergence_from_counts(terms, cs, total[None, :] - cs, k, n - k, m))
    if not sets:
        return np.zeros((0, k), dtype=np.int64), np.zeros(0)
    return np.concatenate(sets), np.concatenate(divs)


def select_splits(candidates: Sequence[tuple[Sequence[int], float]], decimals: int, max_splits: int,
                  maximize: bool = True, distinct: str = "sets") -> list[tuple[tuple[int, ...], float]]:
    """Best D after rounding to `decimals`, then up to `max_splits` candidates reaching it,
    distinct as sets (returned sorted; exact D best first, ties in candidate order) or, with
    `distinct="ordered"`, distinct as ordered lists, kept in candidate order as given (the
    original keeps the first ones its restarts reach)."""
    if distinct not in DISTINCT:
        raise ValueError(f"distinct must be one of {list(DISTINCT)}, not {distinct!r}")
    if not candidates:
        return []
    rounded = [round(d, decimals) for _, d in candidates]
    best = max(rounded) if maximize else min(rounded)
    reaching = [i for i in range(len(candidates)) if rounded[i] == best]
    if distinct == "sets":
        reaching.sort(key=lambda i: ((-1 if maximize else 1) * round(candidates[i][1], 12), i))
    out, seen_keys = [], set()
    for i in reaching:
        seen_side = tuple(int(c) for c in candidates[i][0])
        key = frozenset(seen_side) if distinct == "sets" else seen_side
        if key in seen_keys:
            continue
        seen_keys.add(key)
        out.append((tuple(sorted(seen_side)) if distinct == "sets" else seen_side, float(candidates[i][1])))
        if len(out) >= max_splits:
            break
    return out


# ----- the original's search (CompMCTG `get_mcd_splits` / `get_fewshot_splits`) ------------------
def _chernoff_similarity(seen_counts: dict[int, int], unseen_counts: dict[int, int], alpha: float) -> float:
    """Σ_k c_s(k)^α c_u(k)^(1-α) / (Σ c_s)^α (Σ c_u)^(1-α) over compounds present in both count
    tables (a key with count 0 counts as present, as in a Counter after `subtract`)."""
    sum_s, sum_u = sum(seen_counts.values()), sum(unseen_counts.values())
    if not sum_s or not sum_u:
        return 0.0
    numerator = sum(c ** alpha * unseen_counts[k] ** (1.0 - alpha) for k, c in seen_counts.items() if k in unseen_counts)
    return numerator / (sum_s ** alpha * sum_u ** (1.0 - alpha))


def _moved_divergence(from_counts, to_counts, compounds, divergence: float, alpha: float, from_seen: bool) -> float:
    """The original's estimate of D after moving one combo's compounds out of `from_counts`:
    the numerator is rebuilt from the given D and the *current* sums (so after the first half
    of a swap it is an estimate, not the exact D), then updated per compound."""
    sum_from, sum_to = sum(from_counts.values()), sum(to_counts.values())
    s_sum, u_sum = (sum_from, sum_to) if from_seen else (sum_to, sum_from)
    numerator = s_sum ** alpha * u_sum ** (1.0 - alpha) * (1.0 - divergence)
    for k in compounds:
        c_from, c_to = from_counts.get(k, 0), to_counts.get(k, 0)
        old_s, old_u = (c_from, c_to) if from_seen else (c_to, c_from)
        new_s, new_u = (c_from - 1, c_to + 1) if from_seen else (c_to + 1, c_from - 1)
        numerator += new_s ** alpha * new_u ** (1.0 - alpha) - old_s ** alpha * old_u ** (1.0 - alpha)
    moved = len(compounds)
    new_s_sum, new_u_sum = (s_sum - moved, u_sum + moved) if from_seen else (s_sum + moved, u_sum - moved)
    return 1.0 - numerator / (new_s_sum ** alpha * new_u_sum ** (1.0 - alpha))


def _estimate(from_counts, to_counts, compounds, divergence: float, alpha: float, from_seen: bool, combo: int) -> float:
    return _moved_divergence(from_counts, to_counts, compounds[combo], divergence, alpha, from_seen)


def _shift(compounds, from_counts: dict[int, int], to_counts: dict[int, int]) -> None:
    """Move one combo's compounds between count tables (keys stay, as in a Counter)."""
    for k in compounds:
        from_counts[k] = from_counts.get(k, 0) - 1
        to_counts[k] = to_counts.get(k, 0) + 1


def _carries(atoms, protected: set, combo: int) -> bool:
    return any(a in protected for a in atoms[combo])


def _scan(candidates: list[int], start: int, estimate, divergence: float, skip=None, maximize: bool = True) -> int | None:
    """Position of the first candidate (scanning cyclically from `start`) whose move improves
    D strictly, else of the last one that leaves it equal, else None."""
    tie = None
    for offset in range(len(candidates)):
        position = (start + offset) % len(candidates)
        if skip is not None and skip(candidates[position]):
            continue
        new = estimate(candidates[position])
        if (new > divergence) if maximize else (new < divergence):
            return position
        if new == divergence:
            tie = position
    return tie


def original_climb(universe: Universe, seen: list[int], unseen: list[int], alpha: float = DEFAULT_ALPHA,
                   max_iters: int = 1000, maximize: bool = True) -> tuple[list[int], list[int]]:
    """One climb as the original's `swap_examples` does it (lists in place, in their order):
    per iteration, the protected atoms are those carried by at most one seen combo; the
    outgoing combo is found by `_scan` over the seen list from just after the last outgoing
    position, skipping carriers of protected atoms, judged alone; its compounds are moved;
    the incoming combo is found likewise over the unseen list, judged against the D of the
    iteration's start; the two swap places. It stops when either scan finds nothing or
    after `max_iters` iterations."""
    compounds = [np.flatnonzero(row).tolist() for row in universe.compound_matrix]
    atoms = [np.flatnonzero(row).tolist() for row in universe.atom_matrix]
    seen_counts: dict[int, int] = {}
    unseen_counts: dict[int, int] = {}
    for side, counts in ((seen, seen_counts), (unseen, unseen_counts)):
        for combo in side:
            for k in compounds[combo]:
                counts[k] = counts.get(k, 0) + 1
    start_seen = start_unseen = 0
    for _ in range(max_iters):
        carriers: dict[int, int] = {}
        for combo in seen:
            for a in atoms[combo]:
                carriers[a] = carriers.get(a, 0) + 1
        protected = {a for a, count in carriers.items() if count <= 1}
        divergence = 1.0 - _chernoff_similarity(seen_counts, unseen_counts, alpha)
        out_pos = _scan(seen, start_seen, partial(_estimate, seen_counts, unseen_counts, compounds, divergence, alpha, True),
                        divergence, skip=partial(_carries, atoms, protected), maximize=maximize)
        if out_pos is None:
            break
        outgoing = seen[out_pos]
        _shift(compounds[outgoing], seen_counts, unseen_counts)
        in_pos = _scan(unseen, start_unseen, partial(_estimate, unseen_counts, seen_counts, compounds, divergence, alpha, False),
                       divergence, maximize=maximize)
        if in_pos is None:
            break
        incoming = unseen[in_pos]
        _shift(compounds[incoming], unseen_counts, seen_counts)
        seen[out_pos], unseen[in_pos] = incoming, outgoing
        start_seen, start_unseen = (out_pos + 1) % len(seen), (in_pos + 1) % len(unseen)
    return seen, unseen


def original_search(universe: Universe, k: int, seed: int, times: int, alpha: float = DEFAULT_ALPHA,
                    max_iters: int = 1000, maximize: bool = True) -> tuple[list[tuple[tuple[int, ...], float]], int]:
    """The original's restarts: `times` draws of `random.Random(seed).sample(combos, k)` (combos
    in the universe's product order); a draw is climbed only when each side carries every atom
    of the other (the others are spent, not redrawn). Returns (seen list, D) per climbed draw,
    in draw order, and the number of climbed draws. The unseen list is in product order (the
    original takes Python's set order, which only matters once moves are possible)."""
    import random

    rng = random.Random(seed)
    combos = list(range(universe.n_combos))
    amat = universe.atom_matrix > 0
    candidates = []
    for _ in range(times):
        seen = rng.sample(combos, k)
        chosen = set(seen)
        unseen = [c for c in combos if c not in chosen]
        seen_atoms, unseen_atoms = amat[seen].any(axis=0), amat[unseen].any(axis=0)
        if not (seen_atoms == unseen_atoms).all():
            continue
        seen, unseen = original_climb(universe, seen, unseen, alpha, max_iters, maximize)
        candidates.append((tuple(seen), float(divergence(universe, seen, alpha))))
    return candidates, len(candidates)

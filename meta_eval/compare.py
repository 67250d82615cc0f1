"""Comparing systems on stored per-row scores: paired bootstrap, approximate randomisation, leaderboard.

Definitions in `docs/meta_eval.md`, "Comparing systems". The scores are never recomputed: each
test resamples the per-row numbers already stored (as sacreBLEU's `--paired-bs` does with
per-sentence statistics).

* Pairing: rows are paired by a unit column (`doc_id`: the same input given to every system).
  Several rows of one (unit, system) are averaged first. Units where any compared system has no
  finite score are dropped (and counted), so all systems share the same units.
* Paired bootstrap (Koehn 2004): N resamples of the units with replacement, drawn in seeded
  blocks (`meta_eval.bootstrap.block_counts`), the same resamples for every system. Per system:
  the mean over the units and the 95 % percentile interval of the resampled means. Per pair
  (a, b): delta = mean_a - mean_b and the two-sided p-value
  (1 + #{r : |delta_r - delta| >= |delta|}) / (N + 1) (the resampled deltas shifted to the null
  hypothesis delta = 0); the pair's interval is that test inverted (`inverted_intervals`), so a
  pair is significant exactly when its interval excludes 0.
* Approximate randomisation (Noreen 1989; Riezler & Maxwell 2005): T trials, each swapping the
  two systems' scores of every unit with probability 1/2, the same swaps for every pair; two-sided
  p-value (1 + #{t : |delta_t| >= |delta|}) / (T + 1). delta_t is linear in the scores, so every
  pair's comes from one (trials x systems) product of swap signs and per-unit means.
* Ranks: by mean, best first (lowest first for lower-is-better columns), equal means share the
  smaller rank. A pair's `better` names the system whose mean is better when the bootstrap
  p-value (the randomisation p-value when the bootstrap is off) is below `alpha`: one test
  decides every mark (`decisive_test`).
* Significance clusters (`significance_clusters`): runs of consecutive ranks, as the WMT
  metrics task draws them.

Blocks of resamples and of trials run through a runner (`meta_eval.runner`), so the answer is the
same in-process and on any number of Ray tasks. `system_comparison` takes rows (a DataFrame);
`grid_comparison` takes the per-unit means that `meta_eval.partials` builds from partial sums
without loading the rows; both end in `compare_units`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from meta_eval.bootstrap import BLOCK_SIZE, block_counts, plan_blocks
from meta_eval.numbers import scaled, unscaled
from meta_eval.pairwise import pair_chunks
from meta_eval.results import Interval, LeaderboardRow, SystemComparison, SystemPair, SystemScore, to_json_dict
from meta_eval.row_account import RowAccount, group_keys, missing_mask
from meta_eval.runner import Runner, local_runner

VERSION = "2"
TESTS = ("bootstrap", "randomization")
_RANDOMIZATION_SALT = 0x4152  # separates the randomisation stream from the bootstrap's


def paired_units(frame: pd.DataFrame, column: str, systems: Sequence[str] | None = None, unit: str = "doc_id",
                 system_col: str = "system") -> tuple[pd.DataFrame, int]:
    """(units x systems) table of per-unit means of `column`, complete rows only, and the number
    of units dropped because some system had no finite score there."""
    from scoring.errors import InputError

    for col in (unit, system_col, column):
        if col not in frame:
            from scoring.schema import visible_columns

            raise InputError(f"comparing systems needs a {col!r} column "
                             f"(have: {', '.join(visible_columns(frame.columns))})")
    data = frame[[unit, system_col, column]].copy()
    data[column] = pd.to_numeric(data[column], errors="coerce").astype(float)
    data = data[~missing_mask(data[unit]) & ~missing_mask(data[system_col])]  # counted by `compare_systems`
    data[system_col] = data[system_col].astype(str)
    grid = data.pivot_table(index=unit, columns=system_col, values=column, aggfunc="mean", dropna=False)
    if systems is not None:
        missing = [s for s in systems if s not in grid.columns]
        if missing:
            from scoring.display_names import quoted_list

            raise InputError(f"system(s) {quoted_list(missing)} have no rows in column {system_col!r} "
                             f"(have: {quoted_list(map(str, grid.columns))})")
        grid = grid[list(systems)]
    if grid.shape[1] < 2:
        raise InputError(f"comparing systems needs two or more systems in {system_col!r}, found {grid.shape[1]}")
    complete = np.isfinite(grid.to_numpy(dtype=float)).all(axis=1)
    return grid[complete], int((~complete).sum())


def _resampled_means(shared: tuple[np.ndarray, int], blocks: list) -> list[np.ndarray]:
    """Runner task: per block, (resamples, systems) means of the resampled units."""
    values, seed = shared
    out = []
    for block, size in blocks:
        counts = block_counts(len(values), seed, block, size).astype(float)
        out.append(counts @ values / len(values))
    return out


def _randomization_rng(seed: int, block: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, _RANDOMIZATION_SALT], spawn_key=(block,)))


def randomization_signs(n_units: int, seed: int, block: int, size: int) -> np.ndarray:
    """(size, n_units) +1 / -1: -1 where a trial swaps the two systems' scores of a unit."""
    rng = _randomization_rng(seed, block)
    return np.where(rng.random((size, n_units)) < 0.5, -1.0, 1.0)


def _randomized_means(shared: tuple[np.ndarray, int], blocks: list) -> list[np.ndarray]:
    """Runner task: per block, (trials, systems) signed means mean_u(s_tu * v_uk). A trial's
    swapped difference of pair (i, j) is mean_u(s_tu * (v_ui - v_uj)), the difference of two
    columns of this, so one product serves every pair (the same swaps for all pairs)."""
    values, seed = shared
    return [randomization_signs(len(values), seed, block, size) @ values / len(values) for block, size in blocks]


def _two_sided(observed: np.ndarray, null: np.ndarray) -> np.ndarray:
    """(1 + #{|null| >= |observed|}) / (K + 1) per column; a relative 1e-12 absorbs rounding.
    NaN (undefined, so no mark) where the observed or a resampled difference is not finite:
    scores near the float64 limit (1e308) overflow a difference, and a count over NaN would
    read as the smallest p."""
    p = (1 + (np.abs(null) >= _bound(observed)).sum(axis=0)) / (len(null) + 1)
    defined = np.isfinite(observed) & np.isfinite(null).all(axis=0)
    return np.where(defined, p, np.nan)


def _bound(observed: np.ndarray) -> np.ndarray:
    return np.abs(observed) - 1e-12 * np.maximum(1.0, np.abs(observed))


def _intervals(values: np.ndarray, level: float) -> np.ndarray:
    """(2, columns) percentile interval of every column."""
    tail = 100 * (1 - level) / 2
    if not len(values):
        return np.full((2, values.shape[1]), np.nan)
    return np.percentile(values, [tail, 100 - tail], axis=0)


def inverted_intervals(deltas: np.ndarray, boot: np.ndarray, alpha: float) -> np.ndarray:
    """(2, pairs) interval of the values delta_0 that the paired bootstrap test does not reject
    at `alpha`: delta +- h, h the (m + 1)-th largest |delta_r - delta| with m the most resamples
    beyond |delta| that still give p = (1 + c) / (N + 1) < alpha (plus the test's rounding
    allowance), so "p < alpha" and "the interval excludes 0" are the same statement.
    NaN when N is too small for any p below alpha."""
    n = len(boot)
    m = math.ceil(alpha * (n + 1) - 1) - 1
    if m < 0 or m >= n:
        return np.full((2, len(deltas)), np.nan)
    dev = np.sort(np.abs(boot - deltas), axis=0)
    half = dev[n - 1 - m] + 1e-12 * np.maximum(1.0, np.abs(deltas))
    return np.vstack([deltas - half, deltas + half])


MAX_SYSTEMS = 1000  # 499,500 pairs, each tested with every resample and trial: beyond this, name --systems


def _ranks(means: np.ndarray, lower_is_better: bool) -> np.ndarray:
    from scipy.stats import rankdata

    oriented = means if lower_is_better else -means
    return rankdata(oriented, method="min").astype(int)


def _check_tests(tests: Sequence[str], n_resamples: int, trials: int, seed: int = 0) -> None:
    from meta_eval.defaults import check_counts
    from scoring.errors import UsageError

    check_counts(seed, resamples=n_resamples, trials=trials)

    unknown = [t for t in tests if t not in TESTS]
    if unknown or not tests:
        raise UsageError(f"unknown test(s) {unknown or list(tests)}: use one or more of {', '.join(TESTS)}")
    if "bootstrap" in tests and n_resamples < 1 or "randomization" in tests and trials < 1:
        raise UsageError("resamples and trials must be >= 1")


def system_comparison(frame: pd.DataFrame, column: str, *, dataset: str = "all",
                      systems: Sequence[str] | None = None, unit: str = "doc_id", system_col: str = "system",
                      **options) -> SystemComparison:
    """Every system (or the named ones) on one score column of one dataset of a row frame;
    see the module doc. `options` go to `compare_units`."""
    from scoring.errors import InputError

    _check_tests(options.get("tests", TESTS), options.get("n_resamples", 1000), options.get("trials", 10000),
                 options.get("seed", 0))
    try:
        grid, dropped = paired_units(frame, column, systems, unit, system_col)
    except InputError as exc:
        raise InputError(f"{where_of(dataset, column)}: {exc}") from None
    return compare_units(grid.to_numpy(dtype=float), [str(s) for s in grid.columns], dropped, column=column,
                         dataset=dataset, unit=unit, **options)


def where_of(dataset, column) -> str:
    """"dataset 'D', column 'C'" as a comparison's errors name it, each name cut
    (`scoring.display_names.quoted`): a 100,000-character dataset made a 100 kB reason."""
    from scoring.display_names import quoted

    return f"dataset {quoted(dataset)}, column {quoted(column)}"


def grid_comparison(grid, systems: Sequence[str] | None = None, *, unit: str = "doc_id",
                    **options) -> SystemComparison:
    """`compare_units` on a `meta_eval.partials.UnitGrid` (per-unit means built from partial
    sums): the named systems (default all), complete units only."""
    from scoring.errors import InputError

    where = where_of(grid.dataset, grid.column)
    names = list(grid.systems)
    if systems is not None:
        missing = [s for s in systems if s not in names]
        if missing:
            from scoring.display_names import quoted_list

            raise InputError(f"{where}: system(s) {quoted_list(missing)} have no rows here (have: {quoted_list(names)})")
        names = list(systems)
    if len(names) < 2:
        raise InputError(f"{where}: comparing systems needs two or more systems, found {len(names)}")
    values = grid.means[:, [grid.systems.index(s) for s in names]]
    complete = np.isfinite(values).all(axis=1)
    return compare_units(values[complete], names, int((~complete).sum()), column=grid.column,
                         dataset=grid.dataset, unit=unit, **options)


def compare_units(values: np.ndarray, names: Sequence[str], dropped: int, *, column: str, dataset: str = "all",
                  unit: str = "doc_id", lower_is_better: bool = False, tests: Sequence[str] = TESTS,
                  n_resamples: int = 1000, trials: int = 10000, seed: int = 0, alpha: float = 0.05,
                  level: float = 0.95, runner: Runner | None = None) -> SystemComparison:
    """Every pair of systems at once on a complete (units x systems) table of per-unit means."""
    from scoring.errors import InputError
    from scoring.signature import Signature, library_versions

    _check_tests(tests, n_resamples, trials, seed)
    if not len(values):
        raise InputError(f"{where_of(dataset, column)}: no {unit} has a finite score for every system")
    names = [str(s) for s in names]
    n_units, n_sys = values.shape
    if n_sys > MAX_SYSTEMS:
        raise InputError(f"{where_of(dataset, column)}: {n_sys:,} systems make {n_sys * (n_sys - 1) // 2:,} "
                         f"pairs; at most {MAX_SYSTEMS:,} systems are compared at once (`compare --systems` names them)")
    # one power-of-two scale for every system (`meta_eval.numbers`): means, resampled means and
    # differences of scores near 1e308 stay finite; `unscaled` brings the reported numbers back
    values, k = scaled(values)
    means = values.mean(axis=0)
    ranks = _ranks(means, lower_is_better)
    order = sorted(range(n_sys), key=lambda k: (ranks[k], names[k]))
    upper = np.triu_indices(n_sys, k=1)  # pairs in rank order: (order[x], order[y]) for x < y
    first, second = np.asarray(order)[upper[0]], np.asarray(order)[upper[1]]
    run = runner or local_runner
    deltas = means[first] - means[second]
    nan_pairs = np.full((2, len(first)), np.nan)
    sys_ci, pair_ci = np.full((2, n_sys), np.nan), nan_pairs
    p_boot = p_rand = None
    if "bootstrap" in tests:
        boot_means = np.concatenate(run(_resampled_means, (values, seed), plan_blocks(n_resamples)))
        sys_ci = _intervals(boot_means, level)
        p_boot, pair_ci = np.full(len(first), np.nan), np.full((2, len(first)), np.nan)
        for part in pair_chunks(len(first), n_resamples):  # (resamples x pairs) a slice at a time
            boot_deltas = boot_means[:, first[part]] - boot_means[:, second[part]]
            p_boot[part] = _two_sided(deltas[part], boot_deltas - deltas[part])
            pair_ci[:, part] = inverted_intervals(deltas[part], boot_deltas, alpha)
    if "randomization" in tests:
        null_means = np.concatenate(run(_randomized_means, (values, seed), plan_blocks(trials)))
        p_rand = np.full(len(first), np.nan)
        for part in pair_chunks(len(first), trials):
            p_rand[part] = _two_sided(deltas[part], null_means[:, first[part]] - null_means[:, second[part]])
    decisive = p_boot if p_boot is not None else p_rand
    means, deltas, sys_ci, pair_ci = (unscaled(x, k) for x in (means, deltas, sys_ci, pair_ci))
    scores = tuple(SystemScore(names[s], float(means[s]), Interval(float(sys_ci[0, s]), float(sys_ci[1, s]), level),
                               int(ranks[s])) for s in order)
    pairs = []
    for p, (i, j) in enumerate(zip(first, second)):
        better = None
        if decisive[p] < alpha and deltas[p] != 0:
            better = names[i] if (means[i] < means[j]) == lower_is_better else names[j]
        pairs.append(SystemPair(
            a=names[i], b=names[j], mean_a=float(means[i]), mean_b=float(means[j]), diff=float(deltas[p]),
            ci_diff=Interval(float(pair_ci[0, p]), float(pair_ci[1, p]), 1 - alpha),
            p_bootstrap=None if p_boot is None else float(p_boot[p]),
            p_randomization=None if p_rand is None else float(p_rand[p]), better=better))
    sig = Signature("compare-systems", VERSION, {
        "unit": unit, "units": n_units, "tests": list(tests),
        "resamples": n_resamples if "bootstrap" in tests else 0,
        "trials": trials if "randomization" in tests else 0, "seed": seed, "block_size": BLOCK_SIZE,
        "p": "two-sided (1+c)/(K+1)", "ci": f"percentile {level:g}",
        "ci_diff": f"bootstrap test inverted at alpha {alpha:g}", "alpha": alpha,
        "direction": "lower" if lower_is_better else "higher", **library_versions("numpy")})
    return SystemComparison(dataset=dataset, column=column, lower_is_better=lower_is_better, unit=unit,
                            n_units=n_units, n_units_dropped=dropped, systems=scores, pairs=tuple(pairs),
                            signature=str(sig))


class Comparisons(list):
    """The comparisons of `compare_systems` (a list), with `rows`: where every input row went
    (`meta_eval.row_account.RowAccount`)."""

    rows: RowAccount


def compare_systems(frame: pd.DataFrame, columns: Iterable[str], *, dataset_col: str = "dataset",
                    lower_is_better: Iterable[str] = (), **options) -> Comparisons:
    """`system_comparison` for every score column in every dataset (`dataset_col` groups; one
    group "all" when the column is absent or empty). `options` go to `system_comparison`.
    Rows without a dataset (when others have one), a system or a unit, or with one of these
    keys not valid UTF-8, are in no comparison: the result's `rows` counts them per reason."""
    lower = set(lower_is_better)
    columns = list(columns)
    keep, rows = group_keys(frame, dataset_col, [options.get("system_col", "system"), options.get("unit", "doc_id")])
    if rows.rows_left_out:
        frame = frame.loc[keep]
    if dataset_col in frame and not missing_mask(frame[dataset_col]).all():
        groups = [(str(name), part) for name, part in frame.groupby(dataset_col, sort=True)]
    else:
        groups = [("all", frame)]
    out = Comparisons(system_comparison(part, column, dataset=name, lower_is_better=column in lower, **options)
                      for name, part in groups for column in columns)
    out.rows = rows
    return out


def leaderboard(comparisons: Iterable[SystemComparison]) -> list[LeaderboardRow]:
    """One row per (dataset, column, system): mean, interval, rank (best first)."""
    return [LeaderboardRow(dataset=c.dataset, column=c.column, system=s.system, mean=s.mean, low=s.interval.low,
                           high=s.interval.high, rank=s.rank, n_units=c.n_units, lower_is_better=c.lower_is_better)
            for c in comparisons for s in c.systems]


def decisive_test(comp: SystemComparison) -> str:
    """The test whose p-value decides every `better` mark of `comp`: the paired bootstrap when it
    ran, else approximate randomisation (`compare_units`)."""
    return "bootstrap" if any(p.p_bootstrap is not None for p in comp.pairs) else "randomization"


def decisive_p(pair: SystemPair, test: str) -> float | None:
    """The pair's p-value from the deciding test (`decisive_test`)."""
    return pair.p_bootstrap if test == "bootstrap" else pair.p_randomization


TEST_NAMES = {"bootstrap": "paired bootstrap", "randomization": "approximate randomisation"}


def significance_clusters(comp: SystemComparison) -> dict[str, int]:
    """System -> cluster number (1 = top), as the WMT metrics task draws significance clusters:
    walk the systems in rank order; a system starts a new cluster when its `better` mark
    separates it from any system already in the current cluster, else it joins that cluster.
    Clusters are therefore runs of consecutive ranks."""
    separated = {frozenset((p.a, p.b)) for p in comp.pairs if p.better is not None}
    clusters: dict[str, int] = {}
    current: list[str] = []
    number = 0
    for score in comp.systems:
        if not current or any(frozenset((score.system, other)) in separated for other in current):
            number += 1
            current = []
        current.append(score.system)
        clusters[score.system] = number
    return clusters


CLUSTER_DEFINITION = ("Clusters are drawn as in the WMT metrics task: going down the ranking, a system opens a new "
                      "cluster when it is significantly different from any system already in the current cluster, "
                      "so each cluster is a run of consecutive ranks and the leading group is cluster 1.")


LEADERBOARD_FIELDS = ("dataset", "column", "system", "mean", "low", "high", "rank", "n_units", "lower_is_better")


def leaderboard_csv(rows: Iterable[LeaderboardRow]) -> str:
    """The leaderboard as CSV text (header `LEADERBOARD_FIELDS`). Text cells that a spreadsheet
    would run as a formula start with `'` (`scoring.tables.spreadsheet_cell`); numbers are as they are."""
    from scoring.tables import spreadsheet_cell

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(LEADERBOARD_FIELDS)
    for row in rows:
        writer.writerow([spreadsheet_cell(getattr(row, name)) for name in LEADERBOARD_FIELDS])
    return buffer.getvalue()


LEADERBOARD_FORMAT = "ctgscore-leaderboard/1"


def leaderboard_document(comparisons: Sequence[SystemComparison], **extra) -> dict:
    """The one leaderboard JSON document: what the meta report, `compare -o x.json` and
    `leaderboard` write, and what `--previous` reads. `format` names this layout; `leaderboard`
    holds one row per (dataset, column, system); `extra` adds keys (refresh time, job)."""
    return {"format": LEADERBOARD_FORMAT, "comparisons": to_json_dict(list(comparisons)),
            "leaderboard": to_json_dict(leaderboard(comparisons)), **extra}


def comparisons_json(comparisons: Sequence[SystemComparison], **extra) -> str:
    """`leaderboard_document` as JSON text."""
    return json.dumps(leaderboard_document(comparisons, **extra), indent=1, allow_nan=False)


def comparison_markdown(comparisons: Sequence[SystemComparison], digits: int = 4, pairs_in: str | None = None) -> str:
    """Leaderboard and pairwise tables, one section per (dataset, column). Above
    `meta_eval.page_pairs.ALL_PAIRS_MAX` systems the pair tables hold the pairs that matter
    (`meta_eval.page_pairs.pairs_that_matter`), then one line naming how many are left out and
    where every pair is (`pairs_in`, a `meta_eval.page_pairs.IN_*` text; default: `compare`'s JSON)."""
    from meta_eval import page_pairs
    from scoring.display_names import display_name
    from scoring.tables import markdown_code, markdown_name, markdown_table

    out = []
    for comp in comparisons:
        arrow = "lower is better" if comp.lower_is_better else "higher is better"
        out.append(f"#### {markdown_name(comp.column)} on {markdown_code(display_name(comp.dataset))} ({arrow})\n")
        out.append(f"{comp.n_units} paired units ({markdown_code(comp.unit)}), {comp.n_units_dropped} dropped for a "
                   "missing score.\n")
        all_pairs = page_pairs.shows_all_pairs(comp)
        clusters = None if all_pairs else significance_clusters(comp)
        if all_pairs:
            out.append(markdown_table(["rank", "system", "mean", "95% low", "95% high"],
                                      [[s.rank, s.system, s.mean, s.interval.low, s.interval.high]
                                       for s in comp.systems], digits))
        else:  # the pairs table no longer shows every separation: the clusters say what it would
            out.append(markdown_table(["rank", "system", "mean", "95% low", "95% high", "cluster"],
                                      [[s.rank, s.system, s.mean, s.interval.low, s.interval.high, clusters[s.system]]
                                       for s in comp.systems], digits))
            out.append(f"{CLUSTER_DEFINITION}\n")
        level = f"{100 * comp.pairs[0].ci_diff.level:g}%" if comp.pairs else "95%"
        test = decisive_test(comp)
        other = [t for t in TESTS if t != test and any(decisive_p(p, t) is not None for p in comp.pairs)]
        out.append(f"The {TEST_NAMES[test]} decides every mark: `better` names a system exactly when its p is below "
                   "alpha, and the pair interval is that test inverted, so it excludes 0 exactly then "
                   "(– where there are too few resamples for any p below alpha).\n")
        pairs = comp.pairs
        if not all_pairs:
            pairs = page_pairs.pairs_that_matter(comp, clusters)
            out.append(f"{len(pairs):,} of {len(comp.pairs):,} pairs: each system against the next in rank, and the "
                       "pair that opens each significance cluster.\n")
        out.append(markdown_table(["A", "B", "mean A - mean B", f"{level} low", f"{level} high", f"p ({test})",
                                   "better"],
                                  [[p.a, p.b, p.diff, p.ci_diff.low, p.ci_diff.high, decisive_p(p, test),
                                    p.better or "no significant difference"] for p in pairs], digits))
        for name in other:  # shown apart: it decides nothing
            out.append(f"The {TEST_NAMES[name]} for reference (it decides no mark):\n")
            out.append(markdown_table(["A", "B", f"p ({name})"], [[p.a, p.b, decisive_p(p, name)] for p in pairs],
                                      digits))
        if len(pairs) < len(comp.pairs):
            out.append(page_pairs.left_out_line(len(pairs), len(comp.pairs), pairs_in or page_pairs.IN_COMPARE) + "\n")
        out.append(f"{markdown_code(comp.signature)}\n")
    return "\n".join(out)

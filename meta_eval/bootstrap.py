"""Paired bootstrap significance of metric-human correlations (BARTScore §4.2; Koehn 2004).

See `docs/meta_eval.md`, "Paired bootstrap". Resample rows (sample level) or documents
(document and system level) with replacement N times; on each resample compute every metric's
correlation with the human column; for metrics A and B a two-sided test of corr_A = corr_B with
its interval of corr_A - corr_B built from the same order statistics, so a mark and its interval
always agree (`meta_eval.marks`); 95 % percentile intervals of each correlation. Level "darr" resamples the
WMT DARR better/worse pairs and compares Kendall-like taus the same way.

Determinism: resamples come in blocks of `BLOCK_SIZE`; block k draws from
`SeedSequence(seed, spawn_key=(k,))`, so its resamples do not depend on how a runner spreads the
blocks (`meta_eval.runner`): in-process and 1 or 4 Ray tasks give identical numbers. All metrics share the same resamples, so
any two columns of the result form a paired comparison.

Speed (sample level): a correlation does not depend on the order of the resampled rows. Each
metric keeps two fixed row orders (sorted by metric then human, and by human then metric) with
dense integer ranks; sorting the layout positions of a resample's draws lists it already sorted,
which makes scipy's `rankdata` (Spearman) and `kendalltau` sorts cheap. Ranks
preserve order and ties, so Spearman and Kendall values equal scipy on the raw floats.
Scipy does every statistic: `rankdata`, `kendalltau`, and Pearson r of the ranks as one minus
scipy's correlation distance (`pearsonr` without its p-value, the costliest part at 100k rows).

Why not `scipy.stats.bootstrap`: it draws all resamples from one generator inside one call, so
its work cannot be split into tasks whose union is identical for any number of tasks, and it
would redraw resamples for every statistic, while the pairwise comparisons of M metrics need one
shared set. Percentile intervals and the smoothed p-value are computed from that shared set.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy import stats

from meta_eval import marks
from meta_eval.correlation import MEAN_DECIMALS, correlate
from meta_eval.numbers import conditioned
from meta_eval.results import Interval, MetricInterval, PairComparison, SignificanceBlock
from meta_eval.runner import Runner, local_runner

BLOCK_SIZE = 25
VERSION = "2"


def block_rng(seed: int, block: int) -> np.random.Generator:
    """The generator of resample block `block` (independent of the number of tasks)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(block,)))


def block_draws(n_units: int, seed: int, block: int, size: int) -> np.ndarray:
    """(size, n_units) unit indices drawn with replacement for each resample of the block."""
    rng = block_rng(seed, block)
    draws = np.empty((size, n_units), dtype=np.int32 if n_units < 2**31 - 1 else np.intp)
    for r in range(size):
        draws[r] = rng.integers(0, n_units, n_units)
    return draws


def block_counts(n_units: int, seed: int, block: int, size: int) -> np.ndarray:
    """(size, n_units) multiplicities of the units drawn in each resample of the block."""
    draws = block_draws(n_units, seed, block, size)
    return np.stack([np.bincount(d, minlength=n_units) for d in draws]) if size else \
        np.empty((0, n_units), dtype=np.int64)


def plan_blocks(n_resamples: int) -> list[tuple[int, int]]:
    """[(block id, resamples in block)] covering n_resamples."""
    blocks = []
    for k in range(math.ceil(n_resamples / BLOCK_SIZE)):
        blocks.append((k, min(BLOCK_SIZE, n_resamples - k * BLOCK_SIZE)))
    return blocks


def _dense(values: np.ndarray) -> np.ndarray:
    """Dense integer ranks (scipy), int16 / int32 when they fit (cheaper sorts), else intp."""
    ranks = stats.rankdata(values, method="dense")
    for dtype in (np.int16, np.int32):
        if ranks.max() < np.iinfo(dtype).max:
            return ranks.astype(dtype)
    return ranks.astype(np.intp)


def _positions(order: np.ndarray) -> np.ndarray:
    """Inverse permutation: where each row sits in the layout `order`."""
    pos = np.empty(len(order), dtype=np.int32 if len(order) < 2**31 - 1 else np.intp)
    pos[order] = np.arange(len(order))
    return pos


@dataclass
class Prepared:
    """Everything a resample needs, built once on the driver and shared with the tasks."""

    level: str
    methods: tuple[str, ...]
    variant: str
    n_units: int
    n_metrics: int
    raw: np.ndarray | None = None  # (n, M + 1) sample level, human last
    # per metric: (position of each row in the layout, m ranks, h ranks in layout order)
    by_metric: list = field(default_factory=list)  # Spearman layout: sorted by metric, then human
    by_human: list = field(default_factory=list)  # Kendall layout: sorted by human, then metric
    doc_corr: dict = field(default_factory=dict)  # document level: method -> (D, M) per-doc correlations
    sums: np.ndarray | None = None  # system level: (D, K, M + 1) sums per (doc, system)
    counts: np.ndarray | None = None  # system level: (D, K) rows per (doc, system)


def _codes(values) -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd

    codes, uniques = pd.factorize(pd.Series(values), sort=True)
    if (codes < 0).any():
        raise ValueError("grouping column has missing values")
    return codes, np.asarray(uniques)


def prepare(metrics: np.ndarray, human: np.ndarray, level: str = "sample", methods=("spearman",),
            variant: str = "b", doc=None, system=None) -> Prepared:
    """metrics: (n, M) scores, human: (n,) judgments; rows must be finite (drop NaNs first)."""
    metrics = np.asarray(metrics, dtype=float)
    if metrics.ndim == 1:
        metrics = metrics[:, None]
    human = np.asarray(human, dtype=float)
    if not (np.isfinite(metrics).all() and np.isfinite(human).all()):
        raise ValueError("paired bootstrap needs finite scores: drop rows with NaN first")
    if level in ("sample", "system"):  # sums of scores near 1e308 (`meta_eval.numbers`); DARR keeps 0/1
        metrics, human = conditioned(metrics, axis=0), conditioned(human)
    n, m = metrics.shape
    methods = tuple(methods)
    if level == "sample":
        prep = Prepared(level, methods, variant, n, m, raw=np.column_stack([metrics, human]))
        h_dense = _dense(human)
        for j in range(m):
            col = metrics[:, j]
            m_dense = _dense(col)
            if "spearman" in methods:
                order = np.lexsort((human, col))
                prep.by_metric.append((_positions(order), m_dense[order], h_dense[order]))
            if "kendall" in methods:
                order = np.lexsort((col, human))
                prep.by_human.append((_positions(order), m_dense[order], h_dense[order]))
        return prep
    if doc is None:
        raise ValueError(f"level {level!r} resamples documents: a doc_id column is required")
    doc_codes, docs = _codes(doc)
    if level == "document":
        prep = Prepared(level, methods, variant, len(docs), m)
        order = np.argsort(doc_codes, kind="stable")
        bounds = np.flatnonzero(np.diff(doc_codes[order])) + 1
        groups = np.split(order, bounds)
        for method in methods:
            table = np.full((len(docs), m), np.nan)
            for d, rows in enumerate(groups):
                for j in range(m):
                    table[d, j] = correlate(metrics[rows, j], human[rows], method, variant)
            prep.doc_corr[method] = table
        return prep
    if level == "system":
        if system is None:
            raise ValueError("system-level correlation needs a system column")
        sys_codes, systems = _codes(system)
        values = np.column_stack([metrics, human])
        sums = np.zeros((len(docs), len(systems), m + 1))
        np.add.at(sums, (doc_codes, sys_codes), values)
        counts = np.zeros((len(docs), len(systems)))
        np.add.at(counts, (doc_codes, sys_codes), 1.0)
        return Prepared(level, methods, variant, len(docs), m, sums=sums, counts=counts)
    if level == "darr":
        return _prepare_darr(metrics, human, doc_codes, len(docs), methods, variant)
    raise ValueError(f"unknown level {level!r}")


def _prepare_darr(metrics, better, pair_codes, n_pairs, methods, variant) -> Prepared:
    """WMT DARR: one unit per better/worse pair; +1 if score(better) > score(worse), else -1
    (a tie is discordant), so a resample's Kendall-like tau is the count-weighted mean sign."""
    if not np.isin(better, (0.0, 1.0)).all():
        raise ValueError("DARR level needs a 0/1 better column")
    scores = np.full((n_pairs, 2, metrics.shape[1]), np.nan)
    scores[pair_codes, better.astype(int)] = metrics
    complete = np.isfinite(scores).all(axis=(1, 2))  # pairs with both sides scored
    if not complete.any():
        raise ValueError("DARR level needs one better (1) and one worse (0) row per pair")
    scores = scores[complete]
    signs = np.where(scores[:, 1] > scores[:, 0], 1.0, -1.0)
    return Prepared("darr", methods, variant, len(signs), metrics.shape[1], doc_corr={"darr": signs})


def pearson_of_ranks(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r of two rank vectors as 1 - scipy's correlation distance (the same centred
    cosine, to ~1e-16), 3x faster than `pearsonr` on 100k rows because it computes no p-value.
    NaN when either vector is constant, like `pearsonr`."""
    from scipy.spatial.distance import correlation

    if x[0] == x[-1] and (x == x[0]).all() or y[0] == y[-1] and (y == y[0]).all():
        return math.nan
    return 1.0 - float(correlation(x, y))


BATCH_ROWS = 20_000  # up to this many rows, Pearson/Spearman run batched over a whole block


def _batched_sample_block(prep: Prepared, draws: np.ndarray, out: dict) -> None:
    """Pearson / Spearman for all resamples of a block at once: (block, n) arrays through
    `scipy.stats.rankdata(axis=1)` and `scipy.stats.pearsonr(axis=1)` (cheap for small n)."""
    if "pearson" in prep.methods:
        human = prep.raw[:, -1][draws]
        for j in range(prep.n_metrics):
            out["pearson"][:, j] = stats.pearsonr(prep.raw[:, j][draws], human, axis=1).statistic
    if "spearman" in prep.methods:
        for j, (pos, m_rank, h_rank) in enumerate(prep.by_metric):
            rows = np.sort(pos[draws], axis=1)
            x = stats.rankdata(m_rank[rows], axis=1)
            y = stats.rankdata(h_rank[rows], axis=1)
            out["spearman"][:, j] = stats.pearsonr(x, y, axis=1).statistic


def _sample_block(prep: Prepared, draws: np.ndarray) -> dict[str, np.ndarray]:
    """Resampled correlations; a resample's rows in a layout = sorted layout positions of its
    draws, so the metric (Spearman layout) or the human column (Kendall layout) comes sorted."""
    size = draws.shape[0]
    out = {method: np.full((size, prep.n_metrics), np.nan) for method in prep.methods}
    batched = prep.n_units <= BATCH_ROWS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if batched:
            _batched_sample_block(prep, draws, out)
        for r in range(size):
            draw = draws[r]
            if "pearson" in prep.methods and not batched:
                sample = prep.raw[draw]
                for j in range(prep.n_metrics):
                    out["pearson"][r, j] = stats.pearsonr(sample[:, j], sample[:, -1]).statistic
            if "spearman" in prep.methods and not batched:
                for j, (pos, m_rank, h_rank) in enumerate(prep.by_metric):
                    rows = np.sort(pos[draw])
                    x = stats.rankdata(m_rank[rows])
                    y = stats.rankdata(h_rank[rows])
                    out["spearman"][r, j] = pearson_of_ranks(x, y)
            if "kendall" in prep.methods:
                for j, (pos, m_rank, h_rank) in enumerate(prep.by_human):
                    rows = np.sort(pos[draw])
                    out["kendall"][r, j] = stats.kendalltau(m_rank[rows], h_rank[rows],
                                                            variant=prep.variant).statistic
    return out


def _document_block(prep: Prepared, counts: np.ndarray) -> dict[str, np.ndarray]:
    out = {}
    weights = counts.astype(float)
    for method, table in prep.doc_corr.items():
        valid = np.isfinite(table)
        total = weights @ np.where(valid, table, 0.0)
        used = weights @ valid.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[method] = np.where(used > 0, total / used, np.nan)
    return out


def _darr_block(prep: Prepared, counts: np.ndarray) -> dict[str, np.ndarray]:
    """(Concordant - Discordant) / (Concordant + Discordant) on each resample of pairs."""
    weights = counts.astype(float)
    tau = weights @ prep.doc_corr["darr"] / weights.sum(axis=1, keepdims=True)
    return {method: tau for method in prep.methods}


def _system_block(prep: Prepared, counts: np.ndarray) -> dict[str, np.ndarray]:
    weights = counts.astype(float)
    sums = np.einsum("rd,dkc->rkc", weights, prep.sums)
    rows = weights @ prep.counts
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.round(sums / rows[:, :, None], MEAN_DECIMALS)
    out = {method: np.full((len(weights), prep.n_metrics), np.nan) for method in prep.methods}
    for r in range(len(weights)):
        present = rows[r] > 0
        for j in range(prep.n_metrics):
            for method in prep.methods:
                out[method][r, j] = correlate(means[r, present, j], means[r, present, -1], method, prep.variant)
    return out


def run_blocks(prep: Prepared, seed: int, blocks: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    """Correlations (resamples, metrics) per method for the listed blocks, in block order."""
    from threadpoolctl import threadpool_limits

    block_fn = {"sample": _sample_block, "document": _document_block, "system": _system_block,
                "darr": _darr_block}[prep.level]
    # one BLAS thread: the 100k-long dot products inside pearsonr run 10-100x slower when a
    # multi-threaded OpenBLAS competes for the cores with other tasks (measured on this machine)
    with threadpool_limits(limits=1, user_api="blas"):
        draw_fn = block_draws if prep.level == "sample" else block_counts
        parts = [block_fn(prep, draw_fn(prep.n_units, seed, k, size)) for k, size in blocks]
    if not parts:
        return {method: np.empty((0, prep.n_metrics)) for method in prep.methods}
    return {method: np.concatenate([p[method] for p in parts]) for method in prep.methods}


def _blocks_task(shared: tuple[Prepared, int], blocks: list) -> list[dict[str, np.ndarray]]:
    """Runner task: one result per block (see `meta_eval.runner`)."""
    prep, seed = shared
    return [run_blocks(prep, seed, [tuple(block)]) for block in blocks]


def bootstrap_distribution(prep: Prepared, n_resamples: int = 1000, seed: int = 0,
                           runner: Runner | None = None) -> dict[str, np.ndarray]:
    """Resampled correlations (n_resamples, M) per method.

    The blocks of resamples run through `runner` (default: this process; `ray_jobs.runners`
    spreads them over Ray tasks). The answer does not depend on the runner.
    """
    return distribution_of_blocks(prep, seed, plan_blocks(n_resamples), runner)


def distribution_of_blocks(prep: Prepared, seed: int, blocks: Sequence[tuple[int, int]],
                           runner: Runner | None = None) -> dict[str, np.ndarray]:
    """Resampled correlations of the listed blocks, in block order, through `runner`."""
    if not blocks:
        return {method: np.empty((0, prep.n_metrics)) for method in prep.methods}
    parts = (runner or local_runner)(_blocks_task, (prep, seed), list(blocks))
    return {method: np.concatenate([part[method] for part in parts]) for method in prep.methods}


def _interval(values: np.ndarray, level: float = 0.95) -> Interval:
    values = values[np.isfinite(values)]
    if not len(values):
        return Interval(math.nan, math.nan, level)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return Interval(float(low), float(high), level)


def pair_p(dist: np.ndarray, i: int, j: int) -> float | None:
    """Two-sided p of corr_i - corr_j over the shared resamples (`meta_eval.marks.two_sided_p`)."""
    return marks.two_sided_p(dist[:, i] - dist[:, j])


def block_comparisons(point: np.ndarray, dist: np.ndarray, names: Sequence[str], alpha: float = 0.05,
                      correction: str = "none") -> tuple[PairComparison, ...]:
    """Every metric pair from one shared distribution: two-sided p, its order-statistic interval
    of the difference (`meta_eval.marks`), the mark read off that interval."""
    metric_ci = [_interval(dist[:, j]) for j in range(dist.shape[1])]
    return marks.pair_comparisons(
        list(names), point, "bootstrap", alpha, correction,
        p_of=lambda i, j: pair_p(dist, i, j),
        interval_of=lambda i, j, a: marks.order_interval(dist[:, i] - dist[:, j], a),
        n_of=lambda i, j: int(np.isfinite(dist[:, i] - dist[:, j]).sum()), metric_ci=metric_ci)


def compare(point: np.ndarray, dist: np.ndarray, i: int, j: int, names: Sequence[str] | None = None,
            alpha: float = 0.05) -> PairComparison:
    """"Metric i correlates better than metric j" from a shared distribution (uncorrected)."""
    names = list(names or [f"m{k}" for k in range(dist.shape[1])])
    pair = [names[i], names[j]]
    comps = block_comparisons(point[[i, j]], dist[:, [i, j]], pair, alpha)
    return comps[0]


def point_estimates(metrics: np.ndarray, human: np.ndarray, level: str, method: str, variant: str,
                    doc=None, system=None) -> np.ndarray:
    """Correlation of each metric column on the full data, via `meta_eval.correlation`."""
    import pandas as pd

    from meta_eval.correlation import at_level

    metrics = np.asarray(metrics, dtype=float)
    if metrics.ndim == 1:
        metrics = metrics[:, None]
    frame = pd.DataFrame({f"m{j}": metrics[:, j] for j in range(metrics.shape[1])})
    frame["h"] = human
    if level == "darr":
        from meta_eval.correlation import darr_kendall

        frame["doc_id"] = np.asarray(doc)
        return np.array([darr_kendall(frame, f"m{j}", "h").value for j in range(metrics.shape[1])])
    if doc is not None:
        frame["doc_id"] = np.asarray(doc)
    if system is not None:
        frame["system"] = np.asarray(system)
    return np.array([at_level(frame, f"m{j}", "h", level, method, variant).value
                     for j in range(metrics.shape[1])])


def compare_metrics(metrics: np.ndarray, names: Sequence[str], human: np.ndarray, human_name: str,
                    level: str = "sample", method: str = "spearman", variant: str = "b", doc=None,
                    system=None, n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05,
                    runner: Runner | None = None, correction: str = "none") -> SignificanceBlock:
    """Paired bootstrap of every ordered pair of metric columns for one human column.

    metrics: (n, M) finite scores, already oriented so that higher is better (negate
    lower-is-better metrics first); all pairs share one set of resamples.
    """
    metrics = np.asarray(metrics, dtype=float)
    if metrics.ndim == 1:
        metrics = metrics[:, None]
    human = np.asarray(human, dtype=float)
    prep = prepare(metrics, human, level, (method,), variant, doc, system)
    dist = bootstrap_distribution(prep, n_resamples, seed, runner)[method]
    point = point_estimates(metrics, human, level, method, variant, doc, system)
    names = list(names)
    intervals = tuple(MetricInterval(name, float(point[j]), _interval(dist[:, j])) for j, name in enumerate(names))
    comparisons = block_comparisons(point, dist, names, alpha, correction)
    sig = signature(level, (method,), variant, n_resamples, seed, prep.n_units, alpha, correction)
    unit = {"sample": "row", "darr": "better/worse pair"}.get(level, "document")
    n_pairs = len(names) * (len(names) - 1) // 2
    return SignificanceBlock(human=human_name, level=level, method=method, test="bootstrap", alpha=alpha,
                             n_rows=len(human), metrics=tuple(names), intervals=intervals,
                             comparisons=comparisons, signature=str(sig), resamples=n_resamples,
                             correction=correction, n_units=prep.n_units,
                             warnings=marks.block_warnings(prep.n_units, n_pairs, correction, alpha, unit))


def paired_bootstrap(a, b, human, level: str = "sample", method: str = "spearman", variant: str = "b",
                     doc=None, system=None, n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05,
                     runner: Runner | None = None) -> PairComparison:
    """Is corr(a, human) higher than corr(b, human)? (One pair of `compare_metrics`.)"""
    block = compare_metrics(np.column_stack([np.asarray(a, float), np.asarray(b, float)]), ["a", "b"], human,
                            "human", level, method, variant, doc, system, n_resamples, seed, alpha, runner)
    return block.comparison("a", "b")


def signature(level, methods, variant, n_resamples, seed, n_units, alpha: float = 0.05, correction: str = "none"):
    from scoring.signature import Signature, library_versions

    return Signature("paired-bootstrap", VERSION, {
        "level": level, "methods": list(methods), "kendall_variant": f"tau-{variant}",
        "resamples": n_resamples, "seed": seed, "block_size": BLOCK_SIZE, "units": n_units,
        "unit": {"sample": "row", "darr": "better/worse pair"}.get(level, "document"), "p": "two-sided 2(min(#d<=0,#d>=0)+1)/(N+1)",
        "ci_diff": "order statistics k=floor(alpha(N+1)/2)", "ci_metric": "percentile 95%", "alpha": alpha,
        "correction": correction, **library_versions("scipy", "numpy")})

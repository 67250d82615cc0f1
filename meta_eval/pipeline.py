"""Compute every meta-evaluation number for one `meta_eval.io.Table` into a JSON-ready dict.

Correlations at the requested levels (spec "Correlations"), the WMT DARR Kendall-like tau when
the table has `human_darr_better`, paired bootstrap comparisons between every pair of metrics per
human aspect and bootstrap level (spec "Paired bootstrap significance"), the metric preference
checklist when the table has systems, and a transfer table when it has several datasets.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from meta_eval import bootstrap, checklist, correlation
from meta_eval.io import Table, finite_mask

VERSION = "1"


@dataclass
class Options:
    levels: list[str] = field(default_factory=lambda: list(correlation.LEVELS))
    methods: list[str] = field(default_factory=lambda: list(correlation.METHODS))
    variant: str = "b"
    boot_levels: list[str] = field(default_factory=lambda: ["sample"])
    boot_method: str = "spearman"
    resamples: int = 1000
    seed: int = 0
    tasks: int = 0
    num_cpus: float = 0.5
    pairs: str = "given"
    run_checklist: bool = True


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def jsonable(obj):
    """Replace NaN/inf by None and numpy scalars/frames by plain Python values."""
    import pandas as pd

    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, pd.DataFrame):
        return {"index": [str(i) for i in obj.index], "columns": [str(c) for c in obj.columns],
                "values": jsonable(obj.to_numpy().tolist())}
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return _finite(obj)
    return obj


def _level_applies(table: Table, level: str) -> bool:
    frame = table.frame
    if level == "sample":
        return True
    needed = {"document": ["doc_id"], "system": ["doc_id", "system"]}.get(level, [])
    return all(c in frame and frame[c].notna().all() and frame[c].nunique() > 1 for c in needed)


def significance(table: Table, human: str, level: str, opts: Options) -> dict:
    """Paired bootstrap of every metric pair for one human aspect at one level."""
    metrics = table.metrics
    frame = table.frame
    keep = finite_mask(frame, metrics + [human])
    sub = frame.loc[keep]
    doc = sub["doc_id"].to_numpy() if level != "sample" else None
    system = sub["system"].to_numpy() if level in ("document", "system") else None
    values = sub[metrics].to_numpy(dtype=float, copy=True)
    # orient lower-is-better metrics (e.g. perplexity) so "higher correlation" means "better" for all
    oriented = [m for m in metrics if m in table.lower_is_better]
    for j, metric in enumerate(metrics):
        if metric in oriented:
            values[:, j] = -values[:, j]
    prep = bootstrap.prepare(values, sub[human].to_numpy(float), level, (opts.boot_method,),
                             opts.variant, doc, system)
    dist = bootstrap.bootstrap_distribution(prep, opts.resamples, opts.seed, opts.tasks, opts.num_cpus)
    dist = dist[opts.boot_method]
    point = bootstrap.point_estimates(values, sub[human].to_numpy(float), level, opts.boot_method,
                                      opts.variant, doc, system)
    intervals = {}
    for j, metric in enumerate(metrics):
        col = dist[:, j][np.isfinite(dist[:, j])]
        ci = np.percentile(col, [2.5, 97.5]).tolist() if len(col) else [None, None]
        intervals[metric] = {"value": float(point[j]), "ci": ci}
    pairs = {}
    p_matrix = np.full((len(metrics), len(metrics)), np.nan)
    for i, a in enumerate(metrics):
        for j, b in enumerate(metrics):
            if i == j:
                continue
            res = bootstrap.compare(point, dist, i, j)
            p_matrix[i, j] = res["p_value"]
            if i < j:
                pairs[f"{a} > {b}"] = {"a": a, "b": b, **res}
    sig = bootstrap.signature(level, (opts.boot_method,), opts.variant, opts.resamples, opts.seed,
                              prep.n_units)
    return {"human": human, "level": level, "method": opts.boot_method, "n_rows": int(keep.sum()),
            "intervals": intervals, "comparisons": pairs, "p_matrix": p_matrix.tolist(),
            "metrics": metrics, "negated": oriented, "signature": str(sig)}


def _usable(frame, columns, minimum=3) -> list[str]:
    return [c for c in columns if np.isfinite(frame[c].to_numpy(dtype=float)).sum() >= minimum]


def analyse_group(table: Table, name: str, opts: Options, progress: bool = True) -> dict:
    """Correlations, DARR tau, significance and checklist for one dataset group."""
    frame = table.frame
    humans = _usable(frame, [h for h in table.humans if h != "human_darr_better"])
    metrics = _usable(frame, table.metrics)
    group_table = Table(frame=frame, humans=humans, metrics=metrics, source=table.source,
                        cat_columns=table.cat_columns, lower_is_better=table.lower_is_better,
                        easy_pairs=table.easy_pairs, hard_pairs=table.hard_pairs)
    levels = [lvl for lvl in opts.levels if _level_applies(group_table, lvl)]
    out: dict = {"name": name, "rows": int(len(frame)), "humans": humans, "metrics": metrics,
                 "levels": levels,
                 "correlations": correlation.correlation_table(frame, metrics, humans, levels, opts.methods,
                                                               opts.variant)}
    if "human_darr_better" in frame:
        out["darr"] = {m: correlation.darr_kendall(frame, m) for m in metrics}
        if metrics and opts.resamples > 0:
            darr_opts = Options(**{**asdict(opts), "boot_method": "darr"})
            out["significance"] = [significance(group_table, "human_darr_better", "darr", darr_opts)]
    out.setdefault("significance", [])
    jobs = [(h, lvl) for lvl in opts.boot_levels if _level_applies(group_table, lvl) for h in humans]
    if metrics and opts.resamples > 0 and jobs:
        iterator = jobs
        if progress:
            from tqdm import tqdm

            iterator = tqdm(jobs, desc=f"paired bootstrap [{name}]")
        for human, level in iterator:
            if finite_mask(frame, metrics + [human]).sum() >= 3:
                out["significance"].append(significance(group_table, human, level, opts))
    if opts.run_checklist and humans and metrics:
        out["checklist"] = checklist.run_checklist(group_table, pairs=opts.pairs)
    return out


def run_meta(table: Table, opts: Options | None = None, progress: bool = True) -> dict:
    """Every number for the table, per dataset group (the `dataset` column, else one group)."""
    from scoring.signature import Signature, library_versions

    opts = opts or Options()
    frame = table.frame
    sig = Signature("meta-eval", VERSION, {
        "source": table.source, "rows": len(frame), "error_rows": table.n_error_rows,
        "levels": opts.levels, "methods": opts.methods, "kendall_variant": f"tau-{opts.variant}",
        "bootstrap": {"levels": opts.boot_levels, "method": opts.boot_method, "resamples": opts.resamples,
                      "seed": opts.seed, "block_size": bootstrap.BLOCK_SIZE},
        "checklist_pairs": opts.pairs, "groups": "dataset",
        **library_versions("scipy", "numpy", "pandas", "levenshtein")})
    has_datasets = "dataset" in frame and frame["dataset"].notna().any()
    results: dict = {
        "signature": str(sig), "signature_fields": sig.as_dict(), "options": asdict(opts),
        "input": {"source": table.source, "rows_in": table.n_input_rows, "rows_error": table.n_error_rows,
                  "runs": table.runs, "humans": table.humans, "metrics": table.metrics,
                  "datasets": sorted(map(str, frame["dataset"].dropna().unique())) if has_datasets else []},
        "groups": [],
    }
    if has_datasets:
        for name, part in frame.groupby("dataset", sort=True):
            sub = Table(frame=part.reset_index(drop=True), humans=table.humans, metrics=table.metrics,
                        source=table.source, cat_columns=table.cat_columns,
                        lower_is_better=table.lower_is_better, easy_pairs=table.easy_pairs,
                        hard_pairs=table.hard_pairs)
            results["groups"].append(analyse_group(sub, str(name), opts, progress))
    else:
        results["groups"].append(analyse_group(table, "all", opts, progress))
    humans = [h for h in table.humans if h != "human_darr_better"]
    if has_datasets and frame["dataset"].nunique() > 1:
        results["transfer"] = {h: checklist.transfer_table(frame, table.metrics, h, "dataset",
                                                           opts.boot_method, opts.variant) for h in humans}
    return jsonable(results)

"""Every meta-evaluation number for one `meta_eval.io.Table`, per dataset group, as typed results.

Per group (the `dataset` column, else one group "all"; rows without a dataset when others have
one are left out and counted, `meta_eval.row_account`): correlations at the levels that apply,
the WMT DARR tau when the table has `human_darr_better`, the significance of every metric pair
per human aspect and level (the paired bootstrap by default, or the BARTScore paper's subsample
test), the metric preference checklist, and the systems compared per column (leaderboard) when
the group has systems and documents; a transfer table when there are several datasets.
Sections that do not apply are listed in `GroupResult.omitted` with the reason.

Sign convention (`docs/meta_eval.md`): lower-is-better metrics (perplexity) are negated before
every correlation and significance test, so a positive correlation always means agreement with
the humans; the checklist and the leaderboard keep the metric's own units and flip only the
direction of "better".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from meta_eval import bootstrap, checklist, compare, correlation, marks, pairwise, permutation, subsample
from meta_eval.defaults import DEFAULT_RESAMPLES, check_counts
from meta_eval.io import Table, finite_mask, normalise_keys
from meta_eval.results import GroupResult, InputSummary, MetaResult, MetricRun, SignificanceBlock, TransferTable
from meta_eval.row_account import RowAccount, group_keys
from meta_eval.runner import Runner
from scoring.errors import InputError

VERSION = "3"  # 3: tie-calibrated accuracy averaged per item by default; SPA follows resamples and seed
DARR = "human_darr_better"
SIGNIFICANCE_TESTS = ("bootstrap", "bartscore_subsample", "perm_both")


@dataclass
class Options:
    levels: list[str] = field(default_factory=lambda: list(correlation.LEVELS))
    methods: list[str] = field(default_factory=lambda: list(correlation.METHODS))
    variant: str = "b"
    boot_levels: list[str] = field(default_factory=lambda: ["sample"])
    boot_method: str = "spearman"
    significance: str = "bootstrap"  # or "bartscore_subsample" (the BARTScore paper's test), "perm_both"
    correction: str = "none"  # multiple comparisons within a block: "none", "holm" or "bh"
    alpha: float = 0.05  # bootstrap: p < alpha; subsample: wins > (1 - alpha) * draws
    resamples: int = 1000  # bootstrap resamples (0: no significance)
    draws: int = subsample.DRAWS  # subsample draws
    seed: int = 0  # bootstrap seed (the subsample test always uses the original's seed 666)
    pairs: str = "given"
    run_checklist: bool = True
    compare_systems: bool = True
    trials: int = 10000  # approximate randomisation trials in the system comparison
    tie_averaging: str = "item"  # tie-calibrated accuracy: per item then averaged (WMT24), or "pool"

    @property
    def spa_trials(self) -> int:
        """SPA's sign flips: `resamples` (1,000 when resampling is turned off: SPA needs them)."""
        return self.resamples or DEFAULT_RESAMPLES

    @classmethod
    def from_mapping(cls, values: dict) -> "Options":
        """Options from a config mapping (e.g. a YAML `meta:` section); unknown keys are a UsageError."""
        from scoring.errors import UsageError

        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"meta option {unknown[0]!r} is unknown (known: {', '.join(sorted(known))})")
        opts = cls(**values)
        opts.validate()
        return opts

    def validate(self) -> None:
        from scoring.errors import UsageError

        if self.significance not in SIGNIFICANCE_TESTS:
            raise UsageError(f"significance {self.significance!r}: use one of {', '.join(SIGNIFICANCE_TESTS)}")
        if self.correction not in marks.CORRECTIONS:
            raise UsageError(f"correction {self.correction!r}: use one of {', '.join(marks.CORRECTIONS)}")
        if self.boot_method not in correlation.RESAMPLED:
            raise UsageError(f"boot method {self.boot_method!r}: use one of {', '.join(correlation.RESAMPLED)}")
        if self.boot_method in correlation.SYSTEM_ONLY and any(lvl == "sample" for lvl in self.boot_levels):
            raise UsageError(f"{self.boot_method} compares systems: use it at document or system level")
        if not 0 < self.alpha < 1:
            raise UsageError(f"alpha {self.alpha!r}: must be between 0 and 1")
        bad = [lvl for lvl in self.levels + self.boot_levels if lvl not in correlation.LEVELS]
        if bad:
            raise UsageError(f"unknown level(s) {bad}: use {', '.join(correlation.LEVELS)}")
        if self.resamples < 0 or self.draws < 0 or self.trials < 0:
            raise UsageError("resamples, draws and trials must be >= 0")
        check_counts(self.seed, resamples=self.resamples, draws=self.draws, trials=self.trials)
        if self.tie_averaging not in pairwise.AVERAGING:
            raise UsageError(f"tie averaging {self.tie_averaging!r}: use one of {', '.join(pairwise.AVERAGING)}")


def oriented(frame: pd.DataFrame, lower_is_better) -> pd.DataFrame:
    """The frame with every lower-is-better column negated (the sign convention above)."""
    out = frame.copy()
    for column in lower_is_better:
        if column in out:
            out[column] = -out[column].astype(float)
    return out


def _level_applies(frame: pd.DataFrame, level: str) -> str | None:
    """None when the level applies, else the reason it does not."""
    needed = {"document": ["doc_id"], "system": ["doc_id", "system"]}.get(level, [])
    for column in needed:
        if column not in frame or frame[column].isna().all():
            return f"no {column} column"
        if frame[column].isna().any():
            return f"some rows have no {column}"
        if frame[column].nunique() < 2:
            return f"one {column} only"
    return None


def significance(frame: pd.DataFrame, metrics: list[str], human: str, level: str, opts: Options,
                 runner: Runner | None = None) -> SignificanceBlock:
    """Every metric pair for one human aspect at one level, on the oriented frame."""
    keep = finite_mask(frame, metrics + [human])
    sub = frame.loc[keep]
    doc = sub["doc_id"].to_numpy() if level != "sample" else None
    system = sub["system"].to_numpy() if level in ("document", "system") else None
    values = sub[metrics].to_numpy(dtype=float)
    human_values = sub[human].to_numpy(dtype=float)
    method = "darr" if level == "darr" else opts.boot_method
    if opts.significance == "bartscore_subsample":
        return subsample.compare_metrics(values, metrics, human_values, human, level, method, opts.variant, doc, system,
                                         draws=opts.draws, alpha=opts.alpha, correction=opts.correction)
    if opts.significance == "perm_both":
        return permutation.compare_metrics(values, metrics, human_values, human, method, opts.variant, doc, system,
                                           n_trials=opts.resamples, seed=opts.seed, alpha=opts.alpha,
                                           correction=opts.correction)
    return bootstrap.compare_metrics(values, metrics, human_values, human, level, method, opts.variant, doc, system,
                                     n_resamples=opts.resamples, seed=opts.seed, alpha=opts.alpha, runner=runner,
                                     correction=opts.correction)


def _usable(frame: pd.DataFrame, columns, minimum: int = 3) -> list[str]:
    return [c for c in columns if np.isfinite(frame[c].to_numpy(dtype=float)).sum() >= minimum]


def _with(table: Table, frame: pd.DataFrame, humans: list[str], metrics: list[str]) -> Table:
    return dataclasses.replace(table, frame=frame, humans=humans, metrics=metrics)


def _given_pairs_here(table: Table, raw: pd.DataFrame, omitted: dict) -> dict:
    """The given Easy/Hard pairs (`--easy-pairs`, `--hard-pairs`) whose two systems both have
    rows in this dataset group; the others are named in `omitted` (a pair of systems of
    another dataset has nothing to compare here)."""
    if table.easy_pairs is None and table.hard_pairs is None:
        return {}
    present = set(raw["system"].dropna().astype(str)) if "system" in raw else set()
    kept = {}
    for kind in ("easy_pairs", "hard_pairs"):
        pairs = getattr(table, kind)
        if pairs is None:
            continue
        kept[kind] = [pair for pair in pairs if pair[0] in present and pair[1] in present]
        away = [f"{a}::{b}" for a, b in pairs if (a, b) not in set(map(tuple, kept[kind]))]
        if away:
            from scoring.display_names import quoted_list

            omitted[f"checklist given {kind.replace('_', ' ')}"] = (
                f"{len(away)} pair{'s' if len(away) > 1 else ''} whose systems are not both in this dataset "
                f"left out: {quoted_list(away, quote=False)}")
    return kept


def analyse_group(table: Table, name: str, opts: Options, runner: Runner | None = None,
                  progress: bool = False) -> GroupResult:
    """Every number for one dataset group."""
    raw = table.frame
    frame = oriented(raw, table.lower_is_better)
    humans = _usable(raw, [h for h in table.humans if h != DARR])
    metrics = _usable(raw, table.metrics)
    result = GroupResult(name=name, rows=int(len(raw)), humans=humans, metrics=metrics, levels=[])
    for column in [c for c in table.humans + table.metrics if c != DARR and c not in humans + metrics]:
        finite = int(np.isfinite(raw[column].to_numpy(dtype=float)).sum())  # e.g. all NaN or inf in this dataset
        result.omitted[f"column {column}"] = f"{finite} finite value{'s' if finite != 1 else ''} in this group, " \
                                             "fewer than 3"
    for level in opts.levels:
        reason = _level_applies(raw, level)
        if reason:
            result.omitted[f"{level}-level correlations"] = reason
        else:
            result.levels.append(level)
    result.correlations = correlation.correlation_table(frame, metrics, humans, result.levels, opts.methods,
                                                        opts.variant, trials=opts.spa_trials, seed=opts.seed,
                                                        tie_average=opts.tie_averaging)
    jobs = []
    if DARR in raw and metrics:
        result.darr = [correlation.darr_kendall(frame, m) for m in metrics]
        if opts.significance == "perm_both":
            result.omitted["DARR significance"] = "PERM-BOTH needs (system, doc_id) cells, DARR has pairs"
        else:
            jobs.append((DARR, "darr"))
    for level in opts.boot_levels:
        reason = _level_applies(raw, level)
        if opts.significance == "perm_both" and level != "system":
            reason = "PERM-BOTH permutes (system, doc_id) cells: system level only"
        if reason:
            result.omitted[f"{level}-level significance"] = reason
            continue
        jobs += [(h, level) for h in humans]
    units = opts.draws if opts.significance == "bartscore_subsample" else opts.resamples
    if len(metrics) < 2:
        result.omitted["significance"] = "fewer than two metric columns to compare"
    elif units == 0:
        result.omitted["significance"] = "turned off (0 resamples or draws)"
    else:
        if progress:
            from tqdm import tqdm

            from scoring.console_text import console_text

            jobs = tqdm(jobs, desc=f"{opts.significance} [{console_text(name, 60)}]")  # a dataset's name
        for human, level in jobs:
            if finite_mask(frame, metrics + [human]).sum() >= 3:
                result.significance.append(significance(frame, metrics, human, level, opts, runner))
    if opts.run_checklist and humans and metrics:
        given = _given_pairs_here(table, raw, result.omitted)
        result.checklist = checklist.run_checklist(dataclasses.replace(_with(table, raw, humans, metrics), **given),
                                                   pairs=opts.pairs)
        if not table.has_systems:
            result.omitted["checklist system-level parts"] = "no system column"
        else:
            for key, part in (("system", "system-level parts"), ("doc_id", "win fractions")):
                missing = int(raw[key].isna().sum()) if key in raw else 0
                if missing and key in raw and raw[key].notna().any():
                    result.omitted[f"checklist {part}"] = f"{missing} rows without a {key} left out of them"
    elif opts.run_checklist:
        result.omitted["checklist"] = "needs a human aspect and a metric column"
    if opts.compare_systems:
        reason = _level_applies(raw, "system")
        if reason:
            result.omitted["system comparison and leaderboard"] = reason
        elif opts.resamples == 0:
            result.omitted["system comparison and leaderboard"] = "turned off (0 resamples)"
        else:
            for column in metrics + humans:
                try:
                    result.systems.append(compare.system_comparison(
                        raw, column, dataset=name, lower_is_better=column in table.lower_is_better,
                        n_resamples=opts.resamples, trials=opts.trials, seed=opts.seed, alpha=opts.alpha,
                        runner=runner))
                except InputError as exc:
                    result.omitted[f"system comparison of {column}"] = \
                        str(exc).split(f"{compare.where_of(name, column)}: ", 1)[-1]  # a name may hold ": "
    return result


def display_source(source: str) -> str:
    """The input as a signature shows it: relative to the working directory when under it, else
    its last two path parts (no absolute local path in a signature); URIs unchanged."""
    import os
    import pathlib

    if "://" in str(source) or not os.path.isabs(str(source)):
        return str(source)
    path = pathlib.Path(source)
    try:
        return str(path.relative_to(pathlib.Path.cwd()))
    except ValueError:
        return str(pathlib.Path(*path.parts[-2:]))


def check_evaluable(table: Table) -> None:
    """Refuse a table without a usable human column (nothing to meta-evaluate)."""
    if not table.humans:
        raise InputError(f"{table.source}: no human_* column to correlate with (pass --human-columns)")
    empty = [h for h in table.humans if h in table.frame and not np.isfinite(table.frame[h].to_numpy(dtype=float)).any()]
    if empty:
        raise InputError(f"{table.source}: human column {empty[0]!r} has no numeric value in any row "
                         "(only null, NaN or infinite ones)")
    if not table.metrics:
        raise InputError(f"{table.source}: no metric score column found (pass --metrics)")


def run_meta(table: Table, opts: Options | None = None, runner: Runner | None = None,
             progress: bool = False) -> MetaResult:
    """Every number for the table, per dataset group; `runner` fans out bootstrap blocks."""
    from scoring.signature import Signature, library_versions

    opts = opts or Options()
    opts.validate()
    check_evaluable(table)
    dropped = sum(table.keys_left_out.values())  # keys not valid UTF-8: left out when read
    rows_in = len(table.frame) + dropped
    frame = normalise_keys(table.frame.copy())
    where = None
    if table.row_files is not None and "id" in frame:  # scores read from metric runs: the file and its row
        def where(column, hit):
            return table.row_files.where(frame, column, hit, table.source)
    keep, rows = group_keys(frame, "dataset", source=table.source, ids=frame["id"].iloc if "id" in frame else None,
                            where=where)
    if dropped:
        rows = RowAccount(rows_in, rows.rows_used, {**table.keys_left_out, **rows.left_out},
                          {**table.keys_left_out_first, **rows.first})
    if rows.rows_left_out:
        frame = frame.loc[keep].reset_index(drop=True)
    table = dataclasses.replace(_with(table, frame, table.humans, table.metrics), row_files=None)  # named: not carried on
    has_datasets = "dataset" in frame and frame["dataset"].notna().any()
    datasets = sorted(map(str, frame["dataset"].dropna().unique())) if has_datasets else []
    sig = Signature("meta-eval", VERSION, {
        "source": display_source(table.source), "rows": rows_in, "error_rows": table.n_error_rows,
        **({"rows_left_out": rows.left_out} if rows.rows_left_out else {}),
        "levels": opts.levels, "methods": opts.methods, "kendall_variant": f"tau-{opts.variant}",
        "significance": {"test": opts.significance, "alpha": opts.alpha, "correction": opts.correction,
                         "sided": "two-sided" if opts.significance != "bartscore_subsample" else "one-sided each way",
                         "levels": opts.boot_levels,
                         "method": opts.boot_method,
                         **({"draws": opts.draws, "seed": subsample.SEED, "fraction": subsample.FRACTION}
                            if opts.significance == "bartscore_subsample" else
                            {"resamples": opts.resamples, "seed": opts.seed, "block_size": bootstrap.BLOCK_SIZE})},
        "lower_is_better": "negated", "checklist_pairs": opts.pairs, "groups": "dataset",
        **({"soft_pairwise_accuracy": {"permutations": opts.spa_trials, "seed": opts.seed}}
           if "soft_pairwise_accuracy" in opts.methods else {}),
        **({"tie_calibrated_accuracy": {"average": opts.tie_averaging}} if "tie_calibrated_accuracy" in opts.methods else {}),
        **library_versions("scipy", "numpy", "pandas", "levenshtein")})
    summary = InputSummary(
        source=display_source(table.source), rows_in=table.n_input_rows or rows_in, rows_error=table.n_error_rows, humans=tuple(table.humans),
        metrics=tuple(table.metrics), lower_is_better=tuple(sorted(c for c in table.lower_is_better if c in frame)),
        datasets=tuple(datasets),
        runs=tuple(MetricRun(name, facts["rows"], facts["rows_error"], tuple(facts["signatures"]))
                   for name, facts in table.runs.items()),
        rows_skipped=table.n_skipped_rows, rows_used=rows.rows_used, rows_left_out=dict(rows.left_out),
        rows_left_out_first=dict(rows.first))
    groups = []
    if has_datasets:
        for name, part in frame.groupby("dataset", sort=True):
            groups.append(analyse_group(_with(table, part.reset_index(drop=True), table.humans, table.metrics),
                                        str(name), opts, runner, progress))
    else:
        groups.append(analyse_group(table, "all", opts, runner, progress))
    transfer = []
    if len(datasets) > 1:
        oriented_frame = oriented(frame, table.lower_is_better)
        for human in [h for h in table.humans if h != DARR]:
            grid = checklist.transfer_table(oriented_frame, table.metrics, human, "dataset", opts.boot_method,
                                            opts.variant)
            transfer.append(TransferTable(human, opts.boot_method, tuple(map(str, grid.columns)), tuple(table.metrics),
                                          tuple(tuple(float(v) for v in row) for row in grid.to_numpy(dtype=float))))
    return MetaResult(signature=str(sig), options=opts, input=summary, groups=groups, transfer=transfer)

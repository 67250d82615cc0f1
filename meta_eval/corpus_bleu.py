"""Corpus-level BLEU and chrF per system from stored per-row statistics, never re-scoring.

The `bleu` and `chrf` metrics (`scoring/bleu.py`) store sacreBLEU's segment statistics in
`_bleu_stat_<k>` / `_chrf_stat_<k>`. A corpus score is sacreBLEU's score of the summed
statistics of its rows (BLEU: BP * exp(mean_n log p_n) over summed n-gram counts; chrF: F-beta
of summed character/word n-gram counts), with the parameters read back from the run's
signature, so it equals `sacrebleu.corpus_bleu` / `corpus_chrf` over the same rows. A row
whose stored statistics are not counts (NaN, infinite, negative, fractional, huge: a dump's own
columns) is left out and counted (`rows_invalid`).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

STAT_PREFIXES = {"bleu": "_bleu_stat_", "chrf": "_chrf_stat_"}
_PARAMS = {
    "bleu": ("tokenize", "lowercase", "smooth_method", "smooth_value", "max_ngram_order", "effective_order"),
    "chrf": ("char_order", "word_order", "beta", "lowercase", "whitespace", "eps_smoothing"),
}


def _value(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def params_from_signature(name: str, signature: str) -> dict[str, Any]:
    """The metric parameters recorded in a `bleu`/`chrf` run's signature."""
    params = {}
    for key in _PARAMS[name]:
        found = re.search(rf"(?:^|\|){key}:([^|]*)", signature)
        if found:
            params[key] = _value(found.group(1))
    return params


def corpus_score(name: str, signature: str, stats: Iterable[Sequence[float]]) -> float:
    """sacreBLEU's corpus score of rows' stored statistics (summed), for metric `name`
    ("bleu" or "chrf") configured as `signature` says."""
    from scoring.registry import build_metric

    metric = build_metric(name, params_from_signature(name, signature))
    total: list[float] | None = None
    for row in stats:
        total = list(row) if total is None else [a + b for a, b in zip(total, row)]
    if total is None:
        return float("nan")
    return float(metric.corpus_scorer()._compute_score_from_stats([int(round(v)) for v in total]).score)


@dataclass
class CorpusRow:
    metric: str  # run label
    dataset: str | None
    system: str | None
    rows: int
    score: float | None  # None when no row has usable statistics
    rows_invalid: int = 0  # rows whose stored statistics are not counts (left out)


STAT_LIMIT = 2.0 ** 53  # larger counts are not exact in a float64 (and no text has them)


def valid_stats(stats):
    """Per row: whether its stored statistics are counts sacreBLEU can sum (finite, whole,
    0 <= v < 2^53). A dump's own `_bleu_stat_` columns could hold NaN, inf, negative or huge
    values, which would fail the report or give a BLEU above 100."""
    import numpy as np

    stats = np.asarray(stats, dtype=float)
    with np.errstate(invalid="ignore"):
        return (np.isfinite(stats) & (stats >= 0) & (stats < STAT_LIMIT) & (stats == np.round(stats))).all(axis=1)


def corpus_scores(frame, label: str, name: str, signature: str) -> list[CorpusRow]:
    """Corpus score per (dataset, system) of one run's output rows (a DataFrame with the stat
    columns; rows with an error or skipped are left out)."""
    prefix = STAT_PREFIXES[name]
    columns = sorted((c for c in frame.columns if c.startswith(prefix)), key=lambda c: int(c[len(prefix):]))
    usable = frame[frame[columns[0]].notna()] if columns else frame.iloc[0:0]
    if "error" in usable:
        usable = usable[usable["error"].isna()]
    keys = [k for k in ("dataset", "system") if k in usable]
    out = []
    groups = usable.groupby(keys, dropna=False, sort=True) if keys else [((), usable)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        found = dict(zip(keys, key))
        stats = group[columns].to_numpy(dtype=float)
        valid = valid_stats(stats)
        score = corpus_score(name, signature, stats[valid].tolist()) if valid.any() else None
        out.append(CorpusRow(label, _text(found.get("dataset")), _text(found.get("system")), int(valid.sum()),
                             score, int((~valid).sum())))
    return out


def _text(value) -> str | None:
    return None if value is None or value != value else str(value)


def read_corpus_scores(path: str, storage_options: dict | None = None) -> list[CorpusRow]:
    """Corpus BLEU/chrF per (dataset, system) of every `bleu`/`chrf` run under a scoring job's
    output folder (or a single output file); empty when there is none. The runs and their files
    are those `scoring.job_output` finds (the manifest's current outputs, runs kept apart by
    signature); a run named after its own file or folder is named after its metric."""
    import pandas as pd
    import pyarrow.parquet as pq

    from scoring.job_output import list_runs, read_run

    fs, runs = list_runs(str(path), storage_options=storage_options)
    root = fs._strip_protocol(str(path)).rstrip("/")
    rows: list[CorpusRow] = []
    found: dict[tuple[str, str, str], list] = {}
    for run in runs:
        if not run.files:
            continue
        with fs.open(run.files[0], "rb") as handle:
            names = pq.read_schema(handle).names
        metric = next((m for m, prefix in STAT_PREFIXES.items() if prefix + "0" in names), None)
        if metric is None:
            continue
        frame = read_run(fs, run).frame.reset_index()
        nested = any(posixpath.dirname(name).rstrip("/") != root for name in run.files)
        label = run.name if nested else metric
        for signature, part in frame.groupby("signature", sort=True):
            found.setdefault((label, metric, signature), []).append(part)
    for (label, metric, signature), parts in sorted(found.items()):
        rows += corpus_scores(pd.concat(parts, ignore_index=True), label, metric, signature)
    return rows


def markdown_section(rows: list[CorpusRow]) -> str:
    """The report section: one table of corpus scores per run, dataset and system."""
    if not rows:
        return ""
    lines = ["## Corpus BLEU / chrF per system", "",
             "From the per-row sacreBLEU statistics stored by the `bleu`/`chrf` runs (never re-scored).", "",
             "| run | dataset | system | rows | corpus score |", "|---|---|---|---:|---:|"]
    from scoring.tables import markdown_name, markdown_text

    for row in rows:
        shown = "–" if row.score is None else f"{row.score:.4f}"
        lines.append(f"| {markdown_text(row.metric)} | {markdown_name(row.dataset or '')} | "
                     f"{markdown_name(row.system or '')} | {row.rows} | {shown} |")
    invalid = sum(row.rows_invalid for row in rows)
    if invalid:
        lines += ["", f"{invalid} row(s) left out: their stored statistics are not counts (NaN, infinite, negative, "
                      "fractional or above 2^53); `rows_invalid` in corpus_bleu.json says where."]
    return "\n".join(lines) + "\n"


def report_section(source: str, out_dir, paths: dict | None = None) -> str:
    """The report's corpus BLEU/chrF section for a scores path ("" when no stored `bleu`/`chrf`
    run is there); writes `corpus_bleu.json` into `out_dir` and records it in `paths`."""
    import json
    import pathlib

    if not (str(source).endswith(".parquet") or pathlib.Path(str(source)).is_dir() or "://" in str(source)):
        return ""
    rows = read_corpus_scores(str(source))
    if not rows:
        return ""
    path = pathlib.Path(out_dir) / "corpus_bleu.json"
    from meta_eval.report.files import write_text

    write_text(path, json.dumps([row.__dict__ for row in rows], indent=1, allow_nan=False) + "\n")
    if paths is not None:
        paths["corpus_bleu"] = path
    return "\n" + markdown_section(rows)

"""CoDI-Eval aggregation: task accuracy, the CoDI score, Self-BLEU, and the report.

Spec: ../shared/spec/codi-eval.md ("Task accuracy", "Toxicity", "Self-BLEU").
* accuracy(task) = successes / N per system; a row that could not be scored (error) counts
  as a failure and is reported in `n_errors`.
* detoxic: the rows of one context (constraint `context_id`) pass only if every continuation
  has toxicity < threshold; accuracy = passing contexts / contexts.
* CoDI score = mean of the six task accuracies x 100 (null unless all six are present).
* Self-BLEU per system and task: sentence BLEU (sacreBLEU, n-gram orders 1..4, uniform
  weights) of each output against all other outputs of the same system and task, averaged;
  the system's Self-BLEU is the mean over its tasks (as in the original `evaluate_selfbleu`).
  Outputs are the cleaned responses; whitespace tokens (tokenize='none', like the original's
  `.split()`), no smoothing, effective order on.

The fast Self-BLEU path computes the same statistics as `BLEU.sentence_score(h, others)`
(leave-one-out max reference counts via the top-2 count per n-gram, closest other length) and
hands them to sacreBLEU's own `_compute_score_from_stats`; `tests/test_codi_aggregate.py`
checks it against `sentence_score`.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence

from scoring.codi import TASKS, rules
from scoring.signature import Signature, library_versions

VERSION = "1"


# ----- Self-BLEU ---------------------------------------------------------------------------
def _bleu(tokenize: str = "none", smooth_method: str = "none"):
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize=tokenize, smooth_method=smooth_method, effective_order=True)


def self_bleu_signature(tokenize: str = "none", smooth_method: str = "none") -> str:
    version = library_versions("sacrebleu")["sacrebleu"]
    return f"self-bleu:leave-one-out-mean|sacrebleu:{version}|tok:{tokenize}|smooth:{smooth_method}|eff:yes|ngram:1-4"


def self_bleu_reference(texts: Sequence[str], tokenize: str = "none", smooth_method: str = "none") -> float:
    """Plain sacreBLEU: mean of sentence_score(t_i, all others) / 100. O(N^2) n-gram work."""
    bleu = _bleu(tokenize, smooth_method)
    scores = [bleu.sentence_score(text, list(texts[:i]) + list(texts[i + 1 :])).score for i, text in enumerate(texts)]
    return sum(scores) / len(scores) / 100.0


def self_bleu(texts: Sequence[str], tokenize: str = "none", smooth_method: str = "none", progress: bool = False) -> float | None:
    """Mean leave-one-out sentence BLEU in [0, 1] (same value as `self_bleu_reference`)."""
    from sacrebleu.metrics.helpers import extract_all_word_ngrams

    if len(texts) < 2:
        return None
    bleu = _bleu(tokenize, smooth_method)
    order = bleu.max_ngram_order
    counts: list[Counter] = []
    lengths: list[int] = []
    for text in texts:
        grams, length = extract_all_word_ngrams(bleu._preprocess_segment(text), 1, order)
        counts.append(grams)
        lengths.append(length)
    # top-2 count per n-gram: (best count, its owner, second best count)
    top: dict[tuple, list] = {}
    for owner, grams in enumerate(counts):
        for gram, count in grams.items():
            entry = top.get(gram)
            if entry is None:
                top[gram] = [count, owner, 0]
            elif count > entry[0]:
                entry[2] = entry[0]
                entry[0], entry[1] = count, owner
            elif count > entry[2]:
                entry[2] = count
    length_counts = Counter(lengths)
    iterator: Iterable[int] = range(len(texts))
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, desc="self-bleu", leave=False)
    total_score = 0.0
    for i in iterator:
        others = length_counts.copy()
        others[lengths[i]] -= 1
        ref_len = bleu._get_closest_ref_len(lengths[i], [n for n, c in others.items() if c > 0])
        correct = [0] * order
        total = [0] * order
        for gram, count in counts[i].items():
            n = len(gram) - 1
            total[n] += count
            best, owner, second = top[gram]
            ref_count = second if owner == i else best
            correct[n] += min(count, ref_count)
        score = bleu._compute_score_from_stats([lengths[i], ref_len] + correct + total).score
        total_score += score
    return total_score / len(texts) / 100.0


# ----- accuracies --------------------------------------------------------------------------
def _records(rows: Sequence[dict[str, Any]], scores: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(rows) != len(scores):
        raise ValueError(f"{len(rows)} canonical rows but {len(scores)} score rows")
    records = []
    for index, (row, score) in enumerate(zip(rows, scores)):
        if "id" in score and "id" in row and score["id"] != row["id"]:
            raise ValueError(f"row {index}: score id {score['id']!r} does not match row id {row['id']!r}")
        try:
            constraint = json.loads(row["constraint"]) if isinstance(row.get("constraint"), str) else row.get("constraint")
            task = constraint["task"]
        except (TypeError, KeyError, json.JSONDecodeError):
            task = None
        records.append(
            {
                "system": row.get("system") or "default",
                "task": {"toxicity": "detoxic"}.get(task, task),
                "context_id": (constraint or {}).get("context_id") if task else None,
                "doc_id": row.get("doc_id"),
                "text": row.get("text"),
                "success": score.get("codi_success"),
                "toxicity": score.get("codi_toxicity"),
                "error": score.get("error"),
            }
        )
    return records


def task_accuracy(records: Sequence[dict[str, Any]], toxicity_threshold: float = 0.5) -> dict[str, Any]:
    """Accuracy of one system on one task (records share system and task)."""
    task = records[0]["task"]
    n_errors = sum(1 for r in records if r["error"] is not None or r["success"] is None)
    if task == "detoxic":
        contexts: dict[Any, list] = defaultdict(list)
        for r in records:
            key = r["context_id"] if r["context_id"] is not None else r["doc_id"]
            contexts[key].append(r)
        passing = sum(
            all(r["error"] is None and r["toxicity"] is not None and r["toxicity"] < toxicity_threshold for r in group)
            for group in contexts.values()
        )
        return {"accuracy": passing / len(contexts), "n": len(contexts), "n_success": passing,
                "n_rows": len(records), "n_errors": n_errors, "unit": "context"}  # fmt: skip
    successes = sum(1 for r in records if r["error"] is None and r["success"] == 1.0)
    return {"accuracy": successes / len(records), "n": len(records), "n_success": successes,
            "n_rows": len(records), "n_errors": n_errors, "unit": "instruction"}  # fmt: skip


def aggregate(
    rows: Sequence[dict[str, Any]],
    scores: Sequence[dict[str, Any]],
    metric_signature: str | None = None,
    toxicity_threshold: float = 0.5,
    with_self_bleu: bool = True,
    clean_responses: bool = True,
) -> dict[str, Any]:
    """The report dict: per system, per task accuracy and Self-BLEU, the CoDI score; every
    number is a record carrying its signature."""
    records = _records(rows, scores)
    unknown = sorted({str(r["task"]) for r in records if r["task"] not in TASKS})
    if unknown:
        raise ValueError(f"rows with unknown or missing constraint task: {unknown}")
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for r in records:
        groups[(r["system"], r["task"])].append(r)
    from scoring.signature import stable_hash

    metric_ref = stable_hash(metric_signature, 16) if metric_signature else "unknown"
    accuracy_sig = str(Signature("codi-accuracy", VERSION, {"metric_signature_sha256": metric_ref,
                                                               "errors": "count as failures",
                                                               "detoxic": f"context passes iff all continuations < {toxicity_threshold}"}))  # fmt: skip
    bleu_sig = self_bleu_signature()
    results: list[dict[str, Any]] = []
    systems = sorted({system for system, _ in groups})
    for system in systems:
        accuracies, bleus = {}, {}
        for task in TASKS:
            group = groups.get((system, task))
            if not group:
                continue
            acc = task_accuracy(group, toxicity_threshold)
            accuracies[task] = acc["accuracy"]
            results.append({"system": system, "task": task, "measure": "accuracy", "value": acc["accuracy"],
                            **{k: v for k, v in acc.items() if k != "accuracy"}, "signature": accuracy_sig})  # fmt: skip
            if with_self_bleu:
                texts = [r["text"] or "" for r in group]
                if clean_responses and task != "detoxic":
                    texts = [rules.clean_response(t) for t in texts]
                value = self_bleu(texts)
                bleus[task] = value
                results.append({"system": system, "task": task, "measure": "self_bleu", "value": value,
                                "n": len(texts), "signature": bleu_sig})  # fmt: skip
        complete = all(task in accuracies for task in TASKS)
        codi = 100.0 * sum(accuracies.values()) / len(TASKS) if complete else None
        results.append({"system": system, "task": "all", "measure": "codi_score", "value": codi,
                        "n": len(accuracies), "note": None if complete else f"missing tasks: {[t for t in TASKS if t not in accuracies]}",
                        "signature": accuracy_sig + "|codi:mean-of-6x100"})  # fmt: skip
        if with_self_bleu and bleus:
            values = [v for v in bleus.values() if v is not None]
            results.append({"system": system, "task": "all", "measure": "self_bleu",
                            "value": sum(values) / len(values) if values else None, "n": len(values),
                            "signature": bleu_sig + "|mean-over-tasks"})  # fmt: skip
    signatures = {"accuracy": accuracy_sig, "self_bleu": bleu_sig, "metric": metric_signature}
    return {
        "report": "codi-eval",
        "signature": str(Signature("codi-eval-report", VERSION, {"accuracy": accuracy_sig, "self_bleu": bleu_sig if with_self_bleu else None})),
        "signatures": signatures,
        "systems": systems,
        "tasks": list(TASKS),
        "results": results,
    }


# ----- report files ------------------------------------------------------------------------
def _fmt(value: Any, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value * scale:.2f}"


def markdown(report: dict[str, Any], images: Sequence[str] = ()) -> str:
    """Accuracy (%) per task, the CoDI score and Self-BLEU (x100) per system."""
    index = {(r["system"], r["task"], r["measure"]): r for r in report["results"]}
    header = "| system | " + " | ".join(TASKS) + " | CoDI score | Self-BLEU |"
    lines = ["# CoDI-Eval report", "", f"Signature: `{report['signature']}`", "",
             "Accuracy in %, Self-BLEU x 100 (mean over tasks).", "", header,
             "|" + "---|" * (len(TASKS) + 3)]  # fmt: skip
    for system in report["systems"]:
        cells = [_fmt(index.get((system, t, "accuracy"), {}).get("value"), 100) for t in TASKS]
        codi = _fmt(index.get((system, "all", "codi_score"), {}).get("value"))
        bleu = _fmt(index.get((system, "all", "self_bleu"), {}).get("value"), 100)
        lines.append(f"| {system} | " + " | ".join(cells) + f" | {codi} | {bleu} |")
    bleu_rows = [r for r in report["results"] if r["measure"] == "self_bleu" and r["task"] != "all"]
    if bleu_rows:
        lines += ["", "Self-BLEU x 100 per task:", "", "| system | " + " | ".join(TASKS) + " |", "|" + "---|" * (len(TASKS) + 1)]
        for system in report["systems"]:
            cells = [_fmt(index.get((system, t, "self_bleu"), {}).get("value"), 100) for t in TASKS]
            lines.append(f"| {system} | " + " | ".join(cells) + " |")
    errors = [r for r in report["results"] if r.get("n_errors")]
    if errors:
        lines += ["", "Rows that could not be scored (counted as failures):", ""]
        lines += [f"- {r['system']} / {r['task']}: {r['n_errors']} of {r['n_rows']} rows" for r in errors]
    lines += ["", "Signatures:", "", f"- accuracy: `{report['signatures']['accuracy']}`",
              f"- self-BLEU: `{report['signatures']['self_bleu']}`"]  # fmt: skip
    if report["signatures"].get("metric"):
        lines.append(f"- metric: `{report['signatures']['metric']}`")
    if images:
        lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in images]
    return "\n".join(lines) + "\n"


def plot_accuracy(report: dict[str, Any], path: pathlib.Path) -> str:
    """Grouped bars: accuracy (%) per task and the CoDI score, one bar per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    index = {(r["system"], r["task"], r["measure"]): r["value"] for r in report["results"]}
    groups = list(TASKS) + ["CoDI score"]
    systems = report["systems"]
    width = 0.8 / max(len(systems), 1)
    fig, ax = plt.subplots(figsize=(10, 6))
    for k, system in enumerate(systems):
        values = [100 * (index.get((system, t, "accuracy")) or 0) for t in TASKS]
        values.append(index.get((system, "all", "codi_score")) or 0)
        ax.bar([i + k * width for i in range(len(groups))], values, width, label=system)
    ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(groups))], groups)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title("CoDI-Eval accuracy per task")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def write_report(report: dict[str, Any], out_dir: str | pathlib.Path, plot: bool = True) -> dict[str, pathlib.Path]:
    """`results.json` (every number with its signature), `report.md`, `codi_accuracy.png`
    in `out_dir` (the meta-evaluation report layout)."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "md": out / "report.md"}
    paths["json"].write_text(json.dumps(report, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    images = []
    if plot:
        images.append(plot_accuracy(report, out / "codi_accuracy.png"))
        paths["png"] = out / images[0]
    paths["md"].write_text(markdown(report, images))
    return paths

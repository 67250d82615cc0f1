"""CoDI-Eval corpus statistics: task accuracy, the CoDI score, Self-BLEU, and the report.

Definitions in `docs/codi-eval.md` ("Aggregates") and `docs/meta_eval.md` ("CoDI-Eval Self-BLEU"):
* accuracy(task) = successes / N per system; a row that could not be scored (error) counts
  as a failure and is reported in `n_errors`.
* detoxic: the rows of one context (constraint `context_id`) pass only if every continuation
  has toxicity < threshold; accuracy = passing contexts / contexts.
* CoDI score = mean of the six task accuracies x 100 (null unless all six are present).
* Self-BLEU per system and task: the mean over outputs of BLEU(output, all other outputs of
  the same system and task); the system's Self-BLEU is the mean over its tasks. Two named
  methods:
  - "nltk" (default, CoDI-Eval's `calc_self_bleu`): the raw generations split on whitespace,
    NLTK `sentence_bleu` with its defaults (cumulative 4-gram, uniform weights, no smoothing:
    a zero n-gram precision enters as the smallest positive float, so such a sentence scores
    about 1e-77, and 0 when no unigram matches);
  - "sacrebleu": sacreBLEU sentence BLEU on the cleaned responses (the clean-up of
    `scoring.codi.rules.clean_response`, not applied to toxicity continuations), whitespace
    tokens (tokenize='none'), no smoothing, effective order.
  Both are computed in O(total n-grams) from leave-one-out reference counts (the best and the
  second-best count of every n-gram over the outputs, and the multiset of lengths for the
  closest reference length); `tests/test_codi_aggregate.py` checks them against NLTK's
  `sentence_bleu` and sacreBLEU's `sentence_score` themselves.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence

from scoring.codi import TASKS, rules
from scoring.display_names import quoted
from scoring.errors import InputError
from scoring.signature import Signature, library_versions

VERSION = "3"  # 3: rows without a system beside rows with one are left out and counted, no longer a system "default"
SELF_BLEU_METHODS = ("nltk", "sacrebleu")
MAX_ORDER = 4


# ----- Self-BLEU ---------------------------------------------------------------------------
class _LeaveOneOut:
    """Per n-gram the best count, its owner and the second-best count over all outputs, and the
    multiset of lengths: the reference statistics of output i against all the others."""

    def __init__(self, counts: Sequence[Counter], lengths: Sequence[int]):
        self.top: dict[tuple, list] = {}
        for owner, grams in enumerate(counts):
            for gram, count in grams.items():
                entry = self.top.get(gram)
                if entry is None:
                    self.top[gram] = [count, owner, 0]
                elif count > entry[0]:
                    entry[2] = entry[0]
                    entry[0], entry[1] = count, owner
                elif count > entry[2]:
                    entry[2] = count
        self.lengths = Counter(lengths)

    def reference_count(self, gram: tuple, owner: int) -> int:
        entry = self.top.get(gram)
        if entry is None:
            return 0
        best, best_owner, second = entry
        return second if best_owner == owner else best

    def other_lengths(self, own: int) -> list[int]:
        others = self.lengths.copy()
        others[own] -= 1
        return [n for n, c in others.items() if c > 0]


def _leave_one_out_stats(counts: list[Counter], lengths: list[int], order: int, progress: bool):
    """For each text in turn: (its length, the lengths of all other texts, its n-gram matches
    clipped by the other texts' counts, its n-gram totals), one list entry per order. These
    are the sufficient statistics of sentence BLEU against every other text as references."""
    stats = _LeaveOneOut(counts, lengths)
    for i in _progress(range(len(counts)), progress):
        matches = [0] * order
        totals = [0] * order
        for gram, count in counts[i].items():
            n = len(gram) - 1
            totals[n] += count
            matches[n] += min(count, stats.reference_count(gram, i))
        yield lengths[i], stats.other_lengths(lengths[i]), matches, totals


def _ngrams(tokens: Sequence[str], max_order: int = MAX_ORDER) -> Counter:
    grams: Counter = Counter()
    for n in range(1, max_order + 1):
        for k in range(len(tokens) - n + 1):
            grams[tuple(tokens[k:k + n])] += 1
    return grams


def _nltk_sentence_bleu(hyp_len: int, ref_len: int, matches: list[int], totals: list[int]) -> float:
    """NLTK `sentence_bleu` from its statistics (default weights, smoothing method0)."""
    if matches[0] == 0:
        return 0.0
    if hyp_len > ref_len:
        bp = 1.0
    elif hyp_len == 0:
        bp = 0.0
    else:
        bp = math.exp(1 - ref_len / hyp_len)
    logs = []
    for match, total in zip(matches, totals):
        precision = match / max(1, total) if match else sys.float_info.min
        logs.append(0.25 * math.log(precision))
    return bp * math.exp(math.fsum(logs))


def self_bleu_nltk(texts: Sequence[str], progress: bool = False) -> float | None:
    """Mean leave-one-out NLTK sentence BLEU of whitespace-split texts, in [0, 1] (CoDI-Eval's)."""
    if len(texts) < 2:
        return None
    tokens = [str(text).split() for text in texts]
    counts = [_ngrams(t) for t in tokens]
    lengths = [len(t) for t in tokens]
    total = 0.0
    for length, other_lengths, matches, totals in _leave_one_out_stats(counts, lengths, MAX_ORDER, progress):
        ref_len = min(other_lengths, key=lambda n: (abs(n - length), n))  # NLTK's closest reference length
        total += _nltk_sentence_bleu(length, ref_len, matches, totals)
    return total / len(texts)


def self_bleu_nltk_reference(texts: Sequence[str]) -> float:
    """NLTK itself: mean of sentence_bleu(all others, t_i). O(N^2); for tests."""
    import warnings

    from nltk.translate.bleu_score import sentence_bleu

    tokens = [str(text).split() for text in texts]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = [sentence_bleu(tokens[:i] + tokens[i + 1:], tokens[i]) for i in range(len(tokens))]
    return sum(scores) / len(scores)


def _bleu(tokenize: str = "none", smooth_method: str = "none"):
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize=tokenize, smooth_method=smooth_method, effective_order=True)


def self_bleu_signature(method: str = "nltk") -> str:
    if method == "nltk":
        version = library_versions("nltk")["nltk"]
        return f"self-bleu:leave-one-out-mean|nltk:{version}|sentence_bleu|tok:split|weights:0.25x4|smooth:method0|text:raw"
    version = library_versions("sacrebleu")["sacrebleu"]
    return f"self-bleu:leave-one-out-mean|sacrebleu:{version}|tok:none|smooth:none|eff:yes|ngram:1-4|text:cleaned"


def self_bleu_reference(texts: Sequence[str], tokenize: str = "none", smooth_method: str = "none") -> float:
    """Plain sacreBLEU: mean of sentence_score(t_i, all others) / 100. O(N^2) n-gram work."""
    bleu = _bleu(tokenize, smooth_method)
    scores = [bleu.sentence_score(text, list(texts[:i]) + list(texts[i + 1:])).score for i, text in enumerate(texts)]
    return sum(scores) / len(scores) / 100.0


def self_bleu(texts: Sequence[str], tokenize: str = "none", smooth_method: str = "none", progress: bool = False) -> float | None:
    """Mean leave-one-out sacreBLEU sentence BLEU in [0, 1] (same value as `self_bleu_reference`)."""
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
    total_score = 0.0
    for length, other_lengths, correct, total in _leave_one_out_stats(counts, lengths, order, progress):
        ref_len = bleu._get_closest_ref_len(length, other_lengths)
        total_score += bleu._compute_score_from_stats([length, ref_len] + correct + total).score
    return total_score / len(texts) / 100.0


def _progress(iterable: Iterable[int], progress: bool) -> Iterable[int]:
    if not progress:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc="self-bleu", leave=False)


def task_self_bleu(texts: Sequence[str], task: str, method: str = "nltk") -> float | None:
    """Self-BLEU of one system's outputs on one task by the named method (see the module doc)."""
    if method == "nltk":
        return self_bleu_nltk([t or "" for t in texts])
    if method == "sacrebleu":
        texts = [t or "" for t in texts]
        if task != "detoxic":
            texts = [rules.clean_response(t) for t in texts]
        return self_bleu(texts)
    from scoring.errors import UsageError

    raise UsageError(f"self-BLEU method {method!r}: use one of {', '.join(SELF_BLEU_METHODS)}")


# ----- accuracies --------------------------------------------------------------------------
def _score(score: dict[str, Any], column: str, index: int, allowed: str) -> float | None:
    """A stored CoDI score as a number: None when null or NaN (the row could not be scored,
    counted in `n_errors`); anything else that is not a number in the allowed range is an
    error naming the row and column, never a silent failure of the row."""
    from scoring.errors import InputError

    value = score.get(column)
    if value is None or isinstance(value, float) and math.isnan(value):
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        value = float(value)
        ok = value in (0.0, 1.0) if allowed == "0 or 1" else 0.0 <= value <= 1.0
    if not ok:
        where = f"row {index}" + (f" (id {quoted(score['id'])})" if "id" in score else "")
        raise InputError(f"scores {where}: {column} = {quoted(value)} is not {allowed}")
    return value


def _records(rows: Sequence[dict[str, Any]], scores: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(rows) != len(scores):
        raise ValueError(f"{len(rows)} canonical rows but {len(scores)} score rows")
    records = []
    for index, (row, score) in enumerate(zip(rows, scores)):
        if "id" in score and "id" in row and score["id"] != row["id"]:
            raise ValueError(f"row {index}: score id {quoted(score['id'])} does not match row id {quoted(row['id'])}")
        try:
            constraint = json.loads(row["constraint"]) if isinstance(row.get("constraint"), str) else row.get("constraint")
            task = constraint["task"]
        except (TypeError, KeyError, json.JSONDecodeError, RecursionError):  # a hostile constraint: no task
            constraint, task = None, None
        records.append(
            {
                "system": row.get("system"),
                "task": {"toxicity": "detoxic"}.get(task, task),
                "context_id": (constraint or {}).get("context_id") if task else None,
                "doc_id": row.get("doc_id"),
                "text": row.get("text"),
                "success": _score(score, "codi_success", index, "0 or 1"),
                "toxicity": _score(score, "codi_toxicity", index, "a number from 0 to 1"),
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
                "n_rows": len(records), "n_errors": n_errors, "unit": "context"}
    successes = sum(1 for r in records if r["error"] is None and r["success"] == 1.0)
    return {"accuracy": successes / len(records), "n": len(records), "n_success": successes,
            "n_rows": len(records), "n_errors": n_errors, "unit": "instruction"}


def aggregate(
    rows: Sequence[dict[str, Any]],
    scores: Sequence[dict[str, Any]],
    metric_signature: str | None = None,
    toxicity_threshold: float = 0.5,
    with_self_bleu: bool = True,
    self_bleu_method: str = "nltk",
    source: str = "input",
    earlier=None,
    positions: Sequence[tuple[str, int]] | None = None,
) -> dict[str, Any]:
    """The report dict: per system, per task accuracy and Self-BLEU (`self_bleu_method`: "nltk",
    CoDI-Eval's, or "sacrebleu"), the CoDI score; every number is a record carrying its signature.
    `rows` accounts for every input row (`_systems`; `source` names the input there), after
    `earlier` (a `RowAccount` of rows left out before these, e.g. keys not valid UTF-8) when given;
    `positions`: each row's (file, row in it), which messages name (default: `source` and its index)."""
    records = _records(rows, scores)
    unknown = [(index, r["task"]) for index, r in enumerate(records) if r["task"] not in TASKS]
    if unknown:
        index, task = unknown[0]
        row_id = rows[index].get("id")
        file, row = positions[index] if positions is not None else (source, index)
        where = f"row {row}" + (f" of {file}" if file != source else "") + (f" (id {quoted(row_id)})" if row_id is not None else "")
        what = f"unknown constraint task {task!r}" if task is not None else "no constraint task"
        raise InputError(f"{where}: {what} (known: {', '.join(TASKS)}); {len(unknown)} rows like it")
    records, rows_account = _systems(records, rows, source, positions)
    if earlier is not None:
        rows_account = earlier.then(rows_account)
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for r in records:
        groups[(r["system"], r["task"])].append(r)
    from scoring.signature import stable_hash

    metric_ref = stable_hash(metric_signature, 16) if metric_signature else "unknown"
    accuracy_sig = str(Signature("codi-accuracy", VERSION, {"metric_signature_sha256": metric_ref,
                                                               "errors": "count as failures",
                                                               "detoxic": f"context passes iff all continuations < {toxicity_threshold}"}))
    if with_self_bleu and self_bleu_method not in SELF_BLEU_METHODS:
        from scoring.errors import UsageError

        raise UsageError(f"self-BLEU method {self_bleu_method!r}: use one of {', '.join(SELF_BLEU_METHODS)}")
    bleu_sig = self_bleu_signature(self_bleu_method)
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
                            **{k: v for k, v in acc.items() if k != "accuracy"}, "signature": accuracy_sig})
            if with_self_bleu:
                value = task_self_bleu([r["text"] for r in group], task, self_bleu_method)
                bleus[task] = value
                results.append({"system": system, "task": task, "measure": "self_bleu", "value": value,
                                "n": len(group), "signature": bleu_sig})
        complete = all(task in accuracies for task in TASKS)
        codi = 100.0 * sum(accuracies.values()) / len(TASKS) if complete else None
        results.append({"system": system, "task": "all", "measure": "codi_score", "value": codi,
                        "n": len(accuracies), "note": None if complete else f"missing tasks: {[t for t in TASKS if t not in accuracies]}",
                        "signature": accuracy_sig + "|codi:mean-of-6x100"})
        if with_self_bleu and bleus:
            values = [v for v in bleus.values() if v is not None]
            results.append({"system": system, "task": "all", "measure": "self_bleu",
                            "value": sum(values) / len(values) if values else None, "n": len(values),
                            "signature": bleu_sig + "|mean-over-tasks"})
    signatures = {"accuracy": accuracy_sig, "self_bleu": bleu_sig, "metric": metric_signature}
    return {
        "report": "codi-eval",
        "signature": str(Signature("codi-eval-report", VERSION, {"accuracy": accuracy_sig, "self_bleu": bleu_sig if with_self_bleu else None})),
        "signatures": signatures,
        "systems": systems,
        "tasks": list(TASKS),
        "rows": rows_account.as_dict(),
        "results": results,
    }


def _systems(records: list[dict[str, Any]], rows: Sequence[dict[str, Any]], source: str,
             positions: Sequence[tuple[str, int]] | None = None):
    """The records that have a system, and the account of every row (docs/meta_eval.md, "Rows
    left out"): a row whose system is missing (null, blank) is left out, counted under "no
    system" with its first row named, when other rows have one; when no row has one, all rows
    are one system, "default"."""
    from meta_eval.row_account import RowAccount, is_missing, no_key

    missing = [is_missing(record["system"]) for record in records]
    if all(missing):
        return [dict(record, system="default") for record in records], RowAccount(len(records), len(records))
    kept = [record for record, gone in zip(records, missing) if not gone]
    if len(kept) == len(records):
        return kept, RowAccount(len(records), len(records))
    row = missing.index(True)
    row_id = rows[row].get("id")
    file, at = positions[row] if positions is not None else (source, row)
    where = f"{file}: column 'system', row {at}" + (f" (id {quoted(row_id)})" if row_id is not None else "")
    reason = no_key("system")
    return kept, RowAccount(len(records), len(kept), {reason: len(records) - len(kept)}, {reason: where})


# ----- report files ------------------------------------------------------------------------
def _scaled(value: Any, scale: float = 1.0) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value * scale


def markdown(report: dict[str, Any], images: Sequence[str] = ()) -> str:
    """Accuracy (%) per task, the CoDI score and Self-BLEU (x100) per system."""
    from scoring.display_names import cut_note
    from scoring.tables import markdown_code, markdown_name, markdown_table

    index = {(r["system"], r["task"], r["measure"]): r for r in report["results"]}

    def value(system, task, measure, scale=1.0):
        return _scaled(index.get((system, task, measure), {}).get("value"), scale)

    lines = ["# CoDI-Eval report", "", f"Signature: {markdown_code(report['signature'])}", "",
             "Accuracy in %, Self-BLEU x 100 (mean over tasks).", "", *_left_out_lines(report),
             markdown_table(["system", *TASKS, "CoDI score", "Self-BLEU"],
                            [[s, *[value(s, t, "accuracy", 100) for t in TASKS], value(s, "all", "codi_score"),
                              value(s, "all", "self_bleu", 100)] for s in report["systems"]], digits=2)]
    if any(r["measure"] == "self_bleu" and r["task"] != "all" for r in report["results"]):
        lines += ["Self-BLEU x 100 per task:", "",
                  markdown_table(["system", *TASKS], [[s, *[value(s, t, "self_bleu", 100) for t in TASKS]]
                                                      for s in report["systems"]], digits=2)]
    errors = [r for r in report["results"] if r.get("n_errors")]
    if errors:
        lines += ["Rows that could not be scored (counted as failures):", ""]
        lines += [f"- {markdown_name(r['system'])} / {markdown_name(r['task'])}: {r['n_errors']} of {r['n_rows']} rows"
                  for r in errors]
        lines.append("")
    lines += ["Signatures:", "", f"- accuracy: {markdown_code(report['signatures']['accuracy'])}",
              f"- self-BLEU: {markdown_code(report['signatures']['self_bleu'])}"]
    if report["signatures"].get("metric"):
        lines.append(f"- metric: {markdown_code(report['signatures']['metric'])}")
    if images:
        lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in images]
    text = "\n".join(lines) + "\n"
    return text + cut_note(text, "`results.json`")


def _left_out_lines(report: dict[str, Any]) -> list[str]:
    """The report's line on rows left out (none when none was)."""
    from meta_eval.row_account import RowAccount
    from scoring.tables import markdown_text

    rows = report.get("rows")
    if not rows or not rows.get("rows_left_out"):
        return []
    line = RowAccount(rows["rows_in"], rows["rows_used"], rows["rows_left_out"], rows.get("rows_left_out_first", {})).line()
    return [f"**Rows {markdown_text(line)}.**", ""]


def plot_accuracy(report: dict[str, Any], path: pathlib.Path) -> str:
    """Grouped bars: accuracy (%) per task and the CoDI score, one bar per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from meta_eval.report.plots import save, text_only

    with text_only():  # system names are drawn as text, never as mathtext
        fig = _accuracy_figure(plt, report)
    save(fig, path)
    return path.name


def _accuracy_figure(plt, report: dict[str, Any]):
    from meta_eval.report.plots import distinct, legend_label, plain

    index = {(r["system"], r["task"], r["measure"]): r["value"] for r in report["results"]}
    groups = list(TASKS) + ["CoDI score"]
    systems = report["systems"]
    width = 0.8 / max(len(systems), 1)
    fig, ax = plt.subplots(figsize=(10, 6))
    labels = distinct(plain(system) for system in systems)  # two systems cut to one head keep apart in the legend
    for k, system in enumerate(systems):
        values = [100 * (index.get((system, t, "accuracy")) or 0) for t in TASKS]
        values.append(index.get((system, "all", "codi_score")) or 0)
        ax.bar([i + k * width for i in range(len(groups))], values, width, label=legend_label(labels[k]))
    ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(groups))], groups)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title("CoDI-Eval accuracy per task")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write_report(report: dict[str, Any], out_dir: str | pathlib.Path, plot: bool = True) -> dict[str, pathlib.Path]:
    """`results.json` (every number with its signature), `report.md`, a self-contained
    `report.html` and `codi_accuracy.png` in `out_dir` (the meta-evaluation report layout)."""
    from meta_eval.report.files import write_text
    from meta_eval.report.html import render

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": write_text(out / "results.json",
                                json.dumps(report, indent=1, ensure_ascii=False, allow_nan=False) + "\n")}
    images = []
    if plot:
        images.append(plot_accuracy(report, out / "codi_accuracy.png"))
        paths["png"] = out / images[0]
    text = markdown(report, images)
    paths["md"] = write_text(out / "report.md", text)
    names = [*report["systems"], *(r["task"] for r in report["results"])]
    paths["html"] = write_text(out / "report.html", render(text, out, title="CoDI-Eval report", images=images,
                                                           names=names))
    return paths

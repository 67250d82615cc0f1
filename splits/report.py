"""Per-protocol CompMCTG report for a scored corpus (spec "CompMCTG evaluation metrics").

For every split, the rows whose combination is seen are in-distribution (i.d.) and the rows
whose combination is unseen are compositional (comp). Per side:
- attribute accuracy per aspect = mean(pred_<aspect> == gold value), A = mean over aspects;
- P = mean of the perplexity column (when present);
- Dist-3 = mean per-text distinct-3 ratio (`scoring.text_stats.distinct_n`, whitespace tokens);
and the compositional gap G = (A_i.d. − A_comp) / A_i.d. The protocol's numbers are the
means over its splits. `benchmark_summary` combines Original / Hold-Out / ACD reports into
A_avg (mean of the five A's), P_avg and G_avg (mean of the Hold-Out and ACD gaps).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from scoring.display_names import quoted
from scoring.text_stats import distinct_n
from splits.aspects import SplitsInputError, corpus_rows, read_corpus_table


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return float(np.mean(vals)) if vals else None


_NOT_TEXT = object()  # a data value that is not valid UTF-8: never decoded, never equal to a gold value


def _texts(column, name: str, not_text: dict[str, int], keep: bool = False) -> list:
    """A data column's Python values (a prediction, a text: data, not a key); a string that is
    not valid UTF-8 becomes None (a prediction that matches no gold value), or `_NOT_TEXT` with
    `keep` (a text left out of Dist-3), counted in `not_text[name]`."""
    from scoring.utf8_text import binary_as_text, text_or_bytes

    values = text_or_bytes(binary_as_text(column))  # a Parquet binary column: the text it holds
    wrong = sum(isinstance(v, bytes) for v in values)
    if wrong:
        not_text[name] = wrong
    return [(_NOT_TEXT if keep else None) if isinstance(v, bytes) else v for v in values]


def _side_stats(mask: np.ndarray, gold: Mapping[str, list], preds: Mapping[str, list], ppl, dist3) -> dict[str, Any]:
    n = int(mask.sum())
    out: dict[str, Any] = {"rows": n}
    if n == 0:
        out.update(accuracy=None, accuracy_per_aspect={}, perplexity=None, dist3=None)
        return out
    idx = np.flatnonzero(mask)
    per = {}
    for aspect, pred in preds.items():
        per[aspect] = float(np.mean([pred[i] is not None and str(pred[i]) == gold[aspect][i] for i in idx]))
    out["accuracy_per_aspect"] = per
    out["accuracy"] = _mean(per.values())
    out["perplexity"] = _mean(ppl[i] for i in idx) if ppl is not None else None
    out["dist3"] = _mean(dist3[i] for i in idx) if dist3 is not None else None
    return out


def protocol_report(corpus, splits_json: Mapping[str, Any], pred_prefix: str = "pred_", perplexity_column: str = "perplexity",
                    text_column: str = "text", aspect_columns: Sequence[str] | None = None) -> dict[str, Any]:
    """Report of one protocol's splits over a scored corpus (path or pyarrow table)."""
    if hasattr(corpus, "column_names"):
        table, source = corpus, "corpus"
    else:
        table, source = read_corpus_table(corpus), str(corpus)
    aspects = list(splits_json.get("aspects") or splits_json["splits"][0]["seen"][0].keys())
    if aspect_columns is None and "attributes" not in table.column_names:
        aspect_columns = aspects
    found = corpus_rows(table, aspect_columns, source=source)  # a row whose aspect is not UTF-8: on no side
    rows = found.rows
    table = table.take(found.kept) if found.account["rows_left_out"] else table
    gold = {a: [d.get(a) for d in rows] for a in aspects}
    preds, not_text = {}, {}
    for a in aspects:
        col = f"{pred_prefix}{a}"
        if col not in table.column_names:
            raise SplitsInputError(f"{source}: classifier-prediction column {quoted(col)} for aspect {quoted(a)} not found")
        preds[a] = _texts(table.column(col), col, not_text)
    ppl = table.column(perplexity_column).to_pylist() if perplexity_column in table.column_names else None
    dist3 = None
    if text_column in table.column_names:
        dist3 = [None if t is _NOT_TEXT else distinct_n((t or "").split(), 3)
                 for t in _texts(table.column(text_column), text_column, not_text, keep=True)]
    keys = [tuple(d[a] for a in aspects) for d in rows]
    per_split = []
    for n, split in enumerate(splits_json["splits"]):
        seen = {tuple(c[a] for a in aspects) for c in split["seen"]}
        unseen = {tuple(c[a] for a in aspects) for c in split["unseen"]}
        is_seen = np.fromiter((k in seen for k in keys), dtype=bool, count=len(keys))
        is_unseen = np.fromiter((k in unseen for k in keys), dtype=bool, count=len(keys))
        iid = _side_stats(is_seen, gold, preds, ppl, dist3)
        comp = _side_stats(is_unseen, gold, preds, ppl, dist3)
        gap = None
        if iid["accuracy"] and comp["accuracy"] is not None:
            gap = (iid["accuracy"] - comp["accuracy"]) / iid["accuracy"]
        per_split.append({"split": n, "divergence": split.get("divergence"), "iid": iid, "comp": comp, "gap": gap})
    summary = {}
    for side in ("iid", "comp"):
        summary[f"A_{side}"] = _mean(s[side]["accuracy"] for s in per_split)
        summary[f"P_{side}"] = _mean(s[side]["perplexity"] for s in per_split)
        summary[f"dist3_{side}"] = _mean(s[side]["dist3"] for s in per_split)
        summary[f"accuracy_per_aspect_{side}"] = {
            a: _mean(s[side]["accuracy_per_aspect"].get(a) for s in per_split) for a in aspects
        }
    summary["gap"] = _mean(s["gap"] for s in per_split)
    protocol = (splits_json.get("signature") or {}).get("protocol")
    return {"protocol": protocol, "n_splits": len(per_split), "summary": summary, "splits": per_split,
            "splits_signature": splits_json.get("signature"), "rows": found.account,
            **({"values_not_utf8": not_text} if not_text else {})}


def benchmark_summary(reports: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """CompMCTG averages from reports keyed by protocol ("original", "holdout", "acd")."""
    a_vals, p_vals, gaps = [], [], []
    if "original" in reports:
        a_vals.append(reports["original"]["summary"]["A_iid"])
        p_vals.append(reports["original"]["summary"]["P_iid"])
    for proto in ("holdout", "acd"):
        if proto in reports:
            s = reports[proto]["summary"]
            a_vals += [s["A_iid"], s["A_comp"]]
            p_vals += [s["P_iid"], s["P_comp"]]
            gaps.append(s["gap"])
    return {"A_avg": _mean(a_vals), "P_avg": _mean(p_vals), "G_avg": _mean(gaps)}


def report_markdown(report: Mapping[str, Any]) -> str:
    """The protocol's summary and per-aspect accuracies as Markdown tables (`scoring.tables`)."""
    from scoring.display_names import cut_note
    from scoring.tables import markdown_name, markdown_table, markdown_text, percent, significant_figures

    s = report["summary"]
    pct, num = percent, significant_figures
    summary = markdown_table(
        ["A_i.d.", "A_comp", "P_i.d.", "P_comp", "Dist-3 i.d.", "Dist-3 comp", "gap"],
        [[s["A_iid"], s["A_comp"], s["P_iid"], s["P_comp"], s["dist3_iid"], s["dist3_comp"], s["gap"]]],
        formats=[pct, pct, num, num, num, num, pct])
    aspects = markdown_table(
        ["aspect", "acc i.d.", "acc comp"],
        [[a, v, s["accuracy_per_aspect_comp"].get(a)] for a, v in s["accuracy_per_aspect_iid"].items()],
        formats=[None, pct, pct])
    text = f"### Protocol {markdown_name(report['protocol'])} ({report['n_splits']} splits)\n\n{summary}\n{aspects}"
    rows = report.get("rows") or {}
    if rows.get("rows_left_out"):  # rows whose aspect key is not valid UTF-8: on no side of any split
        reasons = ", ".join(f"{n} {reason}" for reason, n in rows["rows_left_out"].items())
        firsts = "".join(f"; first {reason}: {where}" for reason, where in rows.get("rows_left_out_first", {}).items())
        text += "\n" + markdown_text(f"{rows['rows_in'] - rows['rows_used']} of {rows['rows_in']} rows left out "
                                     f"({reasons}); {rows['rows_used']} used{firsts}") + "\n"
    if report.get("values_not_utf8"):
        text += "\n" + markdown_text("Values not valid UTF-8 (a prediction counted wrong, a text left out of Dist-3): " +
                                     ", ".join(f"{name} {n}" for name, n in report["values_not_utf8"].items())) + "\n"
    return text + cut_note(text, "The `.report.json` beside this file")

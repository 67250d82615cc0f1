"""Write the meta-evaluation results: JSON of every number, a Markdown/HTML report, PNG plots.

Plots (matplotlib, Agg backend, every PNG exactly `FIGSIZE` x `DPI` = 1000 x 600 pixels):
Each dataset group gets its own folder `<out>/<dataset>/` with:
* `correlations.png`: each metric's correlation with each human aspect, 95 % bootstrap interval;
* `significance.png`: pairwise paired-bootstrap p-values (row metric better than column metric);
* `checklist_ks.png`: system-level KS on Easy / Hard pairs (or aspect-level Lo-Hi KS);
* `preference_similarity.png`: metric x human preference similarity (Easy pairs);
* `win_fractions.png`: pairwise win fractions per doc_id (checklist paper Fig. 7).
"""

from __future__ import annotations

import html
import json
import math
import pathlib

import numpy as np

FIGSIZE = (10, 6)
DPI = 100
LEVEL_ORDER = ["sample", "document", "system"]
METHOD_ORDER = ["pearson", "spearman", "kendall"]
MAX_ROWS = 40  # most metrics drawn in one plot (all of them stay in the JSON)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: pathlib.Path) -> str:
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path.name


def _short(name: str, width: int = 24) -> str:
    name = str(name).removeprefix("human_")
    return name if len(name) <= width else name[: width - 1] + "…"


def _fontsize(count: int) -> float:
    return max(4.5, min(9.0, 240 / max(count, 1)))


def _empty(ax, text):
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11)


def plot_correlations(results: dict, path: pathlib.Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    sig = results.get("significance") or []
    if not sig:
        rows = [r for r in results.get("correlations") or [] if r["level"] == "sample"]
        if not rows:
            _empty(ax, "no correlations (no metric or no human column)")
            return _save(fig, path)
        method = "spearman" if any(r["method"] == "spearman" for r in rows) else rows[0]["method"]
        rows = [r for r in rows if r["method"] == method]
        metrics = list(dict.fromkeys(r["metric"] for r in rows))[:MAX_ROWS]
        humans = list(dict.fromkeys(r["human"] for r in rows))
        width = 0.8 / max(len(humans), 1)
        for k, human in enumerate(humans):
            vals = {r["metric"]: r["value"] for r in rows if r["human"] == human}
            ax.plot([np.nan if vals.get(m) is None else vals[m] for m in metrics],
                    np.arange(len(metrics)) + (k - (len(humans) - 1) / 2) * width, "o", ms=3,
                    label=_short(human))
        ax.set_yticks(np.arange(len(metrics)), [_short(m) for m in metrics], fontsize=_fontsize(len(metrics)))
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlabel(f"{method} correlation (sample level); no bootstrap intervals (resamples = 0)")
        ax.legend(fontsize=7, loc="best")
        ax.set_title("Metric-human correlation")
        fig.subplots_adjust(left=0.2, right=0.98, top=0.93, bottom=0.1)
        return _save(fig, path)
    level = sig[0]["level"]
    blocks = [s for s in sig if s["level"] == level]
    metrics = blocks[0]["metrics"][:MAX_ROWS]
    width = 0.8 / len(blocks)
    for k, block in enumerate(blocks):
        ys = np.arange(len(metrics)) + (k - (len(blocks) - 1) / 2) * width
        vals = np.array([np.nan if block["intervals"][m]["value"] is None else block["intervals"][m]["value"]
                         for m in metrics], dtype=float)
        cis = np.array([[np.nan if v is None else v for v in block["intervals"][m]["ci"]] for m in metrics],
                       dtype=float)
        err = np.abs(np.vstack([vals - cis[:, 0], cis[:, 1] - vals]))
        ax.errorbar(vals, ys, xerr=np.nan_to_num(err), fmt="o", ms=3, capsize=2,
                    label=_short(block["human"]))
    ax.set_yticks(np.arange(len(metrics)), [_short(m) for m in metrics], fontsize=_fontsize(len(metrics)))
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel(f"{blocks[0]['method']} correlation ({level} level), 95% bootstrap interval")
    ax.legend(fontsize=7, loc="best")
    ax.set_title("Metric-human correlation")
    fig.subplots_adjust(left=0.2, right=0.98, top=0.93, bottom=0.1)
    return _save(fig, path)


def _grouped_bars(ax, series: dict, width: float) -> None:
    """One bar per column for each series (label -> values), series side by side; None is a gap."""
    for k, (label, values) in enumerate(series.items()):
        offset = (k - (len(series) - 1) / 2) * width
        ax.bar(np.arange(len(values)) + offset, [np.nan if v is None else v for v in values], width, label=label)


def _heatmap(ax, matrix, rows, cols, cmap, vmin, vmax, annotate=True, fmt="{:.2f}"):
    matrix = np.asarray(matrix, dtype=float)
    image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(cols)), [_short(c, 16) for c in cols], rotation=60, ha="right",
                  fontsize=_fontsize(len(cols)))
    ax.set_yticks(range(len(rows)), [_short(r, 20) for r in rows], fontsize=_fontsize(len(rows)))
    if annotate and matrix.size <= 400:
        for (i, j), v in np.ndenumerate(matrix):
            if np.isfinite(v):
                ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=_fontsize(len(cols)) * 0.8)
    return image


def plot_significance(results: dict, path: pathlib.Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    sig = results.get("significance") or []
    if not sig or len(sig[0]["metrics"]) < 2:
        _empty(ax, "pairwise significance needs two or more metrics")
        return _save(fig, path)
    block = sig[0]
    metrics = block["metrics"][:MAX_ROWS]
    n = len(metrics)
    matrix = np.array([[np.nan if v is None else v for v in row[:n]] for row in block["p_matrix"][:n]])
    image = _heatmap(ax, matrix, metrics, metrics, "viridis_r", 0, 1, annotate=n <= 12)
    fig.colorbar(image, ax=ax, label="p-value (row better than column)")
    ax.set_title(f"Paired bootstrap, {_short(block['human'])}, {block['level']} level, "
                 f"{block['method']}, N={results['options']['resamples']}")
    fig.subplots_adjust(left=0.2, right=0.95, top=0.92, bottom=0.25)
    return _save(fig, path)


def plot_checklist_ks(results: dict, path: pathlib.Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    chk = results.get("checklist") or {}
    if chk.get("system_ks"):
        columns = chk["columns"][:MAX_ROWS]
        kinds = list(chk["system_ks"])
        _grouped_bars(ax, {f"{kind} pairs": [chk["system_ks"][kind].get(c) for c in columns] for kind in kinds},
                      0.8 / len(kinds))
        ax.set_ylabel("mean system-level KS")
        ax.set_title("Checklist: system-level discrimination (KS between system pairs)")
    elif chk.get("aspect_level"):
        human = next(iter(chk["aspect_level"]))
        columns = list(chk["aspect_level"][human])[:MAX_ROWS]
        _grouped_bars(ax, {key.removeprefix("ks_").replace("_", "-"): [chk["aspect_level"][human][c][key] for c in columns]
                           for key in ("ks_lo_hi", "ks_lo_mod", "ks_hi_mod")}, 0.27)
        ax.set_ylabel("KS")
        ax.set_title(f"Checklist: aspect-level KS between quality groups of {_short(human)}")
    else:
        _empty(ax, "no checklist results")
        return _save(fig, path)
    ax.set_xticks(range(len(columns)), [_short(c, 18) for c in columns], rotation=70, ha="right",
                  fontsize=_fontsize(len(columns)))
    ax.legend(fontsize=8)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.92, bottom=0.3)
    return _save(fig, path)


def plot_preference_similarity(results: dict, path: pathlib.Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    chk = results.get("checklist") or {}
    table = (chk.get("preference_similarity") or {}).get("easy")
    if not table:
        _empty(ax, "preference similarity needs systems and Easy pairs")
        return _save(fig, path)
    humans = list(next(iter(table.values())))
    metrics = [m for m in table if m not in humans][:MAX_ROWS]
    matrix = np.array([[np.nan if table[m][h] is None else table[m][h] for m in metrics] for h in humans])
    image = _heatmap(ax, matrix, humans, metrics, "magma", 0, 1, annotate=len(metrics) <= 16)
    fig.colorbar(image, ax=ax, label="preference similarity S")
    ax.set_title("Checklist: system-level preference similarity to humans (Easy pairs)")
    fig.subplots_adjust(left=0.15, right=0.97, top=0.92, bottom=0.3)
    return _save(fig, path)


def plot_win_fractions(results: dict, path: pathlib.Path, columns: list[str] | None = None) -> str:
    plt = _plt()
    chk = results.get("checklist") or {}
    wins = chk.get("win_fractions") or {}
    if not wins:
        fig, ax = plt.subplots(figsize=FIGSIZE)
        _empty(ax, "win fractions need systems and doc_id")
        return _save(fig, path)
    if columns is None:
        humans = results["input"]["humans"]
        metrics = results["input"]["metrics"]
        columns = [c for c in humans if c in wins][:1] + [c for c in metrics if c in wins][:2]
    fig, axes = plt.subplots(1, len(columns), figsize=FIGSIZE, squeeze=False)
    fig.subplots_adjust(left=0.17, right=0.86, top=0.9, bottom=0.3, wspace=0.12)
    for k, (ax, column) in enumerate(zip(axes[0], columns)):
        table = wins[column]
        names = table["index"]
        image = _heatmap(ax, [[np.nan if v is None else v for v in row] for row in table["values"]],
                         names, names, "RdBu", 0, 1, annotate=len(names) <= 8)
        ax.set_title(_short(column), fontsize=9)
        if k:
            ax.set_yticklabels([])
    cax = fig.add_axes([0.89, 0.3, 0.02, 0.6])
    fig.colorbar(image, cax=cax, label="share of same-doc wins (row vs column)")
    fig.suptitle("Pairwise win fractions per doc_id (ties count as games)", fontsize=10)
    return _save(fig, path)


PLOTS = {"correlations.png": plot_correlations, "significance.png": plot_significance,
         "checklist_ks.png": plot_checklist_ks, "preference_similarity.png": plot_preference_similarity,
         "win_fractions.png": plot_win_fractions}


def _fmt(value, digits=4):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value).replace("|", "\\|")


def _md_table(header, rows) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return lines


def _group_markdown(results: dict, group: dict, images: list[str]) -> list[str]:
    out = [f"## Dataset `{group['name']}`", "",
           f"{group['rows']} rows; human aspects: {', '.join(group['humans']) or '–'}; "
           f"metrics: {', '.join(group['metrics']) or '–'}.", ""]
    corr = group.get("correlations") or []
    if corr:
        out += ["### Correlations", ""]
        keys = sorted({(r["level"], r["method"]) for r in corr},
                      key=lambda k: (LEVEL_ORDER.index(k[0]), METHOD_ORDER.index(k[1])))
        header = ["metric", "human"] + [f"{lvl} {m}" for lvl, m in keys]
        rows = {}
        for r in corr:
            rows.setdefault((r["metric"], r["human"]), {})[(r["level"], r["method"])] = r["value"]
        out += _md_table(header, [[m, h] + [vals.get(k) for k in keys] for (m, h), vals in rows.items()])
        out += ["", "Kendall is tau-" + results["options"]["variant"] + "; document level averages per-doc_id "
                "correlations; system level correlates per-system means.", ""]
    if group.get("darr"):
        out += ["### WMT DARR Kendall-like tau", ""]
        out += _md_table(["metric", "tau", "concordant", "discordant"],
                         [[m, d["value"], d["concordant"], d["discordant"]] for m, d in group["darr"].items()])
        out.append("")
    for block in group.get("significance") or []:
        out += [f"### Paired bootstrap: {block['human']}, {block['level']} level, {block['method']}", "",
                f"`{block['signature']}`", ""]
        if block.get("negated"):
            out += [f"Lower-is-better metrics negated before correlating: {', '.join(block['negated'])}.", ""]
        out += _md_table(["metric", "correlation", "95% CI low", "95% CI high"],
                         [[m, v["value"], *v["ci"]] for m, v in block["intervals"].items()])
        out.append("")
        comps = list(block["comparisons"].values())
        if comps:
            out += _md_table(["A", "B", "corr A - corr B", "p (A > B)", "CI diff low", "CI diff high"],
                             [[c["a"], c["b"], c["diff"], c["p_value"], *c["ci_diff"]] for c in comps])
            out.append("")
    chk = group.get("checklist")
    if chk:
        out += ["### Metric preference checklist", ""]
        if chk.get("system_ks"):
            kinds = list(chk["system_ks"])
            out += [f"Pairs ({chk.get('pairs_from')}): " + "; ".join(
                f"{k}: " + ", ".join(f"({a}, {b})" for a, b in chk["pairs"][k]) for k in kinds), ""]
            out += _md_table(["column"] + [f"system KS ({k})" for k in kinds],
                             [[c] + [chk["system_ks"][k].get(c) for k in kinds] for c in chk["columns"]])
            out.append("")
        easy = (chk.get("preference_similarity") or {}).get("easy")
        if easy:
            humans = list(next(iter(easy.values())))
            out += ["Preference similarity to humans (Easy pairs):", ""]
            out += _md_table(["column"] + humans, [[c] + [easy[c][h] for h in humans] for c in easy])
            out.append("")
    out += [f"![{name}]({name})" for name in images] + [""]
    return out


def markdown(results: dict, images: dict[str, list[str]]) -> str:
    inp = results["input"]
    out = ["# Meta-evaluation report", "", f"Signature: `{results['signature']}`", "",
           f"Input `{inp['source']}`: {inp['rows_in']} rows, {inp['rows_error']} with an error in at least "
           "one metric run (their scores on that run are excluded); "
           f"human aspects: {', '.join(inp['humans']) or '–'}; metrics: {', '.join(inp['metrics'])}.", ""]
    if inp.get("runs"):
        out += _md_table(["metric run (columns)", "rows", "rows with error", "signature"],
                         [[k, v["rows"], v["rows_error"], "; ".join(v["signatures"])[:200]]
                          for k, v in inp["runs"].items()])
        out.append("")
    for group in results["groups"]:
        out += _group_markdown(results, group, images.get(group["name"], []))
    if results.get("transfer"):
        out += ["## Transfer (correlation per dataset)", ""]
        for human, table in results["transfer"].items():
            out += [f"{human}:", ""]
            out += _md_table(["metric"] + table["columns"],
                             [[m] + row for m, row in zip(table["index"], table["values"])])
            out.append("")
    return "\n".join(out)


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "group"


def markdown_to_html(text: str) -> str:
    """Minimal renderer for the Markdown this module writes (headings, tables, images, text)."""
    body, table = [], []

    def flush():
        if table:
            rows = [[c.replace("\x00", "|") for c in r.replace("\\|", "\x00").strip().strip("|").split("|")]
                    for r in table if not set(r) <= set("|-")]
            head, *rest = rows
            body.append("<table><tr>" + "".join(f"<th>{html.escape(c.strip())}</th>" for c in head) + "</tr>"
                        + "".join("<tr>" + "".join(f"<td>{html.escape(c.strip())}</td>" for c in r) + "</tr>"
                                  for r in rest) + "</table>")
            table.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.startswith("!["):
            src = line[line.index("(") + 1: -1]
            body.append(f'<p><img src="{html.escape(src)}" alt="{html.escape(src)}"></p>')
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    flush()
    style = "table{border-collapse:collapse;font:12px sans-serif}td,th{border:1px solid #ccc;padding:2px 6px}"
    return f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head><body>" + \
        "\n".join(body) + "</body></html>"


def write_report(results: dict, out_dir, fmt: str = "md") -> dict[str, pathlib.Path]:
    """Write results.json, report.md and/or report.html, and per dataset group `<group>/*.png`."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json"}
    paths["json"].write_text(json.dumps(results, indent=1, allow_nan=False))
    images = {}
    for group in results["groups"]:
        folder = _safe(group["name"])
        (out / folder).mkdir(exist_ok=True)
        view = {**group, "options": results["options"],
                "input": {"humans": group["humans"], "metrics": group["metrics"]}}
        images[group["name"]] = []
        for name, fn in PLOTS.items():
            fn(view, out / folder / name)
            images[group["name"]].append(f"{folder}/{name}")
            paths[f"{folder}/{name}"] = out / folder / name
    text = markdown(results, images)
    if fmt in ("md", "both"):
        paths["md"] = out / "report.md"
        paths["md"].write_text(text)
    if fmt in ("html", "both"):
        paths["html"] = out / "report.html"
        paths["html"].write_text(markdown_to_html(text))
    return paths

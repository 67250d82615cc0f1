"""PNG plots of a `GroupResult` (matplotlib, Agg backend). Each function returns a figure or None
when its data does not exist (the report then leaves the plot out and says why).

Every label is plain text (`text_only`: no mathtext), whatever the names in the data are, and
a name is drawn by the one rule of `scoring.display_names` (`plain`): at most `LABEL_MAX`
characters, a longer name (or one whose typed text reads like an escape) as head, its length and
SHA-256 digest, tail, so no two names draw alike in a title or label, however far apart their
difference.
Titles name the dataset and the human aspect; heatmap cells are annotated in black or white,
whichever contrasts with the cell colour, and the figure grows with the number of rows so every
label stays readable.
"""

from __future__ import annotations

import numpy as np

from meta_eval.results import ChecklistBlock, GroupResult, SignificanceBlock

DPI = 100
MAX_ROWS = 40  # most metrics drawn in one plot (all of them stay in the tables and the JSON)
LABEL_MAX = 100  # longest name drawn in a title, label or legend (`plain`): the shortest cut form with a digest


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def text_only():
    """Context in which every label is plain text: matplotlib's mathtext (`$...$`) and TeX are
    off, so a name from the data is drawn as it is and never parsed (a `$\\frac` name would
    otherwise be typeset, and an unbalanced one raise)."""
    import matplotlib

    return matplotlib.rc_context({"text.parse_math": False, "text.usetex": False})


def plain_labels(draw):
    """Decorator: `draw` builds its figure under `text_only`."""
    import functools

    @functools.wraps(draw)
    def wrapped(*args, **kwargs):
        with text_only():
            return draw(*args, **kwargs)

    return wrapped


def natural_key(name) -> list:
    """Sort key that orders M2 before M10 (digit runs compare as numbers)."""
    import re

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(name))]


def plain(name) -> str:
    """A name as one line of drawable text, as a table cell shows it
    (`scoring.display_names.display_name` with `LABEL_MAX`): control characters (NUL, line
    breaks) show as their escapes, and a name longer than `LABEL_MAX` characters, or holding
    typed text that reads like an escape (`sys\\nA` beside `sys<newline>A`), shows as head,
    its length and SHA-256 digest, tail; so two names never draw alike (drawing a
    200,000-character title takes matplotlib minutes; the whole name stays in the JSON)."""
    from scoring.display_names import display_name

    return display_name(name, LABEL_MAX)


def titled(name, rest: str) -> str:
    """A plot title naming `name` (`plain`), then `rest`; a name shown cut gets a line of its own,
    so the title fits the figure."""
    shown = plain(name)
    return f"{shown}:\n{rest}" if len(shown) > 60 else f"{shown}: {rest}"


def _spaced(name) -> str:
    """`plain(name)` after a space, or on a line of its own when it is long."""
    shown = plain(name)
    return f"\n{shown}" if len(shown) > 40 else f" {shown}"


def legend_label(name) -> str:
    """A label (already drawable: `plain`, `short` or `tick_labels`) as a legend entry: matplotlib
    leaves out entries whose label starts with `_`, so such a name gets a leading space and stays
    in the legend."""
    text = str(name)
    return " " + text if text.startswith("_") else text


def short(name: str, width: int = 28) -> str:
    name = plain(name).removeprefix("human_")
    return name if len(name) <= width else name[: width - 1] + "…"


def tick_labels(names, width: int = 28) -> list[str]:
    """`short` labels for an axis; where two would read the same (names cut to one head, `x`
    beside `human_x`), each of those gets its 1-based position on the axis, so no two rows or
    columns of a plot look alike."""
    return distinct([short(name, width) for name in names])


def distinct(labels) -> list[str]:
    """`labels` with each one that occurs more than once followed by its 1-based position (`[2]`)."""
    labels = list(labels)
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return [f"{label} [{k + 1}]" if counts[label] > 1 else label for k, label in enumerate(labels)]


ANNOTATED_CELLS = 2500  # a 50 x 50 matrix; a 500-system one (250,000 texts) took more than 10 minutes to draw


def _heatmap(ax, matrix, rows, cols, cmap: str, vmin: float, vmax: float, fmt: str = "{:.2f}"):
    """Image with every finite cell annotated in a colour that contrasts with it (up to
    `ANNOTATED_CELLS` cells; a larger matrix is drawn as colours only, its values are in
    results.json)."""
    plt = _plt()
    matrix = np.asarray(matrix, dtype=float)
    colormap = plt.get_cmap(cmap).with_extremes(bad="#d9d9d9")  # undefined cells: grey with a dash
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap=colormap, vmin=vmin, vmax=vmax, aspect="auto")
    size = max(8.0, min(10.0, 120 / max(len(cols), len(rows), 1)))
    ax.set_xticks(range(len(cols)), tick_labels(cols), rotation=45, ha="right", fontsize=size)
    ax.set_yticks(range(len(rows)), tick_labels(rows), fontsize=size)
    for (i, j), value in np.ndenumerate(matrix if matrix.size <= ANNOTATED_CELLS else np.empty((0, 0))):
        if not np.isfinite(value):
            if not (matrix.shape[0] == matrix.shape[1] and i == j and list(rows) == list(cols)):
                ax.text(j, i, "–", ha="center", va="center", fontsize=size * 0.85, color="#555")
            continue
        r, g, b, _ = colormap((value - vmin) / (vmax - vmin) if vmax > vmin else 0.5)
        luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
        ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=size * 0.85,
                color="black" if luminance > 0.5 else "white")
    return image


MAX_INCHES = 30.0  # 3,000 px at DPI 100: a 500-system win-fraction matrix drawn at 0.55 in per system took 23 GB


def _grid_size(n_rows: int, n_cols: int) -> tuple[float, float]:
    return (min(MAX_INCHES, max(7.5, 3.5 + 0.55 * n_cols)), min(MAX_INCHES, max(5.0, 2.2 + 0.42 * n_rows)))


@plain_labels
def correlations(group: GroupResult):
    """Each metric's correlation with each human aspect, with resampling intervals when there
    are any (the first significance level)."""
    blocks = [b for b in group.significance if b.level != "darr"]
    plt = _plt()
    if blocks:
        level, method = blocks[0].level, blocks[0].method
        blocks = [b for b in blocks if b.level == level]
        metrics = list(blocks[0].metrics)[:MAX_ROWS]
        series = {b.human: ({i.metric: i.value for i in b.intervals}, {i.metric: i.interval for i in b.intervals})
                  for b in blocks}
        note = "95% interval of the " + ("bootstrap" if blocks[0].test == "bootstrap" else "80% subsamples")
    else:
        rows = [c for c in group.correlations if c.level == "sample"]
        if not rows:
            return None
        method = "spearman" if any(c.method == "spearman" for c in rows) else rows[0].method
        level = "sample"
        rows = [c for c in rows if c.method == method]
        metrics = list(dict.fromkeys(c.metric for c in rows))[:MAX_ROWS]
        series = {}
        for c in rows:
            series.setdefault(c.human, ({}, {}))[0][c.metric] = c.value
        note = "no resampling intervals (significance off)"
    fig, ax = plt.subplots(figsize=(9, max(4.5, 1.5 + 0.35 * len(metrics) * max(1, len(series)) ** 0.5)))
    width = 0.8 / max(len(series), 1)
    legends = tick_labels(series)
    for k, (values, intervals) in enumerate(series.values()):
        ys = np.arange(len(metrics)) + (k - (len(series) - 1) / 2) * width
        xs = np.array([values.get(m, np.nan) for m in metrics], dtype=float)
        if intervals:
            lows = np.array([intervals[m].low if m in intervals else np.nan for m in metrics], dtype=float)
            highs = np.array([intervals[m].high if m in intervals else np.nan for m in metrics], dtype=float)
            err = np.nan_to_num(np.abs(np.vstack([xs - lows, highs - xs])))
            ax.errorbar(xs, ys, xerr=err, fmt="o", ms=4, capsize=2, label=legend_label(legends[k]))
        else:
            ax.plot(xs, ys, "o", ms=4, label=legend_label(legends[k]))
    ax.set_yticks(np.arange(len(metrics)), tick_labels(metrics), fontsize=8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel(f"{method} correlation ({level} level); {note}")
    ax.legend(fontsize=8, loc="best", title="human aspect", title_fontsize=8)
    ax.set_title(titled(group.name, "metric–human correlation, every aspect"))
    fig.tight_layout()
    return fig


@plain_labels
def significance(group: GroupResult, block: SignificanceBlock):
    """Pairwise heatmap for one human aspect: p-values (bootstrap) or win shares (subsample)."""
    if len(block.metrics) < 2:
        return None
    plt = _plt()
    metrics = list(block.metrics)[:MAX_ROWS]
    n = len(metrics)
    matrix = np.full((n, n), np.nan)
    index = {m: k for k, m in enumerate(metrics)}
    for comp in block.comparisons:
        if comp.a in index and comp.b in index and comp.defined:
            value = comp.p_value if block.test != "bartscore_subsample" else comp.wins / comp.draws
            matrix[index[comp.a], index[comp.b]] = np.nan if value is None else value
    fig, ax = plt.subplots(figsize=_grid_size(n, n))
    if block.test != "bartscore_subsample":
        image = _heatmap(ax, matrix, metrics, metrics, "viridis_r", 0.0, 1.0, fmt="{:.3f}")
        label = f"two-sided p-value, row vs column\n(significant at or below {block.alpha:g}; grey: undefined)"
        test = (f"paired bootstrap, N={block.resamples}" if block.test == "bootstrap"
                else f"PERM-BOTH, {block.resamples} trials")
    else:
        image = _heatmap(ax, matrix, metrics, metrics, "viridis", 0.0, 1.0)
        label = f"share of draws the row wins\n(significant above {1 - block.alpha:g})"
        test = f"BARTScore subsample test, {block.resamples} draws"
    fig.colorbar(image, ax=ax, label=label)
    ax.set_title(titled(group.name, f"{plain(block.human)}\n{block.level} level, {block.method}; {test}"),
                 fontsize=10)
    fig.tight_layout()
    return fig


def _grouped_bars(ax, series: dict, labels: list[str]) -> None:
    width = 0.8 / max(len(series), 1)
    for k, (name, values) in enumerate(series.items()):
        offset = (k - (len(series) - 1) / 2) * width
        ax.bar(np.arange(len(labels)) + offset, [np.nan if v is None else v for v in values], width, label=name)
    ax.set_xticks(range(len(labels)), tick_labels(labels, 18), rotation=60, ha="right", fontsize=8)


@plain_labels
def checklist_system_ks(group: GroupResult, chk: ChecklistBlock):
    if not chk.system_ks:
        return None
    plt = _plt()
    columns = list(chk.columns)[:MAX_ROWS]
    kinds = list(dict.fromkeys(k.kind for k in chk.system_ks))
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(columns) + 3), 5.5))
    _grouped_bars(ax, {f"{kind} pairs": [chk.ks(kind, c) for c in columns] for kind in kinds}, columns)
    ax.set_ylabel("mean system-level KS")
    ax.set_title(titled(group.name, "checklist system-level discrimination (KS between the systems of a pair)"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@plain_labels
def checklist_aspect_ks(group: GroupResult, chk: ChecklistBlock, human: str):
    items = [a for a in chk.aspect_level if a.human == human][:MAX_ROWS]
    if not items:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(items) + 3), 5.5))
    _grouped_bars(ax, {"Lo-Hi": [a.ks_lo_hi for a in items], "Lo-Mod": [a.ks_lo_mod for a in items],
                       "Hi-Mod": [a.ks_hi_mod for a in items]}, [a.column for a in items])
    ax.set_ylabel("KS between quality groups")
    ax.set_title(titled(group.name, f"checklist aspect-level KS, quality groups of{_spaced(human)}"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@plain_labels
def preference_similarity(group: GroupResult, chk: ChecklistBlock, kind: str = "easy"):
    items = [p for p in chk.preference_similarity if p.kind == kind]
    if not items:
        return None
    plt = _plt()
    humans = list(dict.fromkeys(p.human for p in items))
    metrics = [c for c in dict.fromkeys(p.column for p in items) if c not in humans][:MAX_ROWS]
    if not metrics:
        return None
    matrix = [[chk.similarity(kind, m, h) for m in metrics] for h in humans]
    fig, ax = plt.subplots(figsize=_grid_size(len(humans), len(metrics)))
    image = _heatmap(ax, matrix, humans, metrics, "magma", 0.0, 1.0)
    fig.colorbar(image, ax=ax, label="preference similarity S")
    ax.set_title(titled(group.name, f"system-level preference similarity\nto each human aspect ({kind} pairs)"),
                 fontsize=10)
    fig.tight_layout()
    return fig


@plain_labels
def win_fractions(group: GroupResult, chk: ChecklistBlock, column: str):
    item = next((w for w in chk.win_fractions if w.column == column), None)
    if item is None:
        return None
    plt = _plt()
    n = len(item.systems)
    order = sorted(range(n), key=lambda k: natural_key(item.systems[k]))
    systems = [item.systems[k] for k in order]
    matrix = np.asarray(item.matrix, dtype=float)[np.ix_(order, order)]
    fig, ax = plt.subplots(figsize=_grid_size(n, n))
    image = _heatmap(ax, matrix, systems, systems, "RdBu", 0.0, 1.0)
    fig.colorbar(image, ax=ax, label="share of same-doc_id games\nthe row wins (ties count)")
    ax.set_title(titled(group.name, f"pairwise win fractions per doc_id\n{plain(column)}"), fontsize=10)
    fig.tight_layout()
    return fig


CLUSTER_COLORS = ("#2e7d32", "#1565c0", "#ef6c00", "#6a1b9a", "#c62828", "#00838f", "#5d4037", "#455a64")


@plain_labels
def leaderboard(comp):
    """One comparison (`meta_eval.results.SystemComparison`) as a ranked dot plot: each system's
    mean and 95 % bootstrap interval, best at the top, coloured by significance cluster
    (`meta_eval.compare.significance_clusters`), the clusters' boundaries drawn as lines."""
    from meta_eval.compare import significance_clusters

    plt = _plt()
    clusters = significance_clusters(comp)
    systems = list(comp.systems)
    fig, ax = plt.subplots(figsize=(7.0, min(MAX_INCHES, max(3.2, 1.2 + 0.32 * len(systems)))), dpi=DPI)
    # scores near 1e308 are drawn in units of a power of ten: an axis spanning -1e308..1e308 overflows
    drawn = np.abs([v for s in systems for v in (s.mean, s.interval.low, s.interval.high) if np.isfinite(v)])
    power = int(np.floor(np.log10(drawn.max()))) if len(drawn) and drawn.max() > 1e300 else 0
    for k, score in enumerate(systems):
        color = CLUSTER_COLORS[(clusters[score.system] - 1) % len(CLUSTER_COLORS)]
        low, high = score.interval.low / 10.0 ** power, score.interval.high / 10.0 ** power
        mean = score.mean / 10.0 ** power
        if np.isfinite(low) and np.isfinite(high):
            ax.plot([low, high], [k, k], color=color, linewidth=2)
        ax.plot([mean], [k], "o", color=color, markersize=6)
        if k and clusters[score.system] != clusters[systems[k - 1].system]:
            ax.axhline(k - 0.5, color="#999", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(systems)), [f"{s.rank}. {short(s.system, 20)}  (cluster {clusters[s.system]})"
                                        for s in systems], fontsize=9)
    ax.invert_yaxis()
    arrow = "lower is better" if comp.lower_is_better else "higher is better"
    unit = f" (x 1e{power})" if power else ""
    ax.set_xlabel(f"{plain(comp.column)}{unit}: mean over {comp.n_units} {comp.unit} with 95% interval ({arrow})",
                  fontsize=9)
    ax.set_title(titled(comp.dataset, f"{plain(comp.column)}, significance clusters"), fontsize=11)
    ax.grid(axis="x", color="#eee")
    fig.tight_layout()
    return fig


def save(fig, path) -> None:
    """The figure as PNG at `path` (a symlink there is replaced, `meta_eval.report.files`), then closed."""
    from meta_eval.report.files import write_figure

    try:
        with text_only():
            write_figure(fig, path, DPI)
    finally:
        _plt().close(fig)

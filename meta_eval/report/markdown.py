"""The Markdown text of a meta-evaluation report (tables through `scoring.tables`)."""

from __future__ import annotations

import html

from meta_eval.compare import comparison_markdown
from meta_eval.page_pairs import ALL_PAIRS_MAX, IN_META, shows_all_pairs
from meta_eval.results import GroupResult, MetaResult, SignificanceBlock
from scoring.display_names import cut_note
from scoring.tables import markdown_code, markdown_name, markdown_table
from scoring.tables import markdown_text as text

LEVEL_ORDER = ["sample", "document", "system"]
METHOD_ORDER = ["pearson", "spearman", "kendall", "pairwise_accuracy", "soft_pairwise_accuracy",
                "tie_calibrated_accuracy"]
TEST_NAMES = {"bootstrap": "paired bootstrap (Koehn 2004), two-sided",
              "bartscore_subsample": "BARTScore paper's subsample test (1,000 draws of 80% of the units, seed 666), "
                                     "one-sided at alpha in each direction",
              "perm_both": "PERM-BOTH permutation test (Deutsch et al. 2021, WMT metrics task), two-sided"}
SMALL_GROUP = 5  # checklist quality groups smaller than this are warned about
FOLD_ROWS = 12  # tables longer than this are folded in <details>


def names(values, empty: str = "–") -> str:
    """Names from the data as one comma-separated Markdown text (each shown by `markdown_name`)."""
    return ", ".join(markdown_name(v) for v in values) or empty


def folded(summary: str, lines: list[str], rows: int | None = None) -> list[str]:
    """`lines` inside a <details> block (closed) when `rows` is None or above FOLD_ROWS."""
    if rows is not None and rows <= FOLD_ROWS:
        return lines
    return [f"<details><summary>{html.escape(summary)}</summary>", ""] + lines + ["", "</details>", ""]


def rule_text(block: SignificanceBlock) -> str:
    """How a mark of this block is decided, in one sentence (see docs/meta_eval.md)."""
    correction = "" if block.correction == "none" else f", {block.correction} correction over the block's pairs"
    if block.test == "bartscore_subsample":
        return (f"A > B when A wins more than {(1 - block.alpha):g} of the draws{correction}; the interval of "
                f"corr A - corr B over the draws (order statistics) lies above 0 exactly then.")
    return (f"alpha {block.alpha:g}{correction}: a pair is marked when its interval of corr A - corr B excludes 0, "
            "which is the same statement as p <= alpha" + (" (p adjusted)" if correction else "") + ".")


def sign_convention(result: MetaResult) -> str:
    lower = names(result.input.lower_is_better, "none in this input")
    return ("**Sign convention.** Lower-is-better metrics (here: " + lower + ") are negated before every "
            "correlation, significance test and transfer table, so a positive correlation always means agreement "
            "with the humans and 'A > B' always means 'A agrees better'. The checklist and the system leaderboard "
            "keep each metric's own units and only flip the direction of 'better'.")


def _correlations(group: GroupResult, variant: str) -> list[str]:
    if not group.correlations:
        return []
    keys = sorted({(c.level, c.method) for c in group.correlations},
                  key=lambda k: (LEVEL_ORDER.index(k[0]), METHOD_ORDER.index(k[1])))
    rows: dict = {}
    for c in group.correlations:
        rows.setdefault((c.metric, c.human), {})[(c.level, c.method)] = c.value
    return ["### Correlations", ""] + folded(f"{len(rows)} metric-aspect rows", [
            markdown_table(["metric", "human"] + [f"{lvl} {m}" for lvl, m in keys],
                           [[m, h] + [vals.get(k) for k in keys] for (m, h), vals in rows.items()])], len(rows)) + [
            f"Kendall is tau-{variant}; document level averages per-doc_id correlations; system level correlates "
            "per-system means; pairwise_accuracy is the share of system pairs the metric orders as the humans do; "
            "soft_pairwise_accuracy (SPA) averages 1 - |p_human - p_metric| over system pairs, p the one-sided "
            "permutation p-value that one system beats the other; tie_calibrated_accuracy is the share of row pairs "
            "sharing a document that the metric orders or ties as the humans do (per document then averaged, as "
            "WMT24, unless the signature says pool), the metric tying below the threshold that maximises it "
            "(docs/pairwise_accuracy.md).", ""]


def _significance(block: SignificanceBlock) -> list[str]:
    title = f"### Significance: {markdown_name(block.human)}, {block.level} level, {block.method}"
    out = [title, "", f"Test: {TEST_NAMES[block.test]}; {rule_text(block)}", ""]
    out += [f"> **Warning:** {text(w)}." for w in block.warnings] + ([""] if block.warnings else [])
    interval_name = {"bootstrap": "bootstrap", "perm_both": "–"}.get(block.test, "subsample")
    if block.test != "perm_both":
        out.append(markdown_table(["metric", "correlation", f"95% low ({interval_name})",
                                   f"95% high ({interval_name})"],
                                  [[i.metric, i.value, i.interval.low, i.interval.high] for i in block.intervals]))
    order = {m: k for k, m in enumerate(block.metrics)}
    pairs = [c for c in block.comparisons if order[c.a] < order[c.b]]
    level = "level per pair" if block.correction != "none" else f"{100 * (pairs[0].ci_diff.level if pairs else 0.95):g}%"
    header = ["A", "B", "corr A - corr B", f"low ({level})", f"high ({level})"]
    if block.test == "bartscore_subsample":
        header += ["A wins", "B wins"]
        rows = [[c.a, c.b, c.diff, c.ci_diff.low, c.ci_diff.high, f"{c.wins}/{c.draws}",
                 f"{block.comparison(c.b, c.a).wins}/{c.draws}"] for c in pairs]
    else:
        header += ["p (two-sided)"] + (["p adjusted"] if block.correction != "none" else [])
        rows = [[c.a, c.b, c.diff, c.ci_diff.low, c.ci_diff.high, p_text(c.p_value, block.resamples)]
                + ([p_text(c.p_adjusted, block.resamples)] if block.correction != "none" else []) for c in pairs]
    rows = [row + [mark_markdown(block, c.a, c.b)] for row, c in zip(rows, pairs)]
    marked = sum(block.mark(c.a, c.b) not in ("no", "–") for c in pairs)
    shown = [None] * len(header) + [str]  # the result cell is Markdown already
    out += folded(f"{len(pairs)} pairs, {marked} marked", [markdown_table(header + ["result"], rows, formats=shown)],
                  len(pairs))
    out += folded("signature", [markdown_code(block.signature)])
    return out + [""]


def mark_markdown(block: SignificanceBlock, a: str, b: str) -> str:
    """`block.mark(a, b)` as Markdown, each name shown by `markdown_name` ("A > B" of two cut
    names still says which is ahead)."""
    mark = block.mark(a, b)
    for first, second in ((a, b), (b, a)):
        if mark == f"{first} > {second}":
            return f"{markdown_name(first)} > {markdown_name(second)}"
    return text(mark)


def p_text(p: float | None, resamples: int) -> str:
    """A p-value with as many decimals as its resolution 1/(N+1) needs ("–" when undefined)."""
    if p is None:
        return "–"
    digits = max(2, len(str(resamples + 1)))
    return f"{p:.{digits}f}"


def _summary(group: GroupResult) -> list[str]:
    """Per human aspect: the metric that agrees best, its interval, and its mark against the runner-up."""
    rows = []
    for block in group.significance:
        if block.level == "darr" or len(block.intervals) < 1:
            continue
        ranked = sorted((i for i in block.intervals if i.value == i.value), key=lambda i: -i.value)
        if not ranked:
            continue
        best = ranked[0]
        runner = ranked[1] if len(ranked) > 1 else None
        versus = mark_markdown(block, best.metric, runner.metric) if runner else "–"
        rows.append([block.human, block.level, best.metric, best.value, best.interval.low, best.interval.high,
                     runner.metric if runner else "–", versus])
    if not rows:
        return []
    return ["### Summary", "", "The metric that agrees best with each human aspect (correlation of the "
            "significance test, its 95% interval), and whether it is significantly ahead of the runner-up.", "",
            markdown_table(["human aspect", "level", "best metric", "correlation", "95% low", "95% high",
                            "runner-up", "best vs runner-up"], rows, formats=[None] * 7 + [str])]


def _checklist(group: GroupResult) -> list[str]:
    chk = group.checklist
    if chk is None:
        return []
    out = ["### Metric preference checklist", ""]
    humans = list(dict.fromkeys(a.human for a in chk.aspect_level))
    for human in humans:
        items = [a for a in chk.aspect_level if a.human == human]
        sizes = items[0]
        out += [f"Aspect level, quality groups of {markdown_name(human)} (Lo {sizes.size_lo}, Mod {sizes.size_mod}, "
                f"Hi {sizes.size_hi} rows):", ""]
        small = min(sizes.size_lo, sizes.size_mod, sizes.size_hi)
        if small < SMALL_GROUP:
            out += [f"> **Warning:** a quality group of {markdown_name(human)} has {small} row(s): a KS statistic "
                    f"over fewer than {SMALL_GROUP} rows says little.", ""]
        out += folded(f"KS per column ({len(items)} rows)",
                      [markdown_table(["column", "KS Lo-Hi", "KS Lo-Mod", "KS Hi-Mod", "preference"],
                                      [[a.column, a.ks_lo_hi, a.ks_lo_mod, a.ks_hi_mod, a.preference]
                                       for a in items])], len(items))
    if chk.system_ks:
        kinds = list(dict.fromkeys(k.kind for k in chk.system_ks))
        pairs = {"easy": chk.easy_pairs, "hard": chk.hard_pairs}
        out += [f"System pairs ({text(chk.pairs_from)}): " + "; ".join(
            f"{k}: " + ", ".join(f"({markdown_name(a)}, {markdown_name(b)})" for a, b in pairs[k]) for k in kinds), "",
            markdown_table(["column"] + [f"system KS ({k})" for k in kinds],
                           [[c] + [chk.ks(k, c) for k in kinds] for c in chk.columns])]
    easy = [p for p in chk.preference_similarity if p.kind == "easy"]
    if easy:
        sim_humans = list(dict.fromkeys(p.human for p in easy))
        out += ["Preference similarity to humans (Easy pairs):", ""]
        labels = {p.column: p.labels for p in chk.preference_labels if p.kind == "easy"}
        same = [h for h in sim_humans[1:] if labels.get(h) is not None and labels.get(h) == labels.get(sim_humans[0])]
        if same:
            out += [f"The columns of {names([sim_humans[0]] + same)} are identical because these human aspects "
                    "label every Easy system pair the same way.", ""]
        out += folded(f"preference similarity ({len(chk.columns)} rows)",
                      [markdown_table(["column"] + sim_humans,
                                      [[c] + [chk.similarity("easy", c, h) for h in sim_humans]
                                       for c in chk.columns])], len(chk.columns))
    return out


def _leaderboard(group: GroupResult) -> list[str]:
    if not group.systems:
        return []
    many = "" if all(shows_all_pairs(c) for c in group.systems) else (
        f" Above {ALL_PAIRS_MAX} systems a column shows the pairs that matter, not all of them.")
    return ["### Systems compared (leaderboard)", "",
            "Per column: mean over the documents every system has, 95% bootstrap interval, rank (best first); "
            "every pair with the two-sided paired-bootstrap p-value, the one test that decides its mark "
            "(approximate randomisation apart, for reference). The same leaderboard as a page (ranks, "
            f"significance clusters, matrix, sortable tables): `leaderboard.html`, beside this report.{many}", ""] + folded(
        f"{len(group.systems)} columns, {sum(len(c.pairs) for c in group.systems)} system pairs",
        [comparison_markdown(group.systems, pairs_in=IN_META)])


def _darr(group: GroupResult) -> list[str]:
    if not group.darr:
        return []
    return ["### WMT DARR Kendall-like tau", "",
            markdown_table(["metric", "tau", "concordant", "discordant"],
                           [[d.metric, d.value, d.concordant, d.discordant] for d in group.darr])]


def _omitted(group: GroupResult) -> list[str]:
    if not group.omitted:
        return []
    items = [f"- {text(section)}: {text(reason)}." for section, reason in group.omitted.items()]
    return ["### Left out", ""] + items + [""]


def _plots(images: list[tuple[str, str]]) -> list[str]:
    if not images:
        return []
    out = []
    for caption, path in images:
        out += [f"![{text(caption)}]({path})", "", f"*{text(caption)}*", ""]
    return ["### Plots", ""] + folded(f"{len(images)} plots", out)


def group_markdown(result: MetaResult, group: GroupResult, images: list[tuple[str, str]]) -> list[str]:
    """One dataset section, summary first; `images` are (caption, relative path) pairs. The
    sections come from `GROUP_SECTIONS` in order (one list to extend, e.g. with a leaderboard)."""
    out = [f"## Dataset {markdown_name(group.name)}", "",
           f"{group.rows} rows; human aspects: {names(group.humans)}; metrics: {names(group.metrics)}.", ""]
    for section in GROUP_SECTIONS:
        out += section(result, group, images)
    return out


GROUP_SECTIONS = [
    lambda result, group, images: _summary(group),
    lambda result, group, images: _correlations(group, result.options.variant),
    lambda result, group, images: _darr(group),
    lambda result, group, images: [line for block in group.significance for line in _significance(block)],
    lambda result, group, images: _checklist(group),
    lambda result, group, images: _leaderboard(group),
    lambda result, group, images: _omitted(group),
    lambda result, group, images: _plots(images),
]


def left_out_lines(inp) -> list[str]:
    """The rows that went into no group, per reason (`meta_eval.row_account`), or nothing."""
    if not inp.rows_left_out:
        return []
    from meta_eval.row_account import RowAccount

    (line,) = RowAccount.lines(inp.rows_used, inp.rows_left_out, indent="", first=inp.rows_left_out_first)
    return [f"**Rows {text(line)}.**", ""]


def report_markdown(result: MetaResult, images: dict[str, list[tuple[str, str]]]) -> str:
    """The whole report; `images` maps a group name to its (caption, relative path) pairs."""
    inp = result.input
    opts = result.options
    correction = getattr(opts, "correction", "none")
    out = ["# Meta-evaluation report", "",
           f"Input {markdown_code(inp.source)}: {inp.rows_in} rows, {inp.rows_error} with an error in at least one "
           "metric run (their scores on that run are excluded), "
           f"{inp.rows_skipped} skipped by a metric run that does not apply to them (not errors); "
           f"human aspects: {names(inp.humans)}; metrics: {names(inp.metrics)}.", "",
           *left_out_lines(inp),
           sign_convention(result), "",
           f"Significance test: {TEST_NAMES[opts.significance]}, alpha {opts.alpha:g}, multiple-comparison "
           f"correction: {correction}. Every mark agrees with the interval shown beside it; '–' marks a "
           "comparison that is undefined (a constant metric).", ""]
    out += folded("Signatures", [markdown_code(result.signature), ""] + ([markdown_table(
        ["metric run (columns)", "rows", "rows with error", "signature"],
        [[r.columns, r.rows, r.rows_error, "; ".join(r.signatures)[:200]] for r in inp.runs],
        formats=[None, None, None, text])] if inp.runs else []))  # a signature is cut at 200, not shown as a name
    for group in result.groups:
        out += group_markdown(result, group, images.get(group.name, []))
    if result.transfer:
        out += ["## Transfer (correlation per dataset)", ""]
        for table in result.transfer:
            out += [f"{markdown_name(table.human)} ({table.method}, sample level):", "",
                    markdown_table(["metric"] + list(table.datasets),
                                   [[m] + list(row) for m, row in zip(table.metrics, table.values)])]
    text_out = "\n".join(out) + "\n"
    note = cut_note(text_out, "`results.json` (and `leaderboard.json`)")  # first, where a reader starts
    return text_out.replace("\n", "\n" + note, 1) if note else text_out

"""The Markdown text of a meta-evaluation report (tables through `scoring.tables`)."""

from __future__ import annotations

from meta_eval.compare import comparison_markdown
from meta_eval.results import GroupResult, MetaResult, SignificanceBlock
from scoring.tables import markdown_table

LEVEL_ORDER = ["sample", "document", "system"]
METHOD_ORDER = ["pearson", "spearman", "kendall"]
TEST_NAMES = {"bootstrap": "paired bootstrap (Koehn 2004)",
              "bartscore_subsample": "BARTScore paper's subsample test (1,000 draws of 80% of the units, seed 666)"}


def sign_convention(result: MetaResult) -> str:
    lower = ", ".join(result.input.lower_is_better) or "none in this input"
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
    return ["### Correlations", "",
            markdown_table(["metric", "human"] + [f"{lvl} {m}" for lvl, m in keys],
                           [[m, h] + [vals.get(k) for k in keys] for (m, h), vals in rows.items()]),
            f"Kendall is tau-{variant}; document level averages per-doc_id correlations; system level correlates "
            "per-system means.", ""]


def _significance(block: SignificanceBlock) -> list[str]:
    title = f"### Significance: {block.human}, {block.level} level, {block.method}"
    out = [title, "", f"Test: {TEST_NAMES[block.test]}; " + (
        f"A > B marked when p < {block.alpha:g}." if block.test == "bootstrap"
        else f"A > B marked when A wins more than {(1 - block.alpha):g} of the draws."), "",
        f"`{block.signature}`", ""]
    interval_name = "bootstrap" if block.test == "bootstrap" else "subsample"
    out.append(markdown_table(["metric", "correlation", f"95% low ({interval_name})", f"95% high ({interval_name})"],
                              [[i.metric, i.value, i.interval.low, i.interval.high] for i in block.intervals]))
    order = {m: k for k, m in enumerate(block.metrics)}
    pairs = [c for c in block.comparisons if order[c.a] < order[c.b]]
    if block.test == "bootstrap":
        rows = [[c.a, c.b, c.diff, c.p_value, c.ci_diff.low, c.ci_diff.high, _mark(block, c.a, c.b)] for c in pairs]
        out.append(markdown_table(["A", "B", "corr A - corr B", "p (A > B)", "95% low", "95% high", "significant"],
                                  rows))
    else:
        rows = [[c.a, c.b, c.diff, f"{c.wins}/{c.draws}", f"{block.comparison(c.b, c.a).wins}/{c.draws}",
                 _mark(block, c.a, c.b)] for c in pairs]
        out.append(markdown_table(["A", "B", "corr A - corr B", "A wins", "B wins", "significant"], rows))
    return out + [""]


def _mark(block: SignificanceBlock, a: str, b: str) -> str:
    if block.comparison(a, b).significant:
        return f"{a} > {b}"
    if block.comparison(b, a).significant:
        return f"{b} > {a}"
    return "no"


def _checklist(group: GroupResult) -> list[str]:
    chk = group.checklist
    if chk is None:
        return []
    out = ["### Metric preference checklist", ""]
    humans = list(dict.fromkeys(a.human for a in chk.aspect_level))
    for human in humans:
        items = [a for a in chk.aspect_level if a.human == human]
        sizes = items[0]
        out += [f"Aspect level, quality groups of {human} (Lo {sizes.size_lo}, Mod {sizes.size_mod}, "
                f"Hi {sizes.size_hi} rows):", "",
                markdown_table(["column", "KS Lo-Hi", "KS Lo-Mod", "KS Hi-Mod", "preference"],
                               [[a.column, a.ks_lo_hi, a.ks_lo_mod, a.ks_hi_mod, a.preference] for a in items])]
    if chk.system_ks:
        kinds = list(dict.fromkeys(k.kind for k in chk.system_ks))
        pairs = {"easy": chk.easy_pairs, "hard": chk.hard_pairs}
        out += [f"System pairs ({chk.pairs_from}): " + "; ".join(
            f"{k}: " + ", ".join(f"({a}, {b})" for a, b in pairs[k]) for k in kinds), "",
            markdown_table(["column"] + [f"system KS ({k})" for k in kinds],
                           [[c] + [chk.ks(k, c) for k in kinds] for c in chk.columns])]
    easy = [p for p in chk.preference_similarity if p.kind == "easy"]
    if easy:
        sim_humans = list(dict.fromkeys(p.human for p in easy))
        out += ["Preference similarity to humans (Easy pairs):", "",
                markdown_table(["column"] + sim_humans,
                               [[c] + [chk.similarity("easy", c, h) for h in sim_humans] for c in chk.columns])]
    return out


def group_markdown(result: MetaResult, group: GroupResult, images: list[tuple[str, str]]) -> list[str]:
    """One dataset section; `images` are (caption, relative path) pairs."""
    out = [f"## Dataset `{group.name}`", "",
           f"{group.rows} rows; human aspects: {', '.join(group.humans) or '–'}; "
           f"metrics: {', '.join(group.metrics) or '–'}.", ""]
    out += _correlations(group, result.options.variant)
    if group.darr:
        out += ["### WMT DARR Kendall-like tau", "",
                markdown_table(["metric", "tau", "concordant", "discordant"],
                               [[d.metric, d.value, d.concordant, d.discordant] for d in group.darr])]
    for block in group.significance:
        out += _significance(block)
    out += _checklist(group)
    if group.systems:
        out += ["### Systems compared (leaderboard)", "",
                "Per column: mean over the documents every system has, 95% bootstrap interval, rank (best first); "
                "pairs with the two-sided paired-bootstrap and approximate-randomisation p-values.", "",
                comparison_markdown(group.systems)]
    if group.omitted:
        out += ["### Left out", ""] + [f"- {section}: {reason}." for section, reason in group.omitted.items()] + [""]
    if images:
        out += ["### Plots", ""]
        for caption, path in images:
            out += [f"![{caption}]({path})", ""]
    return out


def report_markdown(result: MetaResult, images: dict[str, list[tuple[str, str]]]) -> str:
    """The whole report; `images` maps a group name to its (caption, relative path) pairs."""
    inp = result.input
    opts = result.options
    out = ["# Meta-evaluation report", "", f"Signature: `{result.signature}`", "",
           f"Input `{inp.source}`: {inp.rows_in} rows, {inp.rows_error} with an error in at least one metric run "
           "(their scores on that run are excluded), "
           f"{inp.rows_skipped} skipped by a metric run that does not apply to them (not errors); "
           f"human aspects: {', '.join(inp.humans) or '–'}; metrics: {', '.join(inp.metrics)}.", "",
           sign_convention(result), "",
           f"Significance test: {TEST_NAMES[opts.significance]}, alpha {opts.alpha:g}.", ""]
    if inp.runs:
        out += [markdown_table(["metric run (columns)", "rows", "rows with error", "signature"],
                               [[r.columns, r.rows, r.rows_error, "; ".join(r.signatures)[:200]] for r in inp.runs])]
    for group in result.groups:
        out += group_markdown(result, group, images.get(group.name, []))
    if result.transfer:
        out += ["## Transfer (correlation per dataset)", ""]
        for table in result.transfer:
            out += [f"{table.human} ({table.method}, sample level):", "",
                    markdown_table(["metric"] + list(table.datasets),
                                   [[m] + list(row) for m, row in zip(table.metrics, table.values)])]
    return "\n".join(out) + "\n"

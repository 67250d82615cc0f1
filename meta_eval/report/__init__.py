"""Write a meta-evaluation report: `results.json`, `report.html` (self-contained) and `report.md`
beside it, PNG plots per dataset group, and the system leaderboard as CSV, JSON and a
self-contained page (`leaderboard.html`, the same page `ctgscore compare -o board.html` writes).

Modules: `plots` (figures), `markdown` (the report text), `html` (rendering and embedding).
Sections and plots whose data does not exist are left out, each with a one-line reason.

Names from the data are text everywhere (docs/meta_eval.md, "How reports treat data"): escaped in
the Markdown and HTML, plain text in plots, made safe as file names (`files.safe_name`); the HTML
embeds only the plots written here, and every file is written by replacing what is at its path.
"""

from __future__ import annotations

import json
import pathlib

from meta_eval.compare import comparisons_json, leaderboard_csv
from meta_eval.compare import leaderboard as leaderboard_rows
from meta_eval.page_pairs import IN_META
from meta_eval.report import plots
from meta_eval.report.files import FileNames, safe_name, subfolder, write_text
from meta_eval.report.html import render
from meta_eval.report.leaderboard import leaderboard_html
from meta_eval.report.markdown import report_markdown
from meta_eval.results import GroupResult, MetaResult, to_json_dict
from scoring.display_names import display_name

FORMATS = ("both", "html", "md")
REPORT_FILES = ("results.json", "report.md", "report.html", "leaderboard.csv", "leaderboard.json", "leaderboard.html",
                "corpus_bleu.json")


def _figures(group: GroupResult):
    """(file name, caption, figure or None) for every plot of the group; names in a caption are
    shown as a table shows them (`scoring.display_names`)."""
    dataset = display_name(group.name)
    yield "correlations.png", f"{dataset}: correlations", plots.correlations(group)
    for block in group.significance:
        name = f"significance_{safe_name(block.human.removeprefix('human_'))}_{block.level}.png"
        yield (name, f"{dataset}: significance, {display_name(block.human)}, {block.level} level",
               plots.significance(group, block))
    for comp in group.systems:
        yield (f"leaderboard_{safe_name(comp.column)}.png", f"{dataset}: leaderboard, {display_name(comp.column)}",
               plots.leaderboard(comp))
    chk = group.checklist
    if chk is None:
        return
    if chk.system_ks:
        yield "checklist_system_ks.png", f"{dataset}: checklist system-level KS", plots.checklist_system_ks(group, chk)
    for human in dict.fromkeys(a.human for a in chk.aspect_level):
        yield (f"checklist_ks_{safe_name(human.removeprefix('human_'))}.png",
               f"{dataset}: checklist aspect-level KS, {display_name(human)}",
               plots.checklist_aspect_ks(group, chk, human))
    yield ("preference_similarity.png", f"{dataset}: preference similarity (Easy pairs)",
           plots.preference_similarity(group, chk))
    shown = [c for c in group.humans if c in chk.columns][:1] + [c for c in group.metrics if c in chk.columns][:2]
    rest = [c for c in chk.columns if c not in shown and any(w.column == c for w in chk.win_fractions)]
    note = f" (plotted for the first human aspect and two metrics; the other {len(rest)} columns' win fractions " \
           "are in results.json)" if rest else ""
    for column in shown:
        yield (f"win_fractions_{safe_name(column)}.png", f"{dataset}: win fractions, {display_name(column)}{note}",
               plots.win_fractions(group, chk, column))


def _names(result: MetaResult) -> set[str]:
    """The names a report shows: datasets, human aspects, metrics and systems (a cut one gets its
    `title` on the page, `meta_eval.report.html.render`)."""
    names = {*result.input.humans, *result.input.metrics}
    for group in result.groups:
        names.add(group.name)
        for comp in group.systems:
            names.update([comp.column, *(s.system for s in comp.systems)])
        if group.checklist is not None:
            names.update(s for pair in (*group.checklist.easy_pairs, *group.checklist.hard_pairs) for s in pair)
    return names


def write_report(result: MetaResult, out_dir, fmt: str = "both", scores: str | None = None) -> dict[str, pathlib.Path]:
    """Write every file; returns name -> path. `fmt`: "both" (default), "html" or "md" for the report text.
    `scores`: the scores path the result was computed from (the signature shows it shortened);
    given, its stored BLEU/chrF statistics add the corpus-level section."""
    if fmt not in FORMATS:
        from scoring.errors import UsageError

        raise UsageError(f"report format {fmt!r}: use one of {', '.join(FORMATS)}")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = json.dumps(to_json_dict(result), indent=1, allow_nan=False) + "\n"
    paths = {"json": write_text(out / "results.json", results)}
    images: dict[str, list[tuple[str, str]]] = {}
    folders = FileNames(REPORT_FILES)  # a dataset named "report.html" (or "A" beside "a") gets a folder of its own
    for group in result.groups:
        folder = folders.claim(safe_name(group.name))
        images[group.name] = []
        names = FileNames()  # two columns whose names clash as files keep a plot each
        for name, caption, fig in _figures(group):
            if fig is None:
                continue
            name = names.claim(name.removesuffix(".png"), ".png")
            plots.save(fig, subfolder(out, folder) / name)
            images[group.name].append((caption, f"{folder}/{name}"))
            paths[f"{folder}/{name}"] = out / folder / name
    comparisons = [c for g in result.groups for c in g.systems]
    if comparisons:
        rows = leaderboard_rows(comparisons)
        paths["leaderboard_csv"] = write_text(out / "leaderboard.csv", leaderboard_csv(rows))
        # the format --previous reads
        paths["leaderboard_json"] = write_text(out / "leaderboard.json", comparisons_json(comparisons) + "\n")
        paths["leaderboard_html"] = write_text(out / "leaderboard.html", leaderboard_html(comparisons, pairs_in=IN_META))
    text = report_markdown(result, images)
    if scores is not None:
        from meta_eval.corpus_bleu import report_section  # corpus BLEU/chrF per system, from stored statistics

        text += report_section(str(scores), out, paths)
    if fmt in ("both", "md"):
        paths["md"] = write_text(out / "report.md", text)
    if fmt in ("both", "html"):
        written = [path for _, path in (pair for pairs in images.values() for pair in pairs)]
        names = _names(result)
        paths["html"] = write_text(out / "report.html", render(text, out, images=written, names=names))
    return paths

"""Which system pairs a page people read shows, when a comparison has many systems.

A comparison of n systems holds n(n-1)/2 pairs. Up to `ALL_PAIRS_MAX` systems a page shows
them all (the pairs table, the HTML matrix). Above it the all-pairs matrix no longer fits a
screen (22 px a cell: 50 systems already fill the page's 1,180 px width) and the pairs table
has over 1,225 rows nobody reads in order; at 500 systems the matrix alone made a 188 MB page.
There, a page shows the pairs that decide what the ranking says (`pairs_that_matter`, at most
2(n-1)): each system against the next one in rank (can these two be told apart?) and, for every
significance cluster after the first, the pair that opens it (the evidence for the cluster
line, `meta_eval.compare.significance_clusters`). It says in one line how many pairs it left
out and which machine output holds every pair (`left_out_line`); the JSON outputs always keep
them all.
"""

from __future__ import annotations

from typing import Mapping

from meta_eval.results import SystemComparison, SystemPair

ALL_PAIRS_MAX = 50  # systems up to which a page shows every pair

# where every pair is, per writer (Markdown: names in backticks; `where_html` for a page)
IN_META = "`leaderboard.json` beside this page (`comparisons[].pairs`) and `results.json` (`groups[].systems[].pairs`)"
IN_COMPARE = "the JSON that `ctgscore compare -o FILE.json` writes for the same scores (`comparisons[].pairs`)"
IN_LEADERBOARD = "`leaderboard.json` beside this page (`comparisons[].pairs`)"


def shows_all_pairs(comp: SystemComparison) -> bool:
    """Whether a page shows every pair of `comp` (and the HTML its matrix)."""
    return len(comp.systems) <= ALL_PAIRS_MAX


def pairs_that_matter(comp: SystemComparison, clusters: Mapping[str, int]) -> list[SystemPair]:
    """Each system against the next in rank, then for every cluster after the first the pair that
    opens it: the best-ranked system of the previous cluster that is significantly different from
    the cluster's first system (one exists by the cluster rule) when it is not the neighbour
    already. Each pair once, as the comparison stores it, ordered by the ranks of its systems."""
    by_names = {frozenset((p.a, p.b)): p for p in comp.pairs}
    order = [s.system for s in comp.systems]
    chosen: dict[frozenset, SystemPair] = {}

    def add(x: str, y: str) -> None:
        pair = by_names.get(frozenset((x, y)))
        if pair is not None:
            chosen.setdefault(frozenset((x, y)), pair)

    for upper, lower in zip(order, order[1:]):
        add(upper, lower)
    previous: list[str] = []
    current: list[str] = []
    for k, name in enumerate(order):
        if k and clusters[name] != clusters[order[k - 1]]:
            previous, current = current, []
            opener = next((m for m in previous if _separated(by_names.get(frozenset((m, name))))), None)
            if opener is not None:
                add(opener, name)
        current.append(name)
    rank = {name: k for k, name in enumerate(order)}
    return sorted(chosen.values(), key=lambda p: sorted((rank[p.a], rank[p.b])))


def _separated(pair: SystemPair | None) -> bool:
    return pair is not None and pair.better is not None


def left_out_line(shown: int, total: int, where: str) -> str:
    """The one line a page gives for the pairs it leaves out; `where` (one of the `IN_*` texts)
    names the machine output that holds every pair."""
    return (f"{total - shown:,} of {total:,} system pairs are left out of this page (more than {ALL_PAIRS_MAX} "
            f"systems); every pair is in {where}.")


def where_html(text: str) -> str:
    """One of the `IN_*` texts as HTML: escaped, each backticked name in `<code>`."""
    import html

    parts = html.escape(text).split("`")
    return "".join(f"<code>{part}</code>" if k % 2 else part for k, part in enumerate(parts))

"""Typed meta-evaluation results, and their one serialisation (`to_json_dict`).

Every statistic in `meta_eval` returns these dataclasses; reports read their fields, and
`results.json` is `to_json_dict(MetaResult)`: dataclasses become objects, tuples lists,
non-finite floats `null`, numpy scalars plain numbers. Correlations of lower-is-better metrics
are those of the negated metric (see `docs/meta_eval.md`, "Sign convention").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Interval:
    """A two-sided percentile interval."""

    low: float
    high: float
    level: float = 0.95


@dataclass(frozen=True)
class Correlation:
    """corr(metric, human) at one level with one method; `n` units used (rows, documents or systems)."""

    metric: str
    human: str
    level: str
    method: str
    value: float
    n: int
    variant: str | None = None
    n_undefined: int | None = None  # document level: documents whose correlation is undefined
    epsilon: float | None = None  # tie_calibrated_accuracy: the metric's tie threshold chosen


@dataclass(frozen=True)
class DarrTau:
    """WMT DARR Kendall-like tau of one metric over better/worse pairs."""

    metric: str
    value: float
    concordant: int
    discordant: int
    n: int


@dataclass(frozen=True)
class MetricInterval:
    """A metric's correlation on the full data and its resampling interval."""

    metric: str
    value: float
    interval: Interval


@dataclass(frozen=True)
class PairComparison:
    """Does metric `a` correlate with the human aspect better than metric `b`?

    Every test (`meta_eval.marks`): `significant` means `a` is significantly better, which holds
    exactly when `ci_diff` (the interval of corr_a - corr_b at `alpha_effective`) lies above 0.
    "bootstrap" and "perm_both": two-sided p-value (`sided`), significant when p (p_adjusted
    under a correction) <= alpha. "bartscore_subsample": `wins` of `draws` 80 % subsamples where
    corr_a > corr_b, significant when wins > (1 - alpha) * draws (one-sided in each direction);
    its p_value is the share of draws `a` does not win. `defined` is False when no resample
    has both correlations (a constant metric): no p-value, no interval, no mark.
    """

    a: str
    b: str
    corr_a: float
    corr_b: float
    diff: float
    test: str
    significant: bool
    p_value: float | None = None
    ci_a: Interval | None = None
    ci_b: Interval | None = None
    ci_diff: Interval | None = None
    n_valid: int = 0
    wins: int | None = None
    draws: int | None = None
    sided: str = "two-sided"
    alpha: float | None = None
    p_adjusted: float | None = None
    alpha_effective: float | None = None
    defined: bool = True


@dataclass(frozen=True)
class SignificanceBlock:
    """Every pairwise comparison of the metrics for one human aspect at one level."""

    human: str
    level: str
    method: str
    test: str
    alpha: float
    n_rows: int
    metrics: tuple[str, ...]
    intervals: tuple[MetricInterval, ...]
    comparisons: tuple[PairComparison, ...]  # both directions: (a, b) and (b, a)
    signature: str
    resamples: int = 0  # bootstrap resamples, or subsample draws
    sided: str = "two-sided"
    correction: str = "none"
    n_units: int = 0  # resampled units (rows, documents or pairs)
    warnings: tuple[str, ...] = ()

    def comparison(self, a: str, b: str) -> PairComparison:
        for comp in self.comparisons:
            if comp.a == a and comp.b == b:
                return comp
        raise KeyError(f"no comparison {a!r} vs {b!r}")

    def mark(self, a: str, b: str) -> str:
        """"A > B", "B > A", "no", or "–" when the comparison is undefined."""
        forward, backward = self.comparison(a, b), self.comparison(b, a)
        if not forward.defined:
            return "–"
        if forward.significant:
            return f"{a} > {b}"
        if backward.significant:
            return f"{b} > {a}"
        return "no"


@dataclass(frozen=True)
class AspectLevel:
    """Checklist aspect-level numbers of one column against the quality groups of one aspect."""

    human: str
    column: str
    ks_lo_hi: float
    ks_lo_mod: float
    ks_hi_mod: float
    preference: str | None
    size_lo: int
    size_mod: int
    size_hi: int


@dataclass(frozen=True)
class SystemKS:
    """Mean system-level KS of one column over the Easy or Hard system pairs."""

    kind: str
    column: str
    value: float


@dataclass(frozen=True)
class PreferenceSimilarity:
    """Mean preference similarity of a column's system-pair labels to a human aspect's."""

    kind: str
    column: str
    human: str
    value: float


@dataclass(frozen=True)
class PreferenceLabels:
    kind: str
    column: str
    labels: tuple[str | None, ...]  # None: a system of the pair has no finite mean (undefined)


@dataclass(frozen=True)
class WinFractions:
    """W[i][j]: share of same-doc_id comparisons system i wins against system j."""

    column: str
    systems: tuple[str, ...]
    matrix: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class ChecklistBlock:
    """The metric preference checklist of one dataset group."""

    columns: tuple[str, ...]
    lower_is_better: tuple[str, ...]
    aspect_level: tuple[AspectLevel, ...]
    pairs_from: str | None = None
    easy_pairs: tuple[tuple[str, str], ...] = ()
    hard_pairs: tuple[tuple[str, str], ...] = ()
    system_ks: tuple[SystemKS, ...] = ()
    preference_labels: tuple[PreferenceLabels, ...] = ()
    preference_similarity: tuple[PreferenceSimilarity, ...] = ()
    win_fractions: tuple[WinFractions, ...] = ()

    def ks(self, kind: str, column: str) -> float:
        for item in self.system_ks:
            if item.kind == kind and item.column == column:
                return item.value
        raise KeyError(f"no {kind} system KS for {column!r}")

    def similarity(self, kind: str, column: str, human: str) -> float:
        for item in self.preference_similarity:
            if (item.kind, item.column, item.human) == (kind, column, human):
                return item.value
        raise KeyError(f"no {kind} preference similarity for {column!r} vs {human!r}")

    def aspect(self, human: str, column: str) -> AspectLevel:
        for item in self.aspect_level:
            if item.human == human and item.column == column:
                return item
        raise KeyError(f"no aspect-level result for {column!r} on {human!r}")


@dataclass(frozen=True)
class TransferTable:
    """Sample-level correlation of each metric with one human aspect, per dataset."""

    human: str
    method: str
    datasets: tuple[str, ...]
    metrics: tuple[str, ...]
    values: tuple[tuple[float, ...], ...]  # [metric][dataset]


@dataclass(frozen=True)
class SystemScore:
    """One system's mean of a score column over the paired units, with its bootstrap interval."""

    system: str
    mean: float
    interval: Interval
    rank: int


@dataclass(frozen=True)
class SystemPair:
    """System `a` vs system `b` on one score column (differences of the oriented column)."""

    a: str
    b: str
    mean_a: float
    mean_b: float
    diff: float  # mean_a - mean_b in the column's units
    ci_diff: Interval
    p_bootstrap: float | None
    p_randomization: float | None
    better: str | None  # the significantly better system at alpha, else None


@dataclass(frozen=True)
class SystemComparison:
    """Every system on one score column of one dataset, paired by a unit column (doc_id)."""

    dataset: str
    column: str
    lower_is_better: bool
    unit: str
    n_units: int
    n_units_dropped: int
    systems: tuple[SystemScore, ...]
    pairs: tuple[SystemPair, ...]
    signature: str


@dataclass(frozen=True)
class LeaderboardRow:
    dataset: str
    column: str
    system: str
    mean: float
    low: float
    high: float
    rank: int
    n_units: int
    lower_is_better: bool


@dataclass
class GroupResult:
    """Every number for one dataset group, and the sections left out with the reason."""

    name: str
    rows: int
    humans: list[str]
    metrics: list[str]
    levels: list[str]
    correlations: list[Correlation] = field(default_factory=list)
    darr: list[DarrTau] = field(default_factory=list)
    significance: list[SignificanceBlock] = field(default_factory=list)
    checklist: ChecklistBlock | None = None
    systems: list[SystemComparison] = field(default_factory=list)
    omitted: dict[str, str] = field(default_factory=dict)  # section -> one-line reason

    def correlation(self, metric: str, human: str, level: str, method: str) -> Correlation:
        for item in self.correlations:
            if (item.metric, item.human, item.level, item.method) == (metric, human, level, method):
                return item
        raise KeyError(f"no {level} {method} correlation of {metric!r} with {human!r}")


@dataclass(frozen=True)
class MetricRun:
    """One metric run of the input (shards sharing score columns): rows, error rows, signatures."""

    columns: str
    rows: int
    rows_error: int
    signatures: tuple[str, ...]


@dataclass(frozen=True)
class InputSummary:
    source: str
    rows_in: int
    rows_error: int
    humans: tuple[str, ...]
    metrics: tuple[str, ...]
    lower_is_better: tuple[str, ...]
    datasets: tuple[str, ...]
    runs: tuple[MetricRun, ...] = ()
    rows_skipped: int = 0  # rows some metric run does not apply to (their scores there are null, not errors)
    rows_used: int | None = None  # rows in some group; rows_in = rows_used + sum(rows_left_out.values())
    rows_left_out: dict[str, int] = field(default_factory=dict)  # reason ("no dataset") -> rows in no group
    rows_left_out_first: dict[str, str] = field(default_factory=dict)  # reason -> where its first row is


@dataclass
class MetaResult:
    signature: str
    options: Any
    input: InputSummary
    groups: list[GroupResult]
    transfer: list[TransferTable] = field(default_factory=list)

    def group(self, name: str) -> GroupResult:
        for group in self.groups:
            if group.name == name:
                return group
        raise KeyError(f"no dataset group {name!r}")


def to_json_dict(obj: Any) -> Any:
    """The JSON form of a result: the one place results are serialised."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_json_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj) if isinstance(obj, (set, frozenset)) else obj
        return [to_json_dict(v) for v in items]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj

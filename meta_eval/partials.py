"""Per-(dataset, unit, system) sums and counts of score columns, computed where the rows are.

A system comparison needs, per dataset and score column, the (units x systems) table of
per-unit means (`meta_eval.compare`). That table is a sum and a count per cell, so it is built
from partial sums: `file_partial` reads one Parquet file (only the unit, system, dataset, error
and wanted score columns), groups its rows by (dataset, unit, system) and returns the sums and
counts of the finite-or-infinite (non-NaN) scores of the rows without an error, as small arrays.
Rows without a system or unit (null, NaN, blank: `meta_eval.row_account`), and rows with a key
that is not valid UTF-8, go into no cell and are counted per (dataset, reason), the first row of
each reason named (file, column, row in it); `GridAccumulator.account` says where every row went.
`GridAccumulator` folds partials into one table of cells on the driver; its memory follows the
number of cells, not the number of rows or the columns a dump carries.

Determinism: the accumulator adds each cell's partial sums in the order the partials are added
(a left fold, whatever the compaction points), so reading the files in one process or in any
number of Ray tasks gives bit-identical sums when the partials are added in file order.
NaN scores are left out of a cell's mean (as pandas' mean skips them); an infinite score makes
the cell non-finite, so its unit is dropped like a missing one.

Overflow: beside each sum a cell carries its sum times 2^-64 (`SCALE`): a file's sums times
SCALE (exact, a power of two), or, for a column where a file's own sum overflowed, the sum of
its scores times SCALE, added in the same order; folded like the sums. Where the plain sum of
finite scores overflows (several rows of a cell near 1e308) the mean is the scaled sum / count
x 2^64, and the plain sum is used everywhere else (tiny scores, which the scaled copy would push
into subnormals, keep every bit). Rows are summed a second time only in a file that overflows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from meta_eval.row_account import (
    RowAccount,
    is_missing,
    no_key,
    undecodable_dictionary,
    unreadable_reason,
    unreadable_where,
)
from scoring.errors import InputError

_SYSTEM_BITS, _UNIT_BITS, _DATASET_BITS = 16, 32, 15
SCALE = 2.0 ** -64  # the scaled sums' factor: |score| <= 1.8e308 times 2^-64, summed over < 2^63 rows, stays finite


@dataclass(frozen=True)
class PartialSpec:
    """What to aggregate: per metric-run label, (column in its files, output name) pairs."""

    runs: dict[str, tuple[tuple[str, str], ...]]
    unit: str = "doc_id"
    system: str = "system"
    dataset: str = "dataset"
    error: str = "error"

    @property
    def outputs(self) -> list[str]:
        return [name for pairs in self.runs.values() for _, name in pairs]


@dataclass
class Partial:
    """One file's cells: local key tables and (cells, columns) sums / non-NaN counts."""

    label: str
    datasets: list
    units: list
    systems: list
    keys: np.ndarray  # (cells, 3) int64 indices into datasets, units, systems
    sums: np.ndarray  # (cells, columns of the run)
    counts: np.ndarray  # (cells, columns of the run)
    scaled_sums: np.ndarray  # (cells, columns of the run): the sums of score x SCALE
    rows: int = 0
    error_rows: int = 0
    key_rows: dict = field(default_factory=dict)  # (dataset, reason or None when kept) -> rows
    first: dict = field(default_factory=dict)  # reason -> where its first row is (keys not valid UTF-8)
    # reason -> where its first row is, for a missing key: as counted when some row of the dump
    # has a dataset (a row without one: "no dataset"), and when none has
    first_if_named: dict = field(default_factory=dict)
    first_if_unnamed: dict = field(default_factory=dict)


def _open(path: str, storage_options: dict | None):
    from scoring.s3_filesystem import url_to_fs

    fs, root = url_to_fs(path, storage_options)
    return fs.open(root, "rb")


def _codes(column) -> tuple[np.ndarray, list, np.ndarray | None]:
    """Integer codes of one key column, its distinct values (None for a null, or a value that is
    not valid UTF-8) and which rows hold a value that is not valid UTF-8 (None when none does)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(array.type):
        array = pc.dictionary_encode(array)
    unreadable = None
    try:
        uniques = array.dictionary.to_pylist()
    except UnicodeDecodeError:  # some value is not text: it names no group (never decoded with replacements)
        wrong, unreadable = undecodable_dictionary(array)
        uniques = [None if bad else value.as_py() for value, bad in zip(array.dictionary, wrong)]
    indices = array.indices
    if indices.null_count:
        indices = indices.fill_null(len(uniques))
        uniques.append(None)
    codes = indices.to_numpy(zero_copy_only=False).astype(np.int64)
    missing = [is_missing(u) for u in uniques]  # NaN ids and blank strings name no group either
    if any(missing):
        kept = [u for u, bad in zip(uniques, missing) if not bad]
        remap = np.cumsum([not bad for bad in missing]) - 1
        remap[np.array(missing)] = len(kept)
        codes, uniques = remap[codes].astype(np.int64), kept + [None]
    return codes, uniques, unreadable


def _float_values(column, path: str, name: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_dictionary(kind):  # a dictionary-encoded column: its values decide
        column, kind = column.cast(kind.value_type), kind.value_type
    if pa.types.is_boolean(kind) or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                         or pa.types.is_null(kind)):
        raise InputError(f"{path}: column {name!r} is not numeric (type {kind})")
    if pa.types.is_integer(kind):  # float64 holds every integer up to 2**53, not all beyond
        values = column.to_numpy(zero_copy_only=False) if not column.null_count else \
            pc.fill_null(column, 0).to_numpy(zero_copy_only=False)
        big = (values > 2**53) | (values < -(2**53))
        if big.any():
            row = int(np.flatnonzero(big)[0])
            raise InputError(f"{path}: column {name!r}, row {row}: integer {values[row]} is beyond float64's exact "
                             f"range (|value| <= 2**53); store the column as float64 if rounding it is acceptable")
    return pc.cast(column, pa.float64()).to_numpy()  # nulls become NaN


def file_partial(spec: PartialSpec, label: str, path: str, storage_options: dict | None = None) -> Partial:
    """Sums and non-NaN counts per (dataset, unit, system) of one file of metric run `label`:
    the key columns as integer codes (string keys read dictionary-encoded), one combined key per
    row, `np.unique` + `np.bincount` in row order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scoring.parquet_read import read_parquet_here
    from scoring.utf8_text import binary_as_text

    pairs = spec.runs[label]
    with _open(path, storage_options) as handle:
        try:
            fields = pq.read_schema(handle)
            handle.seek(0)
            names = set(fields.names)
            for needed in (spec.unit, spec.system, *(col for col, _ in pairs)):
                if needed not in names:
                    from scoring.display_names import quoted, quoted_list

                    error = InputError(f"{path}: column {quoted(needed)} not found (have: {quoted_list(sorted(names), 50)})")
                    error.missing_column = needed  # the CLI makes a column the user named (`--unit`) a usage error
                    raise error
            keys = [spec.dataset] if spec.dataset in names else []
            keys += [spec.unit, spec.system]
            wanted = keys + [c for c in [spec.error] + [col for col, _ in pairs] if c in names and c not in keys]
            strings = [k for k in keys if pa.types.is_string(fields.field(k).type)
                       or pa.types.is_large_string(fields.field(k).type)]
            table = read_parquet_here(handle, columns=list(dict.fromkeys(wanted)), read_dictionary=strings)
            for key in dict.fromkeys(keys):  # a Parquet binary key: the text it holds (the bytes of the rest left out)
                table = table.set_column(table.column_names.index(key), key, binary_as_text(table[key]))
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unreadable file is named
            raise InputError(f"{path}: cannot read it as Parquet ({type(exc).__name__}: {exc})") from None
    rows = table.num_rows
    failed = table[spec.error].is_valid().to_numpy(zero_copy_only=False) if spec.error in names \
        else np.zeros(rows, bool)
    if spec.dataset in names:
        d_codes, datasets, d_bad = _codes(table[spec.dataset])
    else:
        d_codes, datasets, d_bad = np.zeros(rows, np.int64), [None], None
    u_codes, units, u_bad = _codes(table[spec.unit])
    s_codes, systems, s_bad = _codes(table[spec.system])
    systems = [None if s is None else str(s) for s in systems]
    keep = np.ones(rows, bool)
    reason = np.full(rows, -1, np.int64)  # -1: kept; else the index in `reasons` of the first that applies
    reasons = []
    unreadable = [(name, bad) for name, bad in ((spec.dataset, d_bad), (spec.system, s_bad), (spec.unit, u_bad))
                  if bad is not None]
    checks = [(unreadable_reason(name), name, bad) for name, bad in unreadable]
    checks += [(no_key(spec.system), spec.system, s_codes == systems.index(None) if None in systems else None),
               (no_key(spec.unit), spec.unit, u_codes == units.index(None) if None in units else None)]
    # the first row of each reason, from the masks below (no other pass): keys not UTF-8 always;
    # a missing system or unit as counted when no row has a dataset, and when some row has one
    # (then a row without a dataset counts as "no dataset" first: `GridAccumulator.account`)
    first, if_named, if_unnamed = {}, {}, {}
    d_missing = d_codes == datasets.index(None) if None in datasets else None
    readable = None  # rows no key not valid UTF-8 took
    for index, (why, column, rows_hit) in enumerate(checks):  # unreadable keys first, then missing ones (docs/meta_eval.md)
        if readable is None and index >= len(unreadable):  # the first missing-key check (a column may be named "no x")
            readable = keep.copy()
        if rows_hit is None:
            continue
        hit = keep & rows_hit
        if readable is None:
            _name_first(first, why, hit, path, column)
        else:
            _name_first(if_unnamed, why, hit, path, column)
            _name_first(if_named, why, hit if d_missing is None else hit & ~d_missing, path, column)
        reason[hit] = len(reasons)
        reasons.append(why)
        keep &= ~hit
    if d_missing is not None:
        _name_first(if_named, no_key(spec.dataset), d_missing if readable is None else d_missing & readable,
                    path, spec.dataset)
    n = len(reasons) + 1
    per_key = np.bincount(d_codes * n + reason + 1, minlength=n * len(datasets))  # (dataset, kept / reason)
    key_rows = {}  # added up: two checks can give one reason ("no d key not valid UTF-8" for unit "no d" or system "d key ...")
    for k in np.flatnonzero(per_key):
        slot = (datasets[k // n], None if k % n == 0 else reasons[k % n - 1])
        key_rows[slot] = key_rows.get(slot, 0) + int(per_key[k])
    key = ((d_codes * len(systems) + s_codes) * len(units) + u_codes)[keep]
    space = len(datasets) * len(systems) * len(units)
    if space <= max(4 * len(key), 1 << 16):  # dense key space: no sort needed
        cells = np.flatnonzero(np.bincount(key, minlength=space))
        position = np.zeros(space, np.int64)
        position[cells] = np.arange(len(cells))
        inverse = position[key]
    else:
        cells, inverse = np.unique(key, return_inverse=True)
        inverse = inverse.ravel()
    sums = np.zeros((len(cells), len(pairs)))
    scaled = np.zeros((len(cells), len(pairs)))
    counts = np.zeros((len(cells), len(pairs)), dtype=np.int64)
    for k, (col, _) in enumerate(pairs):
        values = _float_values(table[col], path, col)[keep]
        valid = ~(np.isnan(values) | failed[keep])
        kept = np.where(valid, values, 0.0)
        sums[:, k] = np.bincount(inverse, kept, len(cells))
        scaled[:, k] = sums[:, k] * SCALE if np.isfinite(sums[:, k]).all() \
            else np.bincount(inverse, kept * SCALE, len(cells))  # the rows again only where a sum overflowed
        counts[:, k] = np.bincount(inverse, valid, len(cells))
    u, rest = cells % len(units), cells // len(units)
    key_array = np.column_stack([rest // len(systems), u, rest % len(systems)]).astype(np.int64)
    return Partial(label, datasets, units, systems, key_array, sums, counts, scaled, rows, int(failed.sum()), key_rows,
                   first, if_named, if_unnamed)


def _name_first(first: dict, reason: str, hit: np.ndarray, path: str, column: str) -> None:
    """`first[reason]`: where the first row of `hit` is in file `path` (`unreadable_where`), if any."""
    rows = np.flatnonzero(hit)
    if len(rows):
        first[reason] = unreadable_where(path, column, int(rows[0]))


def partials_task(shared: tuple[PartialSpec, dict | None], items: list) -> list[Partial]:
    """Runner task (`meta_eval.runner`): one partial per (label, path) item."""
    spec, storage_options = shared
    return [file_partial(spec, label, path, storage_options) for label, path in items]


@dataclass
class UnitGrid:
    """One (dataset, column): per-unit means (units x systems, NaN where a cell has no value)."""

    dataset: str
    column: str
    units: list
    systems: list[str]
    means: np.ndarray


@dataclass
class GridAccumulator:
    """The fold of partials: global key tables and one row of sums / counts per cell."""

    columns: list[str]
    dataset_column: str = "dataset"
    system_column: str = "system"
    unit_column: str = "doc_id"
    datasets: dict = field(default_factory=dict)
    units: dict = field(default_factory=dict)
    systems: dict = field(default_factory=dict)
    rows: int = 0  # summed over the runs (metric folders) read
    error_rows: int = 0
    run_rows: dict = field(default_factory=dict)  # run label -> rows read in it
    run_keys: dict = field(default_factory=dict)  # run label -> {(dataset, reason or None): rows}
    run_first: dict = field(default_factory=dict)  # run label -> {reason: where its first row is}
    run_first_if_named: dict = field(default_factory=dict)  # the same for missing keys (`Partial.first_if_named`)
    run_first_if_unnamed: dict = field(default_factory=dict)
    _codes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    _sums: np.ndarray | None = None
    _counts: np.ndarray | None = None
    _pending: list = field(default_factory=list)
    _pending_cells: int = 0

    def __post_init__(self):
        self._sums = np.zeros((0, len(self.columns)))
        self._scaled = np.zeros((0, len(self.columns)))
        self._counts = np.zeros((0, len(self.columns)), dtype=np.int64)

    @staticmethod
    def _global(table: dict, values: list) -> np.ndarray:
        return np.array([table.setdefault(v, len(table)) for v in values], dtype=np.int64)

    def add(self, part: Partial, spec: PartialSpec) -> None:
        """Fold one partial in (call in file order for reproducible sums)."""
        self.rows += part.rows
        self.error_rows += part.error_rows
        self.run_rows[part.label] = self.run_rows.get(part.label, 0) + part.rows
        keys = self.run_keys.setdefault(part.label, {})
        for key, n in part.key_rows.items():
            keys[key] = keys.get(key, 0) + n
        for firsts, found in ((self.run_first, part.first), (self.run_first_if_named, part.first_if_named),
                              (self.run_first_if_unnamed, part.first_if_unnamed)):
            for why, where in found.items():  # files in order: the first file's row is named
                firsts.setdefault(part.label, {}).setdefault(why, where)
        for name in part.datasets:  # a dataset only rows without a system carry still counts as named
            self.datasets.setdefault(name, len(self.datasets))
        if not len(part.keys):
            return
        d = self._global(self.datasets, part.datasets)[part.keys[:, 0]]
        u = self._global(self.units, part.units)[part.keys[:, 1]]
        s = self._global(self.systems, part.systems)[part.keys[:, 2]]
        if len(self.systems) >= 1 << _SYSTEM_BITS or len(self.units) >= 1 << _UNIT_BITS \
                or len(self.datasets) >= 1 << _DATASET_BITS:
            raise InputError(f"too many systems, units or datasets to compare "
                             f"({len(self.systems)}, {len(self.units)}, {len(self.datasets)})")
        codes = (d << (_UNIT_BITS + _SYSTEM_BITS)) | (u << _SYSTEM_BITS) | s
        sums = np.zeros((len(codes), len(self.columns)))
        scaled = np.zeros((len(codes), len(self.columns)))
        counts = np.zeros((len(codes), len(self.columns)), dtype=np.int64)
        where = [self.columns.index(name) for _, name in spec.runs[part.label]]
        sums[:, where] = part.sums
        scaled[:, where] = part.scaled_sums
        counts[:, where] = part.counts
        self._pending.append((codes, sums, counts, scaled))
        self._pending_cells += len(codes)
        if self._pending_cells > max(2 * len(self._codes), 1 << 18):
            self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        codes = np.concatenate([self._codes] + [p[0] for p in self._pending])
        sums = np.concatenate([self._sums] + [p[1] for p in self._pending])
        counts = np.concatenate([self._counts] + [p[2] for p in self._pending])
        scaled = np.concatenate([self._scaled] + [p[3] for p in self._pending])
        self._pending, self._pending_cells = [], 0
        self._codes, inverse = np.unique(codes, return_inverse=True)
        inverse = inverse.ravel()
        n = len(self._codes)

        def folded(values: np.ndarray) -> np.ndarray:  # bincount adds in input order: the running sums, then each partial
            return np.column_stack([np.bincount(inverse, values[:, k], n) for k in range(values.shape[1])]) \
                if values.shape[1] else np.zeros((n, 0))

        self._sums, self._scaled = folded(sums), folded(scaled)
        self._counts = folded(counts).astype(np.int64)

    @property
    def input_rows(self) -> int:
        """Rows of the input: every run holds one row per input row, so the largest run's count
        (not the sum over runs, which counts each row once per metric)."""
        return max(self.run_rows.values(), default=0)

    @property
    def account(self) -> RowAccount:
        """Where the input rows went (`meta_eval.row_account`), counted on the run with the most
        rows (every run carries the same keys): rows with a key not valid UTF-8 (dataset, system,
        unit), then rows without a dataset when others have one (they form no grid), then rows
        without a system, then without a unit."""
        if not self.run_rows:
            return RowAccount(0, 0, {})
        label = max(self.run_rows, key=lambda name: self.run_rows[name])
        named = any(name is not None for name in self.datasets)
        left_out: dict[str, int] = {}
        used = 0
        unreadable = [unreadable_reason(name) for name in (self.dataset_column, self.system_column, self.unit_column)]
        for (dataset, reason), n in self.run_keys.get(label, {}).items():
            if named and dataset is None and reason not in unreadable:
                reason = no_key(self.dataset_column)
            if reason is None:
                used += n
            else:
                left_out[reason] = left_out.get(reason, 0) + n
        order = unreadable + [no_key(self.dataset_column), no_key(self.system_column), no_key(self.unit_column)]
        left_out = {reason: left_out[reason] for reason in order if reason in left_out}
        named_first = (self.run_first_if_named if named else self.run_first_if_unnamed).get(label, {})
        found = {**self.run_first.get(label, {}), **named_first}
        first = {reason: found[reason] for reason in left_out if reason in found}
        return RowAccount(self.run_rows[label], used, left_out, first)

    @property
    def n_cells(self) -> int:
        self._compact()
        return len(self._codes)

    def all_systems(self) -> list[str]:
        return sorted(s for s in self.systems if s is not None)  # rows without one are counted in `account`

    def grids(self) -> list[UnitGrid]:
        """Per dataset (sorted; rows without a dataset are left out when others have one,
        counted in `account`, and form the dataset "all" when none has) and column: units
        sorted, systems sorted."""
        import pandas as pd

        self._compact()
        datasets = list(self.datasets)
        d_code = self._codes >> (_UNIT_BITS + _SYSTEM_BITS)
        u_code = (self._codes >> _SYSTEM_BITS) & ((1 << _UNIT_BITS) - 1)
        s_code = self._codes & ((1 << _SYSTEM_BITS) - 1)
        named = [k for k, name in enumerate(datasets) if name is not None]
        if named:
            groups = sorted(((datasets[k], [k]) for k in named), key=lambda g: g[0])
            groups = [(str(name), codes) for name, codes in groups]
        else:
            groups = [("all", list(range(len(datasets))))]
        unit_values = list(self.units)
        system_values = list(self.systems)
        out = []
        for name, codes in groups:
            rows = np.isin(d_code, codes)
            cell_units, cell_systems = u_code[rows], s_code[rows]
            present_units = np.unique(cell_units)
            order = np.asarray(pd.Index([unit_values[k] for k in present_units]).argsort())
            present_units = present_units[order]
            present_systems = np.unique(cell_systems)
            sys_names = [system_values[k] for k in present_systems]
            sys_order = np.argsort(np.array(sys_names, dtype=object), kind="stable")
            present_systems = present_systems[sys_order]
            row_of = np.full(len(unit_values), -1, np.int64)
            row_of[present_units] = np.arange(len(present_units))
            col_of = np.full(len(system_values), -1, np.int64)
            col_of[present_systems] = np.arange(len(present_systems))
            r, c = row_of[cell_units], col_of[cell_systems]
            sums, counts, scaled = self._sums[rows], self._counts[rows], self._scaled[rows]
            for k, column in enumerate(self.columns):
                means = np.full((len(present_units), len(present_systems)), np.nan)
                cell = cell_means(sums[:, k], scaled[:, k], counts[:, k])
                means[r, c] = cell
                out.append(UnitGrid(name, column, [unit_values[k] for k in present_units],
                                    [system_values[k] for k in present_systems], means))
        return out


def cell_means(sums: np.ndarray, scaled: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """sum / count per cell (NaN where nothing was counted); where the plain sum overflowed but
    its scaled copy did not (finite scores near 1e308), scaled sum / count / SCALE: the mean of
    finite scores is finite. A cell holding an infinite score stays non-finite."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        n = np.maximum(counts, 1)
        plain = sums / n
        rescued = (scaled / n) / SCALE
        mean = np.where(np.isfinite(sums) | ~np.isfinite(scaled), plain, rescued)
    return np.where(counts > 0, mean, np.nan)


def accumulate(spec: PartialSpec, items: Sequence[tuple[str, str]], runner=None, width: int = 1,
               storage_options: dict | None = None, progress=None) -> GridAccumulator:
    """Partials of every (label, path) item through `runner`, `width` items per call, folded in
    item order (so the sums do not depend on the runner or the width)."""
    from meta_eval.runner import local_runner

    run = runner or local_runner
    acc = GridAccumulator(spec.outputs, spec.dataset, spec.system, spec.unit)
    items = list(items)
    width = max(1, int(width))
    for start in range(0, len(items), width):
        for part in run(partials_task, (spec, storage_options), items[start:start + width]):
            acc.add(part, spec)
        if progress is not None:
            progress(min(start + width, len(items)), len(items))
    return acc

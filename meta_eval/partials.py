"""Per-(dataset, unit, system) sums and counts of score columns, computed where the rows are.

A system comparison needs, per dataset and score column, the (units x systems) table of
per-unit means (`meta_eval.compare`). That table is a sum and a count per cell, so it is built
from partial sums: `file_partial` reads one Parquet file (only the unit, system, dataset, error
and wanted score columns), groups its rows by (dataset, unit, system) and returns the sums and
counts of the finite-or-infinite (non-NaN) scores of the rows without an error, as small arrays.
`GridAccumulator` folds partials into one table of cells on the driver; its memory follows the
number of cells, not the number of rows or the columns a dump carries.

Determinism: the accumulator adds each cell's partial sums in the order the partials are added
(a left fold, whatever the compaction points), so reading the files in one process or in any
number of Ray tasks gives bit-identical sums when the partials are added in file order.
NaN scores are left out of a cell's mean (as pandas' mean skips them); an infinite score makes
the cell non-finite, so its unit is dropped like a missing one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from scoring.errors import InputError

_SYSTEM_BITS, _UNIT_BITS, _DATASET_BITS = 16, 32, 15


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
    rows: int = 0
    error_rows: int = 0


def _open(path: str, storage_options: dict | None):
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **dict(storage_options or {}))
    return fs.open(root, "rb")


def file_partial(spec: PartialSpec, label: str, path: str, storage_options: dict | None = None) -> Partial:
    """Sums and counts per (dataset, unit, system) of one file of metric run `label`."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    pairs = spec.runs[label]
    with _open(path, storage_options) as handle:
        try:
            names = set(pq.read_schema(handle).names)
            handle.seek(0)
            for needed in (spec.unit, spec.system, *(col for col, _ in pairs)):
                if needed not in names:
                    raise InputError(f"{path}: column {needed!r} not found (have: {', '.join(sorted(names))})")
            wanted = [spec.unit, spec.system] + [c for c in (spec.dataset, spec.error) if c in names]
            wanted += [col for col, _ in pairs if col not in wanted]
            table = pq.read_table(handle, columns=wanted, use_threads=False, pre_buffer=False)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unreadable file is named
            raise InputError(f"{path}: cannot read it as Parquet ({type(exc).__name__}: {exc})") from None
    rows = table.num_rows
    failed = pc.is_valid(table[spec.error]) if spec.error in names else pa.repeat(False, rows)
    keep = pc.and_(pc.is_valid(table[spec.unit]), pc.is_valid(table[spec.system]))
    columns = {"d": table[spec.dataset] if spec.dataset in names else pa.nulls(rows, pa.string()),
               "u": table[spec.unit], "s": pc.cast(table[spec.system], pa.string())}
    for k, (col, _) in enumerate(pairs):
        values = table[col]
        if pa.types.is_boolean(values.type) or not (pa.types.is_integer(values.type)
                                                    or pa.types.is_floating(values.type)
                                                    or pa.types.is_null(values.type)):
            raise InputError(f"{path}: column {col!r} is not numeric (type {values.type})")
        values = pc.cast(values, pa.float64())
        columns[f"c{k}"] = pc.if_else(pc.or_(failed, pc.is_nan(values)), pa.scalar(None, pa.float64()), values)
    flat = pa.table(columns).filter(keep)
    grouped = flat.group_by(["d", "u", "s"], use_threads=False).aggregate(
        [(f"c{k}", fn) for k in range(len(pairs)) for fn in ("sum", "count")])
    keys, uniques = [], []
    for key in ("d", "u", "s"):
        encoded = pc.dictionary_encode(grouped[key], null_encoding="encode").combine_chunks()
        uniques.append(encoded.dictionary.to_pylist())
        keys.append(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64))
    n = grouped.num_rows
    sums = np.zeros((n, len(pairs)))
    counts = np.zeros((n, len(pairs)), dtype=np.int64)
    for k in range(len(pairs)):
        sums[:, k] = grouped[f"c{k}_sum"].to_numpy(zero_copy_only=False)
        counts[:, k] = grouped[f"c{k}_count"].to_numpy(zero_copy_only=False)
    sums[counts == 0] = 0.0  # a sum over no value is null in Arrow
    key_array = np.column_stack(keys) if n else np.empty((0, 3), np.int64)
    return Partial(label, uniques[0], uniques[1], uniques[2], key_array, sums, counts, rows,
                   int(pc.sum(failed).as_py() or 0))


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
    datasets: dict = field(default_factory=dict)
    units: dict = field(default_factory=dict)
    systems: dict = field(default_factory=dict)
    rows: int = 0
    error_rows: int = 0
    _codes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    _sums: np.ndarray | None = None
    _counts: np.ndarray | None = None
    _pending: list = field(default_factory=list)
    _pending_cells: int = 0

    def __post_init__(self):
        self._sums = np.zeros((0, len(self.columns)))
        self._counts = np.zeros((0, len(self.columns)), dtype=np.int64)

    @staticmethod
    def _global(table: dict, values: list) -> np.ndarray:
        return np.array([table.setdefault(v, len(table)) for v in values], dtype=np.int64)

    def add(self, part: Partial, spec: PartialSpec) -> None:
        """Fold one partial in (call in file order for reproducible sums)."""
        self.rows += part.rows
        self.error_rows += part.error_rows
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
        counts = np.zeros((len(codes), len(self.columns)), dtype=np.int64)
        where = [self.columns.index(name) for _, name in spec.runs[part.label]]
        sums[:, where] = part.sums
        counts[:, where] = part.counts
        self._pending.append((codes, sums, counts))
        self._pending_cells += len(codes)
        if self._pending_cells > max(2 * len(self._codes), 1 << 18):
            self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        codes = np.concatenate([self._codes] + [p[0] for p in self._pending])
        sums = np.concatenate([self._sums] + [p[1] for p in self._pending])
        counts = np.concatenate([self._counts] + [p[2] for p in self._pending])
        self._pending, self._pending_cells = [], 0
        self._codes, inverse = np.unique(codes, return_inverse=True)
        inverse = inverse.ravel()
        n = len(self._codes)
        # bincount adds in input order: the running sums first, then each partial in turn
        self._sums = np.column_stack([np.bincount(inverse, sums[:, k], n) for k in range(sums.shape[1])]) \
            if sums.shape[1] else np.zeros((n, 0))
        self._counts = np.column_stack([np.bincount(inverse, counts[:, k], n).astype(np.int64)
                                        for k in range(counts.shape[1])]) if counts.shape[1] else \
            np.zeros((n, 0), np.int64)

    @property
    def n_cells(self) -> int:
        self._compact()
        return len(self._codes)

    def all_systems(self) -> list[str]:
        return sorted(self.systems)

    def grids(self) -> list[UnitGrid]:
        """Per dataset (sorted; rows without a dataset are left out when others have one, and
        form the dataset "all" when none has) and column: units sorted, systems sorted."""
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
            sums, counts = self._sums[rows], self._counts[rows]
            for k, column in enumerate(self.columns):
                means = np.full((len(present_units), len(present_systems)), np.nan)
                with np.errstate(invalid="ignore", divide="ignore"):
                    cell = np.where(counts[:, k] > 0, sums[:, k] / np.maximum(counts[:, k], 1), np.nan)
                means[r, c] = cell
                out.append(UnitGrid(name, column, [unit_values[k] for k in present_units],
                                    [system_values[k] for k in present_systems], means))
        return out


def accumulate(spec: PartialSpec, items: Sequence[tuple[str, str]], runner=None, width: int = 1,
               storage_options: dict | None = None, progress=None) -> GridAccumulator:
    """Partials of every (label, path) item through `runner`, `width` items per call, folded in
    item order (so the sums do not depend on the runner or the width)."""
    from meta_eval.runner import local_runner

    run = runner or local_runner
    acc = GridAccumulator(spec.outputs)
    items = list(items)
    width = max(1, int(width))
    for start in range(0, len(items), width):
        for part in run(partials_task, (spec, storage_options), items[start:start + width]):
            acc.add(part, spec)
        if progress is not None:
            progress(min(start + width, len(items)), len(items))
    return acc

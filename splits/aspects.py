"""Aspects, attribute combinations, atoms and compounds (CompMCTG, Zhong et al. 2024, §3; spec `splits.md`, "Objects").

A `Universe` is the set C of attribute combinations a split partitions: the full product
A_1 × ... × A_n when aspects are given, or only the combinations that occur when read from a
corpus. Atoms are single attribute values (aspect, value); compounds are unordered pairs of
values from two different aspects inside one combination (aspect order fixed, i < j), so every
combination of n aspects carries n(n-1)/2 compounds.

The universe also holds the 0/1 incidence matrices used by the search: `compound_matrix`
(combinations × compounds) and `atom_matrix` (combinations × atoms).
"""

from __future__ import annotations

import itertools
import json
import math
import pathlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from scoring.cell_types import lone_surrogate
from scoring.display_names import quoted, quoted_list
from scoring.errors import InputError
from scoring.json_files import read_json

Combo = tuple[str, ...]

# The four CompMCTG datasets, values as spelled in the released data (spec "Datasets").
KNOWN_DATASETS: dict[str, dict[str, list[str]]] = {
    "Fyelp": {
        "sentiment": ["Positive", "Negative"],
        "gender": ["Male", "Female"],
        "cuisine": ["Asian", "American", "Mexican", "Bar", "dessert"],
        "tense": ["Present", "Past"],
    },
    "Amazon": {
        "sentiment": ["Positive", "Negative"],
        "topic": ["Books", "Clothing", "Music", "Electronics", "Movies", "Sports"],
    },
    "Yelp": {
        "sentiment": ["Positive", "Negative"],
        "pronoun": ["plural", "singular"],
        "tense": ["Present", "Past"],
    },
    "Mixture": {
        "sentiment": ["Positive", "Negative"],
        "topic_cged": ["movies", "opener", "tablets", "auto"],
    },
}

# Split counts used in the CompMCTG benchmark (spec "Datasets"; None = protocol not used).
# Hold-Out is always |C|. Yelp Few-Shot lists 8, but only 4 distinct eligible sets exist
# (`definition_oracles.json`), so distinct-as-sets selection returns 4 there.
BENCHMARK_COUNTS: dict[str, dict[str, int | None]] = {
    "Fyelp": {"acd": 10, "fewshot": 2},
    "Amazon": {"acd": None, "fewshot": 10},
    "Yelp": {"acd": 10, "fewshot": 8},
    "Mixture": {"acd": None, "fewshot": 8},
}

# Columns of the canonical schema (spec `schema.md`) that are never aspects.
RESERVED_COLUMNS = {
    "id", "dataset", "doc_id", "system", "source", "prefix", "attribute", "attributes",
    "constraint", "text", "references", "error", "warning", "signature", "perplexity",
}


class SplitsInputError(InputError):
    """Bad aspects / corpus input, or one that cannot be split meaningfully; the message
    names the file, row, field or aspect."""


@dataclass
class Universe:
    """The combinations C of a split problem with their atoms and compounds."""

    aspects: tuple[str, ...]
    values: dict[str, tuple[str, ...]]
    combos: list[Combo]
    name: str | None = None
    rows: dict[str, Any] | None = field(default=None, compare=False, repr=False)  # a corpus's row account
    atoms: list[tuple[str, str]] = field(init=False)
    compounds: list[tuple[tuple[str, str], tuple[str, str]]] = field(init=False)
    atom_matrix: np.ndarray = field(init=False, repr=False)
    compound_matrix: np.ndarray = field(init=False, repr=False)
    combo_index: dict[Combo, int] = field(init=False, repr=False)
    value_index: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.aspects)
        if n < 2:
            raise SplitsInputError(f"need at least 2 aspects to form compounds, got {quoted_list(self.aspects)}")
        if not self.combos:
            raise SplitsInputError("no attribute combinations")
        for combo in self.combos:
            if len(combo) != n:
                raise SplitsInputError(f"combination {quoted_list(combo)} does not have one value per aspect ({quoted_list(self.aspects)})")
        if len(set(self.combos)) != len(self.combos):
            raise SplitsInputError("duplicate attribute combinations")
        self.combo_index = {c: i for i, c in enumerate(self.combos)}
        used = [set(c[a] for c in self.combos) for a in range(n)]
        for a, asp in enumerate(self.aspects):
            if len(used[a]) < 2:
                raise SplitsInputError(
                    f"aspect {quoted(asp)} has a single value {quoted_list(sorted(used[a]))}: both sides of every split would share it, "
                    "so no split can hold anything out; give at least 2 values per aspect (or drop the aspect)")
        self.atoms = [(asp, v) for a, asp in enumerate(self.aspects) for v in self.values[asp] if v in used[a]]
        atom_id = {atom: i for i, atom in enumerate(self.atoms)}
        comp_id: dict[tuple[tuple[str, str], tuple[str, str]], int] = {}
        rows_c, cols_c, rows_a, cols_a = [], [], [], []
        for r, combo in enumerate(self.combos):
            for a in range(n):
                rows_a.append(r)
                cols_a.append(atom_id[(self.aspects[a], combo[a])])
            for a, b in itertools.combinations(range(n), 2):
                key = ((self.aspects[a], combo[a]), (self.aspects[b], combo[b]))
                rows_c.append(r)
                cols_c.append(comp_id.setdefault(key, len(comp_id)))
        self.compounds = list(comp_id)
        self.atom_matrix = np.zeros((len(self.combos), len(self.atoms)), dtype=np.float64)
        self.atom_matrix[rows_a, cols_a] = 1.0
        self.compound_matrix = np.zeros((len(self.combos), len(self.compounds)), dtype=np.float64)
        self.compound_matrix[rows_c, cols_c] = 1.0
        # value positions per combination and a mixed-radix code for looking combinations up
        self.value_index = np.array(
            [[self.values[asp].index(c[a]) for a, asp in enumerate(self.aspects)] for c in self.combos], dtype=np.int64
        )
        radices = [len(self.values[asp]) for asp in self.aspects]
        self._strides = np.cumprod([1] + radices[1:][::-1])[::-1].astype(np.int64)
        codes = self.value_index @ self._strides
        self._code_order = np.argsort(codes, kind="stable")
        self._sorted_codes = codes[self._code_order]

    # ----- sizes ----------------------------------------------------------------------
    @property
    def n_combos(self) -> int:
        return len(self.combos)

    @property
    def compounds_per_combo(self) -> int:
        n = len(self.aspects)
        return n * (n - 1) // 2

    def max_cardinality(self) -> int:
        """Largest number of values any aspect takes: the Few-Shot seen size (spec "Protocols")."""
        return max(len(set(c[a] for c in self.combos)) for a in range(len(self.aspects)))

    # ----- conversions ----------------------------------------------------------------
    def combo_dict(self, i: int) -> dict[str, str]:
        return dict(zip(self.aspects, self.combos[i]))

    def index_of(self, combo: Mapping[str, str]) -> int:
        try:
            key = tuple(combo[a] for a in self.aspects)
        except KeyError as exc:
            raise SplitsInputError(f"combination {_combo_text(combo)} lacks aspect {quoted(exc.args[0])}") from None
        if key not in self.combo_index:
            raise SplitsInputError(f"combination {_combo_text(combo)} is not in this universe")
        return self.combo_index[key]

    def lookup_values(self, value_index: np.ndarray) -> np.ndarray:
        """Combination indices of rows of value positions (..., n_aspects); −1 where absent."""
        codes = value_index @ self._strides
        pos = np.searchsorted(self._sorted_codes, codes)
        pos = np.minimum(pos, len(self._sorted_codes) - 1)
        found = self._sorted_codes[pos] == codes
        return np.where(found, self._code_order[pos], -1)

    def compounds_of(self, i: int) -> list[tuple[tuple[str, str], tuple[str, str]]]:
        combo = self.combos[i]
        n = len(self.aspects)
        return [((self.aspects[a], combo[a]), (self.aspects[b], combo[b])) for a, b in itertools.combinations(range(n), 2)]

    # ----- eligibility ----------------------------------------------------------------
    def is_eligible(self, seen: Iterable[int]) -> bool:
        """Eligible split (spec "Objects"): every atom of the unseen side occurs in the seen
        side. Since seen ∪ unseen = C, this is: seen covers every atom of C."""
        seen = list(seen)
        if not seen:
            return False
        covered = self.atom_matrix[seen].sum(axis=0) > 0
        return bool(covered.all())

    def unseen_of(self, seen: Iterable[int]) -> list[int]:
        s = set(seen)
        return [i for i in range(self.n_combos) if i not in s]

    def describe(self) -> dict[str, Any]:
        return {"aspects": {a: list(self.values[a]) for a in self.aspects}, "n_combos": self.n_combos}

    def known_dataset(self) -> str | None:
        """Name of the CompMCTG dataset with exactly these aspects, values and full product."""
        for name, spec in KNOWN_DATASETS.items():
            if set(spec) == set(self.aspects) and all(set(spec[a]) == set(self.values[a]) for a in spec):
                full = int(np.prod([len(v) for v in spec.values()]))
                if full == self.n_combos:
                    return name
        return None


#: the most attribute combinations a universe of given aspects may have (the full product is built)
MAX_COMBINATIONS = 100_000


def _combo_text(combo) -> str:
    """A combination as an error quotes it: at most 20 `aspect=value` pairs, each name cut."""
    items = list(combo.items()) if isinstance(combo, Mapping) else [("?", combo)]
    shown = ", ".join(f"{quoted(k)}={quoted(v)}" for k, v in items[:20])
    return "{" + shown + (f", ... {len(items) - 20:,} more" if len(items) > 20 else "") + "}"


def from_aspects(aspects: Mapping[str, Sequence[str]], name: str | None = None) -> Universe:
    """Full product universe of the given aspects (order of aspects and values kept)."""
    if not isinstance(aspects, Mapping) or not aspects:
        raise SplitsInputError("aspects must be a non-empty mapping {aspect: [values...]}")
    values: dict[str, tuple[str, ...]] = {}
    for asp, vals in aspects.items():
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence) or len(vals) == 0:
            raise SplitsInputError(f"aspect {quoted(asp)}: values must be a non-empty list of strings")
        for value in vals:  # JSON's 1 or null would become the values "1" and "None"
            if not isinstance(value, str) or not value.strip():
                raise SplitsInputError(f"aspect {quoted(asp)}: value {quoted(value)} is not a non-empty string")
        for text in (str(asp), *vals):  # JSON's "\ud800" is a lone surrogate: no UTF-8 file can hold it
            if lone_surrogate(text) is not None:
                raise SplitsInputError(f"aspect {quoted(asp)}: {'its name' if text == asp else f'value {quoted(text)}'} "
                                       "holds a lone surrogate (a JSON \\ud800-\\udfff escape), which is not text")
        vals = tuple(vals)
        if len(set(vals)) != len(vals):
            raise SplitsInputError(f"aspect {quoted(asp)}: duplicate values {quoted_list(sorted(v for v, k in Counter(vals).items() if k > 1))}")
        values[str(asp)] = vals
    names = tuple(values)
    count = math.prod(len(values[a]) for a in names)
    if count > MAX_COMBINATIONS:  # a few lines of JSON would ask for more memory than any machine has
        raise SplitsInputError(f"aspects: {' x '.join(str(len(values[a])) for a in names)} = {count:,} attribute "
                               f"combinations, more than {MAX_COMBINATIONS:,}; CompMCTG's datasets have at most a few hundred")
    combos = list(itertools.product(*(values[a] for a in names)))
    uni = Universe(names, values, combos, name=name)
    if uni.name is None:
        uni.name = uni.known_dataset()
    return uni


def _reason(exc: BaseException) -> str:
    return "nested too deep" if isinstance(exc, RecursionError) else " ".join(str(exc).split()) or type(exc).__name__


def parse_aspects_arg(text: str) -> Universe:
    """`--aspects` value: a JSON object, a path to one, or a known dataset name."""
    if text in KNOWN_DATASETS:
        return from_aspects(KNOWN_DATASETS[text], name=text)
    path = pathlib.Path(text)
    if not text.lstrip().startswith("{") and path.is_file():
        try:
            data = read_json(path)
        except (ValueError, RecursionError) as exc:  # not UTF-8 or JSON, a number past 4,300 digits, too deep
            raise SplitsInputError(f"{path}: not valid JSON ({_reason(exc)})") from None
    else:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise SplitsInputError(
                f"--aspects: not a JSON object, a file, or one of {sorted(KNOWN_DATASETS)} ({_reason(exc)})"
            ) from None
    return from_aspects(data)


def _values(table, column: str, source: str, rows: np.ndarray | None = None) -> list:
    """Column `column` of `table` as Python values; a value that is no text (invalid UTF-8 in a
    Parquet string) fails the corpus naming the column and the row (`rows`: the corpus row of
    each table row, where the table holds some of them)."""
    from scoring.utf8_text import column_values

    return column_values(table.column(column), lambda row: SplitsInputError(
        f"{source}: row {row if rows is None else int(rows[row])}: field {quoted(column)} is not valid UTF-8"))


@dataclass
class CorpusRows:
    """The attribute combination of every row of a corpus that has one: `rows` (one dict per
    kept row, in corpus order), `kept` (the positions of those rows in the corpus) and the
    account of the rows left out because an aspect key is not valid UTF-8 (`account`: rows_in,
    rows_used, rows_left_out per reason, rows_left_out_first: where the first row of each is)."""

    aspects: list[str]
    rows: list[dict[str, str]]
    kept: np.ndarray
    account: dict[str, Any]


def _unreadable_keys(table, columns: Sequence[str]) -> list[tuple[str, np.ndarray]]:
    """(column, rows whose value holds a key that is not valid UTF-8) for the aspect columns
    (`attributes`: a map, whose aspect names and values are both keys, or strings), in order;
    a Parquet `binary` column counts as the text it holds. Nothing is decoded."""
    from scoring.utf8_text import binary_as_text, unreadable_mask

    found = [(name, unreadable_mask(binary_as_text(table.column(name)))) for name in columns]
    return [(name, bad) for name, bad in found if bad is not None]


def corpus_rows(table, aspect_columns: Sequence[str] | None = None, source: str = "corpus",
                place=None) -> CorpusRows:
    """Per-row attribute dicts of a pyarrow table: from its `attributes` map column, or from
    one column per aspect (`aspect_columns`, else every string column that is not a
    canonical-schema column nor a `pred_*` / `human_*` column). A row whose aspect value (or,
    in `attributes`, aspect name) is not valid UTF-8 is left out and counted under
    "<column> key not valid UTF-8", its first row named (docs/splits.md); it is never decoded
    with replacement characters, which would merge distinct values. `place(row)`: the (file,
    row in it) of a table row, naming a folder's first such row where it is stored."""
    import pyarrow as pa

    from scoring.utf8_text import binary_as_text, unreadable_counts, where_placed

    cols = table.column_names
    if aspect_columns is None and "attributes" in cols:
        key_columns = ["attributes"]
    else:
        if aspect_columns is None:
            aspect_columns = [
                c for c in cols
                if c not in RESERVED_COLUMNS and not c.startswith(("pred_", "human_"))
                and (pa.types.is_string(table.schema.field(c).type) or pa.types.is_large_string(table.schema.field(c).type)
                     or pa.types.is_dictionary(table.schema.field(c).type))
            ]
            if len(aspect_columns) < 2:
                raise SplitsInputError(
                    f"{source}: no 'attributes' map column and fewer than 2 aspect columns found among {quoted_list(cols)}"
                )
        missing = [c for c in aspect_columns if c not in cols]
        if missing:
            error = SplitsInputError(f"{source}: aspect column(s) {quoted_list(missing)} not found; "
                                     f"columns are {quoted_list(cols)}")
            error.missing_columns = missing  # named by the user (`--aspect-columns`): the CLI makes it a usage error
            raise error
        key_columns = list(aspect_columns)
    unreadable = _unreadable_keys(table, key_columns)
    found = unreadable_counts(table.num_rows, unreadable, source,  # a row counts under the first column that leaves it out
                              where=where_placed(place) if place is not None else None)
    kept = np.flatnonzero(found.keep)
    account = {"rows_in": table.num_rows, "rows_used": int(kept.size), "rows_left_out": found.left_out,
               **({"rows_left_out_first": found.first} if found.first else {})}
    if unreadable:
        table = table.take(kept)
    if key_columns == ["attributes"]:
        raw = _values(table, "attributes", source, kept)
        rows = []
        aspects: list[str] = []
        for r, value in zip(kept, raw):
            if value is None:
                raise SplitsInputError(f"{source}: row {r}: field 'attributes' is null")
            d = dict(value) if not isinstance(value, dict) else value
            d = {str(k): (None if v is None else str(v)) for k, v in d.items()}
            for k in d:
                if k not in aspects:
                    aspects.append(k)
            rows.append(d)
        aspects = sorted(aspects)
        for r, d in zip(kept, rows):
            missing = [a for a in aspects if d.get(a) in (None, "")]
            if missing:
                raise SplitsInputError(f"{source}: row {r}: 'attributes' lacks aspect(s) {quoted_list(missing)}")
        return CorpusRows(aspects, rows, kept, account)
    data = {c: _values(table.set_column(table.column_names.index(c), c, binary_as_text(table.column(c))), c, source, kept)
            for c in key_columns}
    rows = []
    for k, r in enumerate(kept):
        d = {}
        for c in key_columns:
            v = data[c][k]
            if v is None or v == "":
                raise SplitsInputError(f"{source}: row {r}: field {quoted(c)} is empty")
            d[c] = str(v)
        rows.append(d)
    return CorpusRows(key_columns, rows, kept, account)


def row_combos(table, aspect_columns: Sequence[str] | None = None, source: str = "corpus") -> tuple[list[str], list[dict[str, str]]]:
    """The aspects and the per-row attribute dicts of `corpus_rows` (the rows it keeps)."""
    found = corpus_rows(table, aspect_columns, source)
    return found.aspects, found.rows


def read_corpus_table(path: str | pathlib.Path):
    """A Parquet file or folder of Parquet files as one pyarrow table."""
    import pyarrow.parquet as pq

    p = pathlib.Path(path)
    if not p.exists():
        raise SplitsInputError(f"{path}: corpus not found")
    try:
        return pq.read_table(p)
    except Exception as exc:  # pyarrow raises several types
        raise SplitsInputError(f"{path}: cannot read Parquet ({exc})") from None


def _in_its_file(error: SplitsInputError, path, aspect_columns) -> SplitsInputError:
    """For a folder corpus, the same error named by the shard that holds the row and the row's
    number in it (a row number of the shards joined names no file); `error` itself when the
    shards read one by one raise none."""
    import pyarrow.parquet as pq

    if not pathlib.Path(path).is_dir() or getattr(error, "missing_columns", None):
        return error
    for file in pq.ParquetDataset(str(path)).files:
        try:
            row_combos(pq.read_table(file), aspect_columns, source=file)
        except SplitsInputError as exc:
            if str(exc).startswith(f"{file}: row "):  # the row's own error, not one of a shard's columns alone
                return exc
    return error


def from_corpus(path: str | pathlib.Path, aspect_columns: Sequence[str] | None = None) -> Universe:
    """Universe of the combinations that occur in a corpus (values sorted per aspect)."""
    from scoring.parquet_read import row_places

    table = read_corpus_table(path)
    if table.num_rows == 0:
        raise SplitsInputError(f"{path}: corpus has no rows")
    try:
        found = corpus_rows(table, aspect_columns, source=str(path), place=row_places(path))
    except SplitsInputError as exc:
        raise _in_its_file(exc, path, aspect_columns) from None
    if not found.rows:
        raise SplitsInputError(f"{path}: no row has aspect values that are valid UTF-8 "
                               f"({found.account['rows_in']} rows left out)")
    aspects, rows = found.aspects, found.rows
    values = {a: tuple(sorted({d[a] for d in rows})) for a in aspects}
    combos = sorted({tuple(d[a] for a in aspects) for d in rows},
                    key=lambda c: tuple(values[a].index(v) for a, v in zip(aspects, c)))
    uni = Universe(tuple(aspects), values, combos)
    uni.name = uni.known_dataset()
    uni.rows = found.account
    return uni

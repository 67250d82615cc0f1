"""Partial aggregation of a score dump (meta_eval.partials): the same comparison as the row
frame of `load_scores`, bit-identical sums for any runner, and only the cells kept in memory."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.cli.compare import compare_scores
from ctgscore.scores import load_scores
from meta_eval import compare
from meta_eval.partials import PartialSpec, accumulate

OPTIONS = dict(n_resamples=120, trials=150, seed=4)


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """Two datasets, 5 systems, 30 prompts, 1-3 samples per (prompt, system), over 4 files;
    NaN scores, an infinite one, error rows, a row without a doc_id, integer doc ids."""
    rng = np.random.default_rng(3)
    rows = []
    for dataset in ("news", "yelp"):
        for doc in range(30):
            for k, system in enumerate(["s0", "s1", "s2", "s3", "s4"]):
                for sample in range(int(rng.integers(1, 4))):
                    rows.append({"id": f"{dataset}-{doc}-{system}-{sample}", "dataset": dataset, "doc_id": doc,
                                 "system": system, "m": float(rng.normal(0.1 * k)),
                                 "perplexity": float(rng.uniform(5, 30)), "error": None})
    frame = pd.DataFrame(rows)
    frame.loc[frame.sample(15, random_state=1).index, "m"] = np.nan
    frame.loc[frame.sample(6, random_state=2).index, "error"] = "boom"
    frame.loc[5, "perplexity"] = np.inf
    frame.loc[7, "doc_id"] = None
    folder = tmp_path_factory.mktemp("dump")
    shuffled = frame.sample(frac=1, random_state=0)
    for k in range(4):
        part = shuffled.iloc[k * len(shuffled) // 4:(k + 1) * len(shuffled) // 4]
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), folder / f"part-{k}.parquet")
    return folder


def test_partials_give_the_row_frame_comparison(dump):
    comps, skipped, columns, acc, datasets = compare_scores(str(dump), None, None, dict(OPTIONS))
    assert columns == ["m", "perplexity"] and datasets == ["news", "yelp"] and not skipped
    assert acc.rows == sum(pq.read_metadata(p).num_rows for p in dump.iterdir()) and acc.error_rows == 6
    frame = load_scores(str(dump))
    for comp in comps:
        part = frame[frame["dataset"] == comp.dataset]
        ref = compare.system_comparison(part, comp.column, dataset=comp.dataset,
                                        lower_is_better=comp.column == "perplexity", **OPTIONS)
        assert (comp.n_units, comp.n_units_dropped) == (ref.n_units, ref.n_units_dropped)
        assert comp.n_units_dropped > 0
        assert [(s.system, s.rank) for s in comp.systems] == [(s.system, s.rank) for s in ref.systems]
        for got, want in zip(comp.systems + comp.pairs, ref.systems + ref.pairs):
            for name in ("mean", "mean_a", "diff", "p_bootstrap", "p_randomization"):
                if hasattr(want, name):
                    assert getattr(got, name) == pytest.approx(getattr(want, name), abs=1e-12)


def test_sums_are_identical_for_any_runner_and_width(dump):
    spec = PartialSpec(runs={"scores": (("m", "m"), ("perplexity", "perplexity"))})
    items = [("scores", str(p)) for p in sorted(dump.iterdir())]

    def backwards(fn, shared, batch):  # runs the items in reverse order, one call each
        return [fn(shared, [item])[0] for item in reversed(batch)][::-1]

    one = accumulate(spec, items)
    other = accumulate(spec, items, runner=backwards, width=3)
    for a, b in zip(one.grids(), other.grids()):
        assert a.units == b.units and a.systems == b.systems
        assert np.array_equal(a.means, b.means, equal_nan=True)


def test_a_file_without_the_unit_column_is_named(tmp_path):
    from scoring.errors import InputError

    pq.write_table(pa.table({"id": ["a"], "system": ["s"], "m": [1.0]}), tmp_path / "x.parquet")
    with pytest.raises(InputError, match=r"x.parquet: column 'doc_id' not found"):
        compare_scores(str(tmp_path), ["m"], None, dict(OPTIONS))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ray_tasks_give_identical_numbers(dump, tmp_path, ray_address):
    from ctgscore.testing.cli import run_cli

    outs = []
    for tasks in ("0", "2"):
        out = tmp_path / f"board{tasks}.json"
        proc = run_cli(["compare", "-s", dump, "-o", out, "--tasks", tasks, "--resamples", "120",
                        "--trials", "150", "--seed", "4"], env={"RAY_ADDRESS": ray_address})
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads(out.read_text()))
    assert outs[0] == outs[1]


def test_cells_whose_sum_overflows_keep_their_finite_mean(tmp_path):
    """Several rows of a (document, system) near 1e308: the plain sum overflows, the mean does
    not. Within one file and across files; a cell holding an infinite score stays non-finite;
    tiny (subnormal) scores keep every bit of the plain sum."""
    from fractions import Fraction

    cells = {  # (doc, system) -> scores, split over two files
        (0, "a"): [1.5e308, 1.7e308, 1.6e308],
        (0, "b"): [1e308, -1e308, 1.7e308, 1.7e308, 5.0],
        (1, "a"): [1.2e308, 1.4e308],
        (1, "b"): [1.7e308, np.inf, 1.0],
        (2, "a"): [5e-324, 3e-310, 1e-310],
        (2, "b"): [1.0, 2.0],
    }
    rows = [{"id": f"{doc}-{system}-{k}", "doc_id": doc, "system": system, "m": value}
            for (doc, system), values in cells.items() for k, value in enumerate(values)]
    pq.write_table(pa.Table.from_pylist(rows[::2]), tmp_path / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(rows[1::2]), tmp_path / "part-1.parquet")
    spec = PartialSpec(runs={"scores": (("m", "m"),)})
    items = [("scores", str(tmp_path / "part-0.parquet")), ("scores", str(tmp_path / "part-1.parquet"))]
    (grid,) = accumulate(spec, items).grids()
    got = {(unit, system): grid.means[i, j] for i, unit in enumerate(grid.units) for j, system in enumerate(grid.systems)}
    for key, values in cells.items():
        if np.isinf(values).any():
            assert not np.isfinite(got[key]), key
            continue
        exact = float(sum(map(Fraction, values)) / len(values))
        assert got[key] == pytest.approx(exact, rel=1e-15), key
    assert got[(2, "a")] == np.mean(cells[(2, "a")])  # the plain sum, bit for bit
    # the comparison keeps documents 0 and 2 and drops only document 1 (its infinite score)
    comps, *_ = compare_scores(str(tmp_path), ["m"], None, dict(OPTIONS))
    (comp,) = comps
    assert (comp.n_units, comp.n_units_dropped) == (2, 1)


def test_a_column_named_twice_is_compared_once(dump):
    """`--columns m m` planned the column twice; its second copy was never filled and the
    comparison was skipped as if no document had a finite score."""
    comps, skipped, columns, *_ = compare_scores(str(dump), ["m", "m"], None, dict(OPTIONS))
    again, _, _, *_ = compare_scores(str(dump), ["m"], None, dict(OPTIONS))
    assert columns == ["m"] and not skipped
    assert [(c.dataset, c.column, [s.system for s in c.systems]) for c in comps] == \
        [(c.dataset, c.column, [s.system for s in c.systems]) for c in again]

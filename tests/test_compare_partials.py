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

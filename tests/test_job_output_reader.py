"""One reader of the job's output (`scoring.job_output`): `ctgscore meta` (`meta_eval.io`),
`ctgscore compare` (its partial sums) and `load_scores` read the same rows from an output
with a removed shard (its folder left behind) and two runs of one metric (two signatures)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq

import ctgscore
from ctgscore.cli.compare import plan_columns
from meta_eval.io import read_scores
from meta_eval.partials import PartialSpec, accumulate
from scoring.schema import output_table

SYSTEMS = ["A", "B", "A", "B"]


def _part(folder, ids, values, signature):
    folder.mkdir(parents=True, exist_ok=True)
    results = [{"perplexity": v, "error": None, "warning": None} for v in values]
    table = output_table(ids, results, ["perplexity"], signature, [f"k{i}" for i in ids],
                         {"system": SYSTEMS[: len(ids)], "doc_id": [f"d{i[-1]}" for i in ids],
                          "human_q": [float(n) for n in range(len(ids))]})
    pq.write_table(table, folder / "part-0000000000-0000000004-abc.parquet")


def _job_output(tmp_path):
    """Two labels of one metric (models a and b), each with a current shard and the folder of
    a shard removed from the input since (not pruned: the manifest lists it as orphaned)."""
    out = tmp_path / "out"
    ids = ["r0", "r1", "r2", "r3"]
    for label, base in (("ppl_a", 10.0), ("ppl_b", 20.0)):
        signature = f"metric:perplexity|model:{label}"
        _part(out / label / "shard-0", ids, [base + n for n in range(4)], signature)
        _part(out / label / "removed", ["x0", "x1"], [99.0, 99.0], signature)
    metrics = {label: {"outputs": [{"folder": f"/job/out/{label}/shard-0"}],
                       "orphaned_outputs": [f"/job/out/{label}/removed"]} for label in ("ppl_a", "ppl_b")}
    (out / "manifest.json").write_text(json.dumps({"config": {"output": "/job/out"}, "metrics": metrics}))
    return out, ids


def test_meta_compare_and_load_scores_read_the_same_rows(tmp_path):
    out, ids = _job_output(tmp_path)
    loaded = ctgscore.load_scores(str(out)).set_index("id")
    meta = read_scores(str(out)).frame.set_index("id")
    columns, runs, items = plan_columns(str(out), None)

    # the removed shard's rows are read by none; the two runs stay apart by name
    assert sorted(loaded.index) == sorted(meta.index) == ids
    assert columns == ["ppl_a.perplexity", "ppl_b.perplexity"]
    assert not any("removed" in path for _, path in items) and len(items) == 2
    for column, base in zip(columns, (10.0, 20.0)):
        expected = [base + n for n in range(4)]
        assert loaded.loc[ids, column].tolist() == expected
        assert meta.loc[ids, column].tolist() == expected

    # compare's per-(unit, system) means from its partial sums are those of the same rows
    acc = accumulate(PartialSpec(runs=runs), items)
    assert acc.rows == 2 * len(ids)
    for grid in acc.grids():
        for u, unit in enumerate(grid.units):
            for s, system in enumerate(grid.systems):
                rows = loaded[(loaded["doc_id"] == unit) & (loaded["system"] == system)][grid.column]
                want = rows.mean() if len(rows) else np.nan
                assert np.isclose(grid.means[u, s], want, equal_nan=True), (grid.column, unit, system)


def test_two_signatures_in_one_folder_are_two_runs(tmp_path):
    """Without a manifest, one metric folder holding parts of two signatures (a model changed
    between runs) is read as two runs, not as one run with every id twice."""
    out = tmp_path / "out"
    ids = ["r0", "r1", "r2", "r3"]
    _part(out / "ppl" / "old", ids, [1.0, 2.0, 3.0, 4.0], "metric:perplexity|model:old")
    _part(out / "ppl" / "new", ids, [5.0, 6.0, 7.0, 8.0], "metric:perplexity|model:new")
    loaded = ctgscore.load_scores(str(out)).set_index("id")
    meta = read_scores(str(out)).frame.set_index("id")
    columns, _, items = plan_columns(str(out), None)
    score_columns = sorted(c for c in loaded.columns if c.endswith(".perplexity"))
    assert sorted(columns) == score_columns and len(score_columns) == 2 and len(items) == 2
    assert all(c.startswith("ppl@") for c in score_columns)
    for column in score_columns:
        assert loaded.loc[ids, column].tolist() == meta.loc[ids, column].tolist()
    assert sorted(loaded.loc["r0", score_columns]) == [1.0, 5.0]

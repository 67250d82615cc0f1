"""Rows whose grouping key is missing (null, NaN, blank) are counted, never dropped in silence:
`meta`, `compare` (row frame and partial sums) and the leaderboard page all account for every
input row, rows_in = rows used + rows left out per reason (`meta_eval.row_account`)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.cli.compare import compare_scores
from meta_eval import compare
from meta_eval.io import read_scores
from meta_eval.pipeline import Options, run_meta
from meta_eval.row_account import RowAccount, account, is_missing, missing_mask

FAST = dict(n_resamples=40, trials=40, seed=1)


def rows(datasets=("a", "b", None), docs=4, systems=("s0", "s1", "s2", "s3"), seed=0) -> pd.DataFrame:
    """One row per (dataset, doc, system); system k scores about k (metric and human)."""
    rng = np.random.default_rng(seed)
    out = [dict(id=f"{d}-{doc}-{s}", dataset=d, system=s, doc_id=f"d{doc}", m=float(rng.normal(k)),
                m2=float(rng.normal(k)), human_q=float(rng.normal(k)))
           for d in datasets for doc in range(docs) for k, s in enumerate(systems)]
    return pd.DataFrame(out)


def write(frame: pd.DataFrame, path) -> str:
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    return str(path)


def adds_up(rows_in: int, used: int, left_out: dict) -> bool:
    return rows_in == used + sum(left_out.values())


def test_missing_keys_are_null_nan_or_blank():
    assert [is_missing(v) for v in (None, float("nan"), np.nan, pd.NA, "", "  \t", "a", 0, 0.0, " x ")] == \
        [True] * 6 + [False] * 4
    assert missing_mask(pd.Series([1.0, np.nan, 2.0])).tolist() == [False, True, False]
    with pytest.raises(ValueError, match="does not add up"):
        RowAccount(10, 7, {"no dataset": 2})
    keep, acc = account(4, [("no dataset", [True, False, False, True]), ("no system", [True, True, False, False])])
    assert keep.tolist() == [False, False, True, False]  # a row missing both counts once, under the first
    assert acc.left_out == {"no dataset": 2, "no system": 1} and acc.rows_used == 1


def test_meta_counts_rows_without_a_dataset(tmp_path, cli):
    """The red-team case: 16 of 48 rows with dataset None went into no group with no word."""
    scores = write(rows(), tmp_path / "s.parquet")
    out = tmp_path / "report"
    args = ["meta", "-s", scores, "-o", out, "--resamples", "20", "--trials", "20", "--methods", "spearman",
            "--no-progress"]
    proc = cli(args + ["--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["rows"], summary["rows_used"], summary["rows_left_out"]) == (48, 32, {"no dataset": 16})
    results = json.loads((out / "results.json").read_text())
    assert [g["name"] for g in results["groups"]] == ["a", "b"] and sum(g["rows"] for g in results["groups"]) == 32
    inp = results["input"]
    assert adds_up(inp["rows_in"], inp["rows_used"], inp["rows_left_out"])
    frame = rows()
    where = f"{scores}: column 'dataset', row {int(np.flatnonzero(frame['dataset'].isna())[0])}"
    assert summary["rows_left_out_first"] == inp["rows_left_out_first"] == {"no dataset": where}
    line = f"16 of 48 rows left out of every group (16 no dataset); 32 used; first no dataset: {where}"
    assert line in (out / "report.md").read_text()
    assert line in (out / "report.html").read_text()
    console = cli(args).stdout
    assert f"  left out: {line}" in console.splitlines()


def test_meta_treats_blank_keys_as_missing_and_says_what_they_cost(tmp_path):
    frame = rows(datasets=("a", "", " "))
    frame.loc[frame.index[:2], "system"] = ""  # two rows of dataset a without a system
    table = read_scores(write(frame, tmp_path / "s.parquet"))
    result = run_meta(table, Options(resamples=20, trials=20, methods=["spearman"], levels=["sample", "system"]))
    assert result.input.rows_left_out == {"no dataset": 32} and result.input.rows_used == 16
    (group,) = result.groups
    assert group.name == "a" and group.rows == 16  # "" and " " form no dataset of their own
    assert group.omitted["system-level correlations"] == "some rows have no system"
    assert group.omitted["checklist system-level parts"] == "2 rows without a system left out of them"
    assert "" not in [s.system for comp in group.systems for s in comp.systems]


def test_meta_with_no_dataset_at_all_is_one_group_and_leaves_nothing_out(tmp_path):
    table = read_scores(write(rows(datasets=(None,)), tmp_path / "s.parquet"))
    result = run_meta(table, Options(resamples=20, trials=20, methods=["spearman"]))
    assert [g.name for g in result.groups] == ["all"] and result.groups[0].rows == 16
    assert (result.input.rows_used, result.input.rows_left_out) == (16, {})


@pytest.fixture(scope="module")
def holes(tmp_path_factory):
    """48 rows over 3 files: 16 without a dataset, and among the others a null, an empty and a
    blank system, a NaN and a null doc id (numeric doc ids), and a row missing both."""
    frame = rows()
    frame["doc_id"] = frame["doc_id"].str[1:].astype(float)
    frame.loc[0, "system"] = None
    frame.loc[5, "system"] = ""
    frame.loc[6, "system"] = "   "
    frame.loc[9, "doc_id"] = np.nan
    frame.loc[20, "doc_id"] = None
    frame.loc[21, ["system", "doc_id"]] = [None, np.nan]
    frame.loc[40, "system"] = None  # no dataset either: counted once, as "no dataset"
    folder = tmp_path_factory.mktemp("holes")
    shuffled = frame.sample(frac=1, random_state=2)
    for k in range(3):
        write(shuffled.iloc[16 * k:16 * (k + 1)], folder / f"part-{k}.parquet")
    return frame, folder


EXPECTED = {"no dataset": 16, "no system": 4, "no doc_id": 2}


def first_rows(frame, name) -> dict[str, str]:
    """Where the first row of each reason is: `name(column, position)` for the first position in
    `frame` whose dataset, else system, else doc_id is missing (the precedence of the account)."""
    missing = {col: frame[col].map(is_missing).to_numpy() for col in ("dataset", "system", "doc_id")}
    no_dataset = missing["dataset"]
    no_system = missing["system"] & ~no_dataset
    no_doc = missing["doc_id"] & ~no_dataset & ~missing["system"]
    return {f"no {col}": name(col, int(np.flatnonzero(mask)[0]))
            for col, mask in (("dataset", no_dataset), ("system", no_system), ("doc_id", no_doc))}


def test_partial_sums_and_the_row_frame_account_for_every_row_alike(holes):
    frame, folder = holes
    comps, skipped, _, acc, datasets = compare_scores(str(folder), ["m"], None, dict(FAST))
    assert datasets == ["a", "b"] and not skipped
    shuffled = frame.sample(frac=1, random_state=2)  # as the fixture wrote its parts, 16 rows each
    in_part = first_rows(shuffled, lambda col, at: f"{folder}/part-{at // 16}.parquet: column '{col}', row {at % 16}")
    assert acc.account == RowAccount(48, 26, EXPECTED, in_part)
    by_frame = compare.compare_systems(frame, ["m"], **FAST)
    assert by_frame.rows == RowAccount(48, 26, EXPECTED, first_rows(frame, lambda col, at: f"the rows: column '{col}', row {at}"))
    for got, want in zip(comps, by_frame):
        assert (got.dataset, got.n_units, got.n_units_dropped) == (want.dataset, want.n_units, want.n_units_dropped)
        assert [s.system for s in got.systems] == [s.system for s in want.systems]  # no "" or "   " system
        assert [s.mean for s in got.systems] == pytest.approx([s.mean for s in want.systems], abs=1e-12)


def test_compare_cli_reports_the_rows_left_out(holes, tmp_path, cli):
    _, folder = holes
    args = ["compare", "-s", folder, "--columns", "m", "--resamples", "40", "--trials", "40"]
    summary = json.loads(cli(args + ["--json"]).stdout)
    assert (summary["rows"], summary["rows_used"], summary["rows_left_out"]) == (48, 26, EXPECTED)
    assert adds_up(summary["rows"], summary["rows_used"], summary["rows_left_out"])
    line = "22 of 48 rows left out of every group (16 no dataset, 4 no system, 2 no doc_id); 26 used"
    assert set(summary["rows_left_out_first"]) == set(EXPECTED)  # where: test_partial_sums_and_the_row_frame_...
    first = "".join(f"; first {reason}: {where}" for reason, where in summary["rows_left_out_first"].items())
    proc = cli(args + ["-o", tmp_path / "board.md"])
    assert proc.returncode == 0, proc.stderr
    assert f"  left out: {line}{first}" in proc.stdout.splitlines()
    assert line in (tmp_path / "board.md").read_text()
    assert cli(args + ["-o", tmp_path / "board.html"]).returncode == 0
    assert line in (tmp_path / "board.html").read_text()
    unknown = cli(args + ["--systems", "s0", "nope"])  # the systems named in the error leave out the missing one
    assert unknown.returncode == 2 and "(systems: s0, s1, s2, s3)" in unknown.stderr
    assert cli(args + ["-o", tmp_path / "board.json"]).returncode == 0
    assert json.loads((tmp_path / "board.json").read_text())["rows"] == \
        {"rows_in": 48, "rows_used": 26, "rows_left_out": EXPECTED, "rows_left_out_first": summary["rows_left_out_first"]}


def test_a_clean_dump_leaves_nothing_out_and_says_nothing(tmp_path, cli):
    scores = write(rows(datasets=("a",)), tmp_path / "s.parquet")
    proc = cli(["compare", "-s", scores, "--columns", "m", "--resamples", "40", "--trials", "40",
                "-o", tmp_path / "board.md"])
    assert proc.returncode == 0 and "left out" not in proc.stdout
    assert "left out" not in (tmp_path / "board.md").read_text()


def test_checklist_csv_keeps_a_missing_system_missing_and_names_a_missing_category(tmp_path, shared_data):
    from meta_eval.io import read_checklist_csv
    from scoring.errors import InputError

    raw = pd.read_csv(shared_data / "checklist" / "ctrl_topic.csv").head(40)
    raw.loc[3, "model"] = np.nan
    raw.loc[4, "prefix"] = "  "
    (tmp_path / "ctrl_topic.csv").write_text(raw.to_csv(index=False))
    table = read_checklist_csv(tmp_path / "ctrl_topic.csv")
    assert table.frame.loc[3, "system"] is None and "nan" not in set(table.frame["system"].dropna())
    assert table.frame.loc[4, "doc_id"] is None
    raw.loc[7, "fluency_cat"] = np.nan
    (tmp_path / "ctrl_topic.csv").write_text(raw.to_csv(index=False))
    with pytest.raises(InputError, match=r"ctrl_topic.csv: row 7: column 'fluency_cat' = nan is not one of poor"):
        read_checklist_csv(tmp_path / "ctrl_topic.csv")

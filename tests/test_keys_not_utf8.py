"""A key (dataset, system, doc_id) that is a Parquet string but not valid UTF-8 leaves its row
out of every group, counted under "<key> key not valid UTF-8" with its first row named, as a
missing key is (`meta_eval.row_account`, docs/meta_eval.md "Rows left out"); `meta`, `compare`
and `leaderboard` still write their reports, and every other row's numbers are those of the
same data without the bad rows. Before, one such row failed the whole command."""

from __future__ import annotations

import json
import types

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from meta_eval.partials import PartialSpec, accumulate
from meta_eval.row_account import RowAccount, merge

SYSTEMS, DOCS = ("s0", "s1", "s2"), 6
BAD = {"system": 4, "doc_id": 9, "dataset": 13}  # key column -> the row whose value is not UTF-8


def columns(datasets=("a", "b")) -> dict[str, list]:
    """One row per (dataset, doc, system); system k scores about k."""
    rng = np.random.default_rng(3)
    rows = [(d, doc, k) for d in datasets for doc in range(DOCS) for k in range(len(SYSTEMS))]
    return {"id": [f"{d}-{doc}-{k}" for d, doc, k in rows], "dataset": [d for d, _, _ in rows],
            "system": [SYSTEMS[k] for _, _, k in rows], "doc_id": [f"doc{doc}" for _, doc, _ in rows],
            "m": [float(rng.normal(k)) for _, _, k in rows], "human_q": [float(rng.normal(k)) for _, _, k in rows]}


def write(data: dict[str, list], path, bad: dict[str, int] | None = None) -> str:
    """`data` as Parquet; for each (column, row) of `bad`, that value gets a leading 0xff byte."""
    arrays = {}
    for name, values in data.items():
        rows = [r for c, r in (bad or {}).items() if c == name]
        if rows:
            raw = [None if v is None else v.encode() for v in values]
            for r in rows:
                raw[r] = b"\xff" + raw[r]
            arrays[name] = pa.array(raw, pa.binary()).view(pa.string())
        else:
            arrays[name] = pa.array(values)
    pq.write_table(pa.table(arrays), path)
    return str(path)


def without(data: dict[str, list], rows) -> dict[str, list]:
    return {name: [v for k, v in enumerate(values) if k not in set(rows)] for name, values in data.items()}


def test_unreadable_mask_finds_the_bad_values_without_decoding_them():
    from meta_eval.row_account import is_utf8, unreadable_mask

    array = pa.array([b"x", b"\xffx", None, b"x", b"\xed\xa0\x80"], pa.binary()).view(pa.string())
    assert unreadable_mask(array).tolist() == [False, True, False, False, True]  # a lone surrogate is no UTF-8 either
    assert unreadable_mask(array.dictionary_encode()).tolist() == [False, True, False, False, True]
    assert unreadable_mask(pa.array(["x", None, "é"])) is None and unreadable_mask(pa.array([1, 2])) is None
    assert is_utf8("é".encode()) and not is_utf8(b"\xff")
    a = RowAccount(5, 3, {"system key not valid UTF-8": 2}, {"system key not valid UTF-8": "f1: column 'system', row 1"})
    b = RowAccount(4, 3, {"system key not valid UTF-8": 1}, {"system key not valid UTF-8": "f2: column 'system', row 0"})
    both = merge([a, b])  # counts add up, the first file's row stays named
    assert both.left_out == {"system key not valid UTF-8": 3} and both.first == a.first
    assert both.as_dict()["rows_left_out_first"] == a.first and "rows_left_out_first" not in RowAccount(1, 1).as_dict()


def test_partial_sums_leave_the_bad_rows_out_and_keep_the_others_bit_for_bit(tmp_path):
    data = columns()
    spec = PartialSpec({"run": (("m", "m"),)})
    dirty = accumulate(spec, [("run", write(data, tmp_path / "dirty.parquet", BAD))])
    clean = accumulate(spec, [("run", write(without(data, BAD.values()), tmp_path / "clean.parquet"))])
    rows = dirty.account
    assert (rows.rows_in, rows.rows_used) == (len(data["id"]), len(data["id"]) - 3)
    assert list(rows.left_out) == ["dataset key not valid UTF-8", "system key not valid UTF-8",
                                   "doc_id key not valid UTF-8"]  # unreadable keys first, dataset, system, unit
    assert set(rows.left_out.values()) == {1}
    assert rows.first["doc_id key not valid UTF-8"] == f"{tmp_path / 'dirty.parquet'}: column 'doc_id', row 9"
    for got, want in zip(dirty.grids(), clean.grids(), strict=True):
        assert (got.dataset, got.column, got.units, got.systems) == (want.dataset, want.column, want.units, want.systems)
        np.testing.assert_array_equal(got.means, want.means)


def test_a_bad_key_beside_a_missing_one_counts_once_under_the_unreadable_reason(tmp_path):
    data = columns()
    data["system"][4] = None  # row 4: no system; row 5: system not UTF-8 and no doc_id
    data["doc_id"][5] = "  "
    spec = PartialSpec({"run": (("m", "m"),)})
    rows = accumulate(spec, [("run", write(data, tmp_path / "s.parquet", {"system": 5}))]).account
    assert rows.left_out == {"system key not valid UTF-8": 1, "no system": 1}
    assert rows.first == {"system key not valid UTF-8": f"{tmp_path / 's.parquet'}: column 'system', row 5",
                          "no system": f"{tmp_path / 's.parquet'}: column 'system', row 4"}


def test_compare_writes_its_board_and_the_other_rows_compare_as_without_the_bad_ones(tmp_path, cli):
    data = columns()
    dirty = write(data, tmp_path / "dirty.parquet", BAD)
    clean = write(without(data, BAD.values()), tmp_path / "clean.parquet")
    args = ["--columns", "m", "--resamples", "30", "--trials", "30", "--json"]
    got = cli(["compare", "-s", dirty, *args, "-o", tmp_path / "board.html"])
    assert got.returncode == 0, got.stderr
    want = json.loads(cli(["compare", "-s", clean, *args]).stdout)
    summary = json.loads(got.stdout)
    assert summary["rows_left_out"] == {"dataset key not valid UTF-8": 1, "system key not valid UTF-8": 1,
                                        "doc_id key not valid UTF-8": 1}
    assert (summary["rows"], summary["rows_used"]) == (36, 33) and want["rows_left_out"] == {}
    assert summary["rows_left_out_first"]["system key not valid UTF-8"] == f"{dirty}: column 'system', row 4"
    assert summary["comparisons"] == want["comparisons"] and summary["leaderboard"] == want["leaderboard"]
    page = (tmp_path / "board.html").read_text()
    assert "3 of 36 rows left out of every group (1 dataset key not valid UTF-8, 1 system key not valid UTF-8, " \
           "1 doc_id key not valid UTF-8); 33 used" in page
    assert "\ufffd" not in page  # nothing decoded with replacement characters
    assert cli(["compare", "-s", dirty, *args[:-1], "-o", tmp_path / "board.json"]).returncode == 0
    assert json.loads((tmp_path / "board.json").read_text())["rows"]["rows_left_out"] == summary["rows_left_out"]


def test_meta_writes_its_report_and_the_other_rows_give_the_same_numbers(tmp_path, cli):
    data = columns()
    dirty = write(data, tmp_path / "dirty.parquet", BAD)
    clean = write(without(data, BAD.values()), tmp_path / "clean.parquet")
    args = ["--metrics", "m", "--human-columns", "human_q", "--resamples", "20", "--trials", "20",
            "--methods", "spearman", "--no-progress", "--json"]
    got = cli(["meta", "-s", dirty, "-o", tmp_path / "dirty", *args])
    assert got.returncode == 0, got.stderr
    assert cli(["meta", "-s", clean, "-o", tmp_path / "clean", *args]).returncode == 0
    summary = json.loads(got.stdout)
    assert (summary["rows"], summary["rows_used"]) == (36, 33)
    assert summary["rows_left_out"] == {"dataset key not valid UTF-8": 1, "system key not valid UTF-8": 1,
                                        "doc_id key not valid UTF-8": 1}
    assert summary["rows_left_out_first"]["dataset key not valid UTF-8"] == f"{dirty}: column 'dataset', row 13"  # id 'a-4-1'; named as every reason is, by file and row
    results = json.loads((tmp_path / "dirty" / "results.json").read_text())
    reference = json.loads((tmp_path / "clean" / "results.json").read_text())
    assert results["input"]["rows_left_out"] == summary["rows_left_out"] and results["input"]["rows_used"] == 33
    assert results["groups"] == reference["groups"]
    assert "first system key not valid UTF-8" in (tmp_path / "dirty" / "report.md").read_text()


def test_leaderboard_counts_the_bad_rows_and_ranks_the_others(tmp_path, cli, monkeypatch):
    from ray_jobs import score_corpus

    data = columns(("toy",))
    scores = write(data, tmp_path / "scores.parquet", {"system": 2})
    manifest = {"output": scores, "metrics": {"stub": {"rows_scored": 0, "rows_cached": 18}}}
    monkeypatch.setattr(score_corpus, "load_config", lambda path, overrides=None: types.SimpleNamespace())
    monkeypatch.setattr(score_corpus, "run_job", lambda config: manifest)
    monkeypatch.setattr(score_corpus, "error_rate_exceeded", lambda manifest: [])
    (tmp_path / "job.yaml").write_text("stub: true\n")
    board = tmp_path / "board"
    proc = cli(["leaderboard", tmp_path / "job.yaml", "-o", board, "--columns", "m", "--resamples", "30",
                "--trials", "30", "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    line = (f"1 of 18 rows left out of every group (1 system key not valid UTF-8); 17 used; "
            f"first system key not valid UTF-8: {scores}: column 'system', row 2")
    assert f"  left out: {line}" in proc.stdout.splitlines()
    document = json.loads((board / "leaderboard.json").read_text())
    assert document["rows"] == {"rows_in": 18, "rows_used": 17, "rows_left_out": {"system key not valid UTF-8": 1},
                                "rows_left_out_first": {"system key not valid UTF-8": f"{scores}: column 'system', row 2"}}
    assert sorted({row["system"] for row in document["leaderboard"]}) == list(SYSTEMS)


def test_compare_systems_on_a_frame_leaves_the_bad_rows_out_alike(tmp_path):
    """The library's row-frame path (`meta_eval.compare.compare_systems`) counts them as the
    partial sums do, and compares the other rows as without them."""
    import pandas as pd

    from meta_eval import compare

    data = columns()
    table = pq.read_table(write(data, tmp_path / "dirty.parquet", BAD))
    frame = table.to_pandas(types_mapper=pd.ArrowDtype)  # the keys stay Arrow strings, bytes as stored
    clean = pd.DataFrame(without(data, BAD.values()))
    options = dict(n_resamples=30, trials=30, seed=1)
    got, want = compare.compare_systems(frame, ["m"], **options), compare.compare_systems(clean, ["m"], **options)
    assert got.rows.left_out == {"dataset key not valid UTF-8": 1, "system key not valid UTF-8": 1,
                                 "doc_id key not valid UTF-8": 1} and got.rows.rows_used == 33
    assert got.rows.first["system key not valid UTF-8"] == "the rows: column 'system', row 4"
    assert [(c.dataset, c.n_units, [(s.system, s.mean, s.rank) for s in c.systems]) for c in got] == \
        [(c.dataset, c.n_units, [(s.system, s.mean, s.rank) for s in c.systems]) for c in want]

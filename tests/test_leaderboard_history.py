"""The leaderboard's `history.jsonl` (`meta_eval.report.history`): one record per (dataset,
column), so names with a `/` stay apart; lines of the old format (`"dataset/column"` keys) are
still read, by the library and by a refresh of `ctgscore leaderboard` (its job stubbed here)."""

from __future__ import annotations

import html
import json
import types

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from meta_eval.report.history import history_record, leader_since, read_history
from meta_eval.results import Interval, SystemComparison, SystemScore


def comparison(dataset: str, column: str, leader: str) -> SystemComparison:
    scores = tuple(SystemScore(name, mean, Interval(mean, mean), rank)
                   for rank, (name, mean) in enumerate([(leader, 2.0), ("other", 1.0)], 1))
    return SystemComparison(dataset=dataset, column=column, lower_is_better=False, unit="doc_id", n_units=3,
                            n_units_dropped=0, systems=scores, pairs=(), signature="s")


def test_names_with_a_slash_stay_apart(tmp_path):
    record = history_record([comparison("a/b", "c", "x"), comparison("a", "b/c", "y")], "t1", {}, 10)
    (tmp_path / "history.jsonl").write_text(json.dumps(record) + "\n")
    (back,) = read_history(tmp_path / "history.jsonl")
    assert back["format"] == 2 and back["leaders"] == [{"dataset": "a/b", "column": "c", "system": "x"},
                                                       {"dataset": "a", "column": "b/c", "system": "y"}]
    assert leader_since([back], "a/b", "c", "x") == ("t1", 1) and leader_since([back], "a", "b/c", "x") == (None, 0)


def test_old_lines_are_still_read(tmp_path):
    log = tmp_path / "history.jsonl"
    old = [{"refreshed": "t1", "job": {}, "rows": 4, "leaders": {"toy/m": "sysB", "a/b/c": "z"}},
           {"refreshed": "t2", "job": {}, "rows": 6, "leaders": {"toy/m": "sysC", "a/b/c": "z"}}]
    new = history_record([comparison("toy", "m", "sysC"), comparison("a/b", "c", "z")], "t3", {}, 8)
    log.write_text("".join(json.dumps(line) + "\n" for line in old + [new]) + "{not json\n")
    records = read_history(log)
    assert records[0]["format"] == 1 and records[0]["leaders"][0] == {"dataset": "toy", "column": "m",
                                                                     "system": "sysB"}
    assert records[0]["leaders"][1] == {"dataset": None, "column": None, "system": "z", "key": "a/b/c"}
    assert records[3] == {"line": 4, "problem": "not JSON (Expecting property name enclosed in double quotes)"}
    resolved = read_history(log, known={("a/b", "c"), ("toy", "m")})
    assert resolved[0]["leaders"][1] == {"dataset": "a/b", "column": "c", "system": "z"}
    assert leader_since(resolved[:3], "toy", "m", "sysC") == ("t2", 2)
    assert leader_since(resolved[:3], "a/b", "c", "z") == ("t1", 3)
    both = read_history(log, known={("a/b", "c"), ("a", "b/c")})  # the old key cannot tell them apart
    assert both[0]["leaders"][1]["dataset"] is None and both[0]["leaders"][1]["key"] == "a/b/c"



def test_a_tampered_history_line_is_named_and_the_others_read(tmp_path):
    """A line that is not UTF-8, nested past the JSON reader or holding a number past its digit
    limit is a problem line of its own; the lines around it are read (these raised, so a refresh
    ended in an internal error after writing its board and never appended its history)."""
    good = history_record([comparison("toy", "m", "sysA")], "t1", {}, 4)
    lines = [json.dumps(good).encode(), b'{"refreshed": "t2", "leaders": [], "x": "\xff\xfe"}',
             b"[" * 100_000 + b"]" * 100_000, b'{"rows": ' + b"9" * 5_000 + b"}", json.dumps(good).encode()]
    (tmp_path / "history.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    records = read_history(tmp_path / "history.jsonl")
    assert [r.get("line") for r in records] == [None, 2, 3, 4, None]
    assert records[1]["problem"].startswith("not UTF-8") and records[2]["problem"].startswith("not JSON")
    assert records[3]["problem"].startswith("not JSON") and records[4]["leaders"] == good["leaders"]
    assert leader_since(records, "toy", "m", "sysA") == ("t1", 1)


def test_a_refresh_reads_an_old_history_and_appends_the_new_format(tmp_path, cli, monkeypatch):
    from ray_jobs import score_corpus

    scores = tmp_path / "scores.parquet"
    frame = pd.DataFrame({"id": [f"{s}-{d}" for s in ("sysA", "sysB") for d in range(6)],
                          "dataset": "toy", "system": [s for s in ("sysA", "sysB") for _ in range(6)],
                          "doc_id": [f"d{d}" for _ in range(2) for d in range(6)],
                          "m": [float(d) for d in range(6)] + [float(d) + 3 for d in range(6)]})
    strays = pd.DataFrame({"id": ["x1", "x2"], "dataset": [None, "  "], "system": "sysA", "doc_id": "d0", "m": 99.0})
    frame = pd.concat([frame, strays], ignore_index=True)  # two rows without a dataset: counted, not ranked
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), scores)
    manifest = {"output": str(scores), "metrics": {"stub": {"rows_scored": 0, "rows_cached": 14}}}
    monkeypatch.setattr(score_corpus, "load_config", lambda path, overrides=None: types.SimpleNamespace())
    monkeypatch.setattr(score_corpus, "run_job", lambda config: manifest)
    monkeypatch.setattr(score_corpus, "error_rate_exceeded", lambda manifest: [])
    board = tmp_path / "board"
    board.mkdir()
    old = {"refreshed": "2026-01-01T00:00:00+00:00", "job": {}, "rows": 12, "leaders": {"toy/m": "sysB"}}
    (board / "history.jsonl").write_text(json.dumps(old) + "\n")
    (tmp_path / "job.yaml").write_text("stub: true\n")
    proc = cli(["leaderboard", tmp_path / "job.yaml", "-o", board, "--columns", "m", "--resamples", "50",
                "--trials", "50", "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    assert "toy / m: leader sysB 5.5; leader since 2026-01-01T00:00:00+00:00 (2 refreshes)" in proc.stdout
    where = f"{scores}: column 'dataset', row 12"  # x1, after the twelve rows of toy
    line = f"2 of 14 rows left out of every group (2 no dataset); 12 used; first no dataset: {where}"
    assert f"  left out: {line}" in proc.stdout.splitlines() and html.escape(line) in (board / "board.html").read_text()
    assert json.loads((board / "leaderboard.json").read_text())["rows"] == \
        {"rows_in": 14, "rows_used": 12, "rows_left_out": {"no dataset": 2}, "rows_left_out_first": {"no dataset": where}}
    lines = [json.loads(line) for line in (board / "history.jsonl").read_text().splitlines()]
    assert lines[0] == old  # the old line is kept as written
    assert lines[1]["format"] == 2 and lines[1]["leaders"] == [{"dataset": "toy", "column": "m", "system": "sysB"}]


def test_a_line_whose_leaders_are_not_a_list_is_a_problem_line_not_a_crash(tmp_path):
    """A hand-edited or damaged line (`"leaders": 5`) is named as a problem line, as a line that
    is not JSON is; the lines around it still count."""
    log = tmp_path / "history.jsonl"
    good = history_record([comparison("toy", "m", "x")], "t1", {}, 4)
    log.write_text("".join(json.dumps(line) + "\n" for line in (good, {**good, "leaders": 5}, {**good, "refreshed": "t3"})))
    records = read_history(log)
    assert records[1] == {"line": 2, "problem": "leaders is not a list"}
    kept = [r for r in records if "problem" not in r]
    assert leader_since(kept, "toy", "m", "x") == ("t1", 2)

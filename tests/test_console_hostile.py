"""A hostile dump through the commands that print data strings: ids, texts, system, dataset
and column names, file names carrying escape sequences, C1 controls, carriage returns and
bidi overrides. No captured stdout or stderr holds a character that could act on a terminal
or hide text; the row, file or column is still named (its escaped form); no row is lost; the
files written keep the raw strings."""

from __future__ import annotations

import json
import os
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from ctgscore.testing.cli import run_cli
from ctgscore.testing.console import HOSTILE, console_problems, shown

LONG = "long " * 100  # over the max_cell_bytes=200 given below: that row's error


def hostile_rows() -> list[dict]:
    rows = [{"id": f"id-{name}-{text}", "text": f"{text} some words {name}", "system": f"sys{text}",
             "dataset": f"data{HOSTILE['bidi']}"} for name, text in sorted(HOSTILE.items())]
    rows.append({"id": f"id-long{HOSTILE['c1']}", "text": LONG, "system": "plain", "dataset": "plain"})
    return rows


def in_error(text: str) -> str:
    """How `text` appears in an `error:` line: whitespace runs (CR, tab, NEL included) as one
    space (`scoring.errors.one_line`), then the console rule."""
    return shown(" ".join(text.split()))


def assert_safe(proc) -> str:
    console = proc.stdout + proc.stderr
    assert console_problems(console) == [], console[-2000:]
    return console


@pytest.fixture
def dump(tmp_path) -> pathlib.Path:
    folder = tmp_path / f"in{HOSTILE['hidden']}"
    folder.mkdir()
    path = folder / f"dump{HOSTILE['clipboard']}{HOSTILE['bidi']}.parquet"
    pq.write_table(pa.Table.from_pylist(hostile_rows()), path)
    return path


def test_score_names_its_output_safely_and_keeps_every_raw_row(cli, dump, tmp_path):
    out = tmp_path / f"scores{HOSTILE['overwrite']}{HOSTILE['c1']}{HOSTILE['invisible']}.parquet"
    proc = cli(["score", "-m", "text_stats", "-i", str(dump), "-o", str(out), "--input-limit", "max_cell_bytes=200",
                "--max-error-rate", "0.5"])
    assert proc.returncode == 0, proc.stderr
    assert_safe(proc)
    assert f"-> {shown(str(out))}" in proc.stdout
    assert "errors: 1 x field 'text' holds more than 200 bytes" in proc.stdout
    table = pq.read_table(out)  # the file keeps the raw strings
    rows = hostile_rows()
    assert table.column("id").to_pylist() == [row["id"] for row in rows]
    assert table.column("system").to_pylist() == [row["system"] for row in rows]
    errors = table.column("error").to_pylist()
    assert [e is not None for e in errors] == [row["text"] == LONG for row in rows]  # nothing lost
    assert table.column("text_stats_words").null_count == 1


def test_score_errors_name_columns_ids_and_files_safely(cli, dump, tmp_path):
    rows = hostile_rows()
    no_text = tmp_path / "no_text.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": r["id"], f"te{HOSTILE['clear']}xt": r["text"]} for r in rows]), no_text)
    proc = cli(["score", "-m", "text_stats", "-i", str(no_text), "-o", str(tmp_path / "o.parquet")])
    assert proc.returncode == 1
    assert_safe(proc)
    assert f"have id, {in_error('te' + HOSTILE['clear'] + 'xt')})" in proc.stderr

    twice = tmp_path / "twice.parquet"
    pq.write_table(pa.Table.from_pylist(rows + rows[:1]), twice)
    proc = cli(["score", "-m", "text_stats", "-i", str(twice), "-o", str(tmp_path / "o.parquet"), "--json"])
    assert proc.returncode == 1
    assert_safe(proc)
    assert f"duplicate id {ascii(rows[0]['id'])}" in proc.stderr  # an id the user can search for
    assert json.loads(proc.stdout)["error"] in proc.stderr

    proc = cli(["score", "-m", "text_stats", "-i", str(dump), "-o", str(dump)])  # -o is the input
    assert proc.returncode == 2
    assert_safe(proc)
    assert f"output {in_error(str(dump))} is the input" in proc.stderr


def scores_table(path: pathlib.Path) -> tuple[list[str], str, str]:
    """Three systems on six documents, named with C1, bidi and escape characters; a score
    column and a dataset named so too."""
    systems = [f"A{HOSTILE['c1']}", f"B{HOSTILE['bidi']}", f"C{HOSTILE['clear']}"]
    column, dataset = f"m{HOSTILE['hidden']}", f"toy{HOSTILE['clipboard']}"
    rows = [{"id": f"{s}-{d}", "system": s, "doc_id": f"d{d}", "dataset": dataset, column: float(k + d % 3) + 0.1 * d}
            for k, s in enumerate(systems) for d in range(6)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return systems, column, dataset


def test_compare_tables_and_lines_name_systems_safely(cli, tmp_path):
    systems, column, dataset = scores_table(tmp_path / "scores.parquet")
    common = ["compare", "-s", str(tmp_path / "scores.parquet"), "--resamples", "50", "--trials", "50"]
    proc = cli(common)  # the Markdown table on stdout
    assert proc.returncode == 0, proc.stderr
    assert_safe(proc)
    as_markdown = shown(HOSTILE["bidi"]).replace("\\", "\\\\")  # the table shows it escaped, its `\` escaped again
    assert f"B{as_markdown}" in proc.stdout
    assert len(proc.stdout.splitlines()) > 5  # the table's own lines stay lines

    board = tmp_path / "board.md"
    proc = cli(common + ["-o", str(board)])
    assert proc.returncode == 0, proc.stderr
    assert_safe(proc)
    assert f"  {shown(dataset)} / {shown(column)}: 1. {shown(systems[2])} " in proc.stdout
    assert f"2. {shown(systems[1])}" in proc.stdout and f"3. {shown(systems[0])}" in proc.stdout

    proc = cli(common + ["--systems", systems[0], f"Z{HOSTILE['overwrite']}"])
    assert proc.returncode == 2
    assert_safe(proc)
    assert in_error(f"(systems: {', '.join(sorted(systems))})") in proc.stderr


@pytest.mark.parametrize("fmt", ["md", "csv", "json", "html"])
def test_compare_prints_the_whole_document_it_would_write(cli, tmp_path, fmt):
    """On stdout, the document is the one `-o` writes, each line by the console rule and never
    cut (the page's long lines included); JSON by its own escapes, so it still parses."""
    scores_table(tmp_path / "scores.parquet")
    common = ["compare", "-s", str(tmp_path / "scores.parquet"), "--resamples", "50", "--trials", "50", "--format", fmt]
    written = tmp_path / f"board.{fmt}"
    assert cli(common + ["-o", str(written)]).returncode == 0
    proc = cli(common)
    assert proc.returncode == 0, proc.stderr
    assert_safe(proc)
    document = written.read_text(encoding="utf-8")
    if fmt == "json":
        assert json.loads(proc.stdout) == json.loads(document)
    else:
        assert proc.stdout.rstrip("\n").split("\n") == [shown(line) for line in document.rstrip("\n").split("\n")]


def test_meta_splits_and_constraints_errors_name_files_and_columns_safely(cli, dump, tmp_path):
    proc = cli(["meta", "-s", str(dump), "-o", str(tmp_path / "report")])
    assert proc.returncode == 1
    assert_safe(proc)
    assert f"scores {in_error(str(dump))}: no metric columns found" in proc.stderr

    corpus = tmp_path / f"corpus{HOSTILE['c1']}.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "a", "text": "t", f"topic{HOSTILE['bidi']}": "x"}]), corpus)
    proc = cli(["splits", "--corpus", str(corpus), "--protocol", "holdout", "-o", str(tmp_path / "s.json")])
    assert proc.returncode == 1
    assert_safe(proc)
    assert f"error: {in_error(str(corpus))}: no 'attributes' map column" in proc.stderr

    proc = cli(["constraints", "score", "-i", str(dump), "-o", str(tmp_path / "c.parquet")])
    assert proc.returncode == 2
    assert_safe(proc)
    assert f"absent from {in_error(str(dump))}; present: id, text, system, dataset" in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_job_console_names_shards_safely_and_loses_no_row(tmp_path, ray_address):
    """One local job (joining the session's Ray) on a shard whose name carries escapes, then the
    job's own command line (`ray_jobs.score_corpus`) after the shard is renamed: the summary
    names the reused and the kept folder of the old name, safely."""
    (tmp_path / "in").mkdir()
    name = f"shard{HOSTILE['clipboard']}{HOSTILE['bidi']}"
    pq.write_table(pa.Table.from_pylist(hostile_rows()), tmp_path / "in" / f"{name}.parquet")
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({
        "input": "in", "output": "out", "metrics": [{"name": "text_stats"}], "max_error_rate": 0.5,
        "limits": {"max_cell_bytes": 200}, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.25},
    }))
    env = {"RAY_ADDRESS": ray_address}
    first = run_cli(["run", str(config), "--no-progress"], cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert_safe(first)
    assert "text_stats: 9 in -> 9 out, 9 scored, 0 reused, 1 errors" in first.stdout
    rows = hostile_rows()
    written = pq.read_table(tmp_path / "out" / "text_stats" / name).to_pylist()  # the folder has the raw name
    assert sorted(row["id"] for row in written) == sorted(row["id"] for row in rows)  # raw ids kept
    assert sum(row["error"] is not None for row in written) == 1

    os.rename(tmp_path / "in" / f"{name}.parquet", tmp_path / "in" / "renamed.parquet")
    second = run_cli(["--config", str(config), "--no-progress"], cwd=tmp_path, env=env, module="ray_jobs.score_corpus")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    console = assert_safe(second)
    assert "9 in -> 9 out" in console
    assert shown(name) in console  # the old shard's folder, named recognisably

"""`ctgscore convert` keeps its inputs: an output or report path naming an input is refused
before anything is written (it overwrote the input), and an input that is a pipe (`-i
/dev/stdin`, a shell's `<(...)`) is converted whole although the conversion reads its input
twice (a scan, then the batches): the pipe is copied once to a temporary file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pyarrow.parquet as pq
import pytest

from ctgscore.convert import convert_aligned, convert_file
from ctgscore.testing.cli import QUIET_ENV

LINES = '{"id": "a", "text": "one two", "system": "s"}\n{"id": "b", "text": "three", "system": "s"}\n'

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("flag", ["-o", "--report"])
def test_an_output_naming_the_input_is_refused_and_the_input_kept(tmp_path, cli, flag):
    dump = tmp_path / "dump.jsonl"
    dump.write_text(LINES, encoding="utf-8")
    args = ["convert", "-i", str(dump), "-o", str(dump if flag == "-o" else tmp_path / "out.parquet")]
    if flag == "--report":
        args += ["--report", str(dump)]
    result = cli(args)
    assert result.returncode == 2, result.stderr
    assert "is the input" in result.stderr
    assert dump.read_text(encoding="utf-8") == LINES
    assert not (tmp_path / "out.parquet").exists()


def test_an_aligned_reference_file_named_as_output_is_refused(tmp_path, cli):
    (tmp_path / "c.txt").write_text("a b\nc d\n", encoding="utf-8")
    (tmp_path / "r.txt").write_text("r1\nr2\n", encoding="utf-8")
    result = cli(["convert", "-c", str(tmp_path / "c.txt"), "-r", str(tmp_path / "r.txt"), "-o", str(tmp_path / "r.txt")])
    assert result.returncode == 2 and "is the input" in result.stderr
    assert (tmp_path / "r.txt").read_text(encoding="utf-8") == "r1\nr2\n"


def test_stdin_is_converted_whole(tmp_path):
    output = tmp_path / "out.parquet"
    proc = subprocess.run([sys.executable, "-m", "ctgscore", "convert", "-i", "/dev/stdin", "--format", "jsonl",
                           "-o", str(output)], input=LINES, capture_output=True, text=True, timeout=100,
                          env={**os.environ, **QUIET_ENV})
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(output).column("id").to_pylist() == ["a", "b"]
    assert "2 rows read from /dev/stdin" in proc.stdout


def _fifo(path, text):
    """A named pipe at `path` that a thread fills with `text` once per reader that opens it."""
    os.mkfifo(path)

    def feed():
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


def _copies() -> set[str]:
    import tempfile

    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("ctgscore-convert-")}


def test_named_pipes_are_read_once_and_converted_whole(tmp_path):
    before = _copies()
    _fifo(tmp_path / "dump.jsonl", LINES)
    table, report = convert_file(str(tmp_path / "dump.jsonl"), max_rows=1)
    assert table.column("id").to_pylist() == ["a", "b"] and report.rows_written == 2
    assert report.inputs == [str(tmp_path / "dump.jsonl")]  # named as given, not as its copy
    _fifo(tmp_path / "cands", "a b\nc d\n")
    _fifo(tmp_path / "refs", "r1\nr2\n")
    table, _ = convert_aligned(str(tmp_path / "cands"), [str(tmp_path / "refs")])
    assert table.column("references").to_pylist() == [["r1"], ["r2"]]
    assert _copies() <= before  # the copies are gone


def test_a_long_csv_cell_through_a_pipe_is_kept(tmp_path):
    """A pipe has no size to lift the csv module's cell cap (131,072 characters) to: the cap is
    lifted to the record cap instead, so a long cell is read as from a file, not dropped."""
    long_cell = "x" * 200_000
    _fifo(tmp_path / "dump.csv", f"id,text\n1,{long_cell}\n2,short\n")
    table, report = convert_file(str(tmp_path / "dump.csv"))
    assert table.column("text").to_pylist() == [long_cell, "short"] and not report.dropped

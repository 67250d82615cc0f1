"""The interpreter's exit, not only the command's: a `ctgscore` command that fails with its
one-line error exits with its code every time, as a real process (it used to abort now and then at exit with
`terminate called without an active exception`, SIGABRT, when an Arrow pool thread still held
Python-backed buffers; see `scoring.parquet_read`)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import QUIET_ENV, assert_user_error, run_cli

RUNS = 30


@pytest.fixture
def uncomparable(tmp_path):
    """A dump where dataset 'single' has one system (A) beside 'toy' with three, and a dump of
    'single' alone: the two failing commands of `test_cli_compare`'s skipped-dataset test."""
    rows = [{"id": f"{s}{d}", "system": s, "doc_id": f"d{d}", "dataset": "toy", "m": float(d + i)}
            for i, s in enumerate("ABC") for d in range(5)]
    frame = pd.DataFrame(rows)
    lone = frame[frame["system"] == "A"].assign(dataset="single", id=lambda f: "x" + f["id"])
    mixed, alone = tmp_path / "mixed.parquet", tmp_path / "lone.parquet"
    pq.write_table(pa.Table.from_pandas(pd.concat([frame, lone], ignore_index=True), preserve_index=False), mixed)
    pq.write_table(pa.Table.from_pandas(lone, preserve_index=False), alone)
    return mixed, alone


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.timeout(900)
def test_failing_compare_exits_with_its_code_every_time(uncomparable):
    """30 runs of the failing commands (the two alternate), two processes at a time (the load
    under which the abort showed): nothing to compare exits 1, an unknown system 2 (a usage
    error), with the one error line and nothing else on stderr, every time."""
    mixed, alone = uncomparable
    commands = [(["compare", "-s", alone, "--columns", "m"], 1, ("nothing to compare", "single")),
                (["compare", "-s", mixed, "--systems", "A", "nosuch"], 2, ("'nosuch'", "A, B, C"))]
    jobs = [commands[run % 2] for run in range(RUNS)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda job: (run_cli(job[0], timeout=120), job), jobs))
    codes = [proc.returncode for proc, _ in results]
    assert codes == [code for _, code, _ in jobs], {code: codes.count(code) for code in set(codes)}
    for proc, (_, code, fragments) in results:
        line = assert_user_error(proc, code, *fragments)
        assert proc.stderr.strip() == line  # no abort message after the error line


READ_IN_FRESH_PROCESS = """
import os, sys
import fsspec
from scoring.parquet_read import read_parquet_here
path, columns = sys.argv[1], sys.argv[2:]
fs, root = fsspec.core.url_to_fs(path)
with fs.open(root, "rb") as handle:  # a Python file object, as for s3:// and the CLI
    before = len(os.listdir("/proc/self/task"))
    table = read_parquet_here(handle, columns=columns or None, read_dictionary=["system"])
    after = len(os.listdir("/proc/self/task"))
print(before, after, table.num_rows, table.schema.field("system").type, ",".join(table.column_names), sep="|")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc/self/task")
def test_reading_through_a_python_file_starts_no_arrow_thread(uncomparable):
    """`read_parquet_here` decodes on the calling thread: a fresh interpreter has as many
    threads after the read as before it, and the table is the one written, columns in the
    asked order, the dictionary column dictionary-encoded."""
    mixed, _ = uncomparable
    done = subprocess.run([sys.executable, "-c", READ_IN_FRESH_PROCESS, str(mixed), "m", "system", "id"],
                          capture_output=True, text=True, timeout=120, env={**QUIET_ENV, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    before, after, rows, system_type, names = done.stdout.strip().split("|")
    assert int(after) == int(before)
    assert int(rows) == pq.read_metadata(mixed).num_rows == 20
    assert system_type.startswith("dictionary<values=") and names == "m,system,id"

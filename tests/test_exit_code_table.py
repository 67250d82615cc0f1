"""The README's exit-code table, walked: every mistake it lists is made with real commands (in
this process, through `ctgscore.cli.main`), and each must exit with the table's code, print
one `error:` line and no traceback, and never call itself an internal error. The table is read
from README.md, so a row without cases here, or cases for a row the README dropped, fail."""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error
from tests.job_support import free_port

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
_ROW = re.compile(r"^\| (?P<mistake>.+?) \| (?P<code>\d) \|$")


def exit_code_table() -> dict[str, int]:
    """mistake -> exit code, from the README's `| mistake | exit |` table."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index("| mistake | exit |")
    table = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        match = _ROW.match(line)
        assert match, f"README exit-code row not in `| mistake | code |` form: {line!r}"
        table[match["mistake"]] = int(match["code"])
    return table


@pytest.fixture
def files(tmp_path) -> dict[str, pathlib.Path]:
    rng = np.random.default_rng(0)
    n = 24
    scores = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(n)], "doc_id": [f"d{i // 3}" for i in range(n)],
                             "system": ["A", "B", "C"] * (n // 3), "dataset": ["toy"] * n,
                             "human_q": rng.normal(size=n), "m1": rng.normal(size=n), "error": [None] * n}), scores)
    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c", "d"], "text": ["one two", "three four", "five", "six seven"]}), rows)
    no_text = tmp_path / "no-text.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "hyp": ["one", "two"]}), no_text)
    blank = tmp_path / "blank.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c", "d"], "text": ["", " ", "ok fine", ""]}), blank)
    not_parquet = tmp_path / "notes.parquet"
    not_parquet.write_text("these are notes, not Parquet\n")
    dump = tmp_path / "dump.jsonl"
    dump.write_text(json.dumps({"uid": "1", "hyp": "hello"}) + "\n")
    codi_rows, codi_scores = tmp_path / "codi_rows.parquet", tmp_path / "codi_scores.parquet"
    pq.write_table(pa.table({"id": ["c0", "c1"], "system": ["A", "A"], "text": ["x", "y"],
                             "constraint": [json.dumps({"task": "length"}), json.dumps({"task": "poetry"})]}), codi_rows)
    pq.write_table(pa.table({"id": ["c0", "c1"], "codi_success": [1.0, 0.0], "codi_toxicity": [None, None],
                             "error": [None, None]}, schema=pa.schema([("id", pa.string()), ("codi_success", pa.float64()),
                                                                     ("codi_toxicity", pa.float64()), ("error", pa.string())])),
                   codi_scores)
    other_board = tmp_path / "other-board.json"
    other_board.write_text(json.dumps({"leaderboard": [{"dataset": "summeval", "column": "m1", "system": "A", "rank": 1}]}))
    no_board = tmp_path / "no-board.json"
    no_board.write_text(json.dumps({"rows": []}))
    bad_job = tmp_path / "bad.yaml"
    bad_job.write_text(f"input: {rows}\noutput: {tmp_path / 'out'}\nmetrics: [{{name: text_stats}}]\n"
                       "pool: {min_size: 1, max_sise: 2}\n")
    bad_value = tmp_path / "bad-value.yaml"
    bad_value.write_text(f"input: {rows}\noutput: {tmp_path / 'out'}\nmetrics: [{{name: text_stats}}]\nmax_error_rate: 7\n")
    return {name: path for name, path in locals().items() if isinstance(path, pathlib.Path)} | {"tmp": tmp_path}


def _aws(monkeypatch, tmp_path, credentials: bool) -> str:
    """A closed loopback endpoint; fake credentials or none (no metadata-service lookup)."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "CTGSCORE_S3_MAX_ATTEMPTS",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    if credentials:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return endpoint


def cases(f: dict[str, pathlib.Path]) -> dict[str, list[tuple[list, tuple[str, ...]]]]:
    """README row -> [(ctgscore arguments, fragments the error line names)]."""
    out = f["tmp"] / "o.parquet"
    board = ["compare", "-s", f["scores"], "--columns", "m1", "-o", f["tmp"] / "b.html", "--resamples", "20", "--trials", "20"]
    return {
        "an unknown flag, subcommand, metric or metric parameter; bad `--params`": [
            (["score", "-m", "text_stats", "-i", f["rows"], "-o", out, "--no-such-flag"], ("--no-such-flag",)),
            (["frobnicate"], ("frobnicate",)),
            (["score", "-m", "no_such_metric", "-i", f["rows"], "-o", out], ("no_such_metric",)),
            (["score", "-m", "text_stats", "-i", f["rows"], "-o", out, "--param", "nope=1"], ("nope",)),
            (["score", "-m", "text_stats", "-i", f["rows"], "-o", out, "--params", "{not json"], ("--params",)),
        ],
        "an invalid job config (an unknown key, a bad value)": [
            (["run", f["bad_job"]], ("max_sise",)),
            (["run", f["bad_value"]], ("max_error_rate",)),
        ],
        "a local input named on the command line that does not exist (`-i`, `-s`, `--previous`, a job config)": [
            (["score", "-m", "text_stats", "-i", f["tmp"] / "absent.parquet", "-o", out], ("absent.parquet",)),
            (["meta", "-s", f["tmp"] / "absent", "-o", f["tmp"] / "report"], ("absent",)),
            (board + ["--previous", f["tmp"] / "absent.json"], ("--previous", "absent.json")),
            (["run", f["tmp"] / "absent.yaml"], ("absent.yaml",)),
        ],
        "a column, field or system named by a flag that the data does not have (`--columns`, `--metrics`, "
        "`--human-columns`, `--systems`, `--map`)": [
            (["compare", "-s", f["scores"], "--columns", "nope", "-o", f["tmp"] / "b.md"], ("'nope'",)),
            (["meta", "-s", f["scores"], "--metrics", "nope", "-o", f["tmp"] / "report"], ("'nope'",)),
            (["meta", "-s", f["scores"], "--human-columns", "human_nope", "-o", f["tmp"] / "report"], ("human_nope",)),
            (["compare", "-s", f["scores"], "--systems", "A", "Z", "-o", f["tmp"] / "b.md"], ("'Z'",)),
            (["convert", "-i", f["dump"], "-o", out, "--map", "text=nope"], ("'nope'", "--map")),
        ],
        "a `--previous` file that is no leaderboard JSON, or one of another dataset": [
            (board + ["--previous", f["no_board"]], ("not a leaderboard JSON",)),
            (board + ["--previous", f["scores"]], ("not a leaderboard JSON",)),
            (board + ["--previous", f["other_board"]], ("'summeval'", "'toy'")),
        ],
        "a metric that applies to no row of the run: a column it needs is in no input (`refs` for `references`), "
        "or null in every row": [
            (["score", "-m", "bleu", "-i", f["rows"], "-o", out], ("references",)),
        ],
        "input data that cannot be used: a file that is not Parquet, a missing `id` or `text` column, a CoDI row "
        "of an unknown task": [
            (["score", "-m", "text_stats", "-i", f["not_parquet"], "-o", out], ("notes.parquet",)),
            (["score", "-m", "text_stats", "-i", f["no_text"], "-o", out], ("'text'",)),
            (["constraints", "report", "-i", f["codi_rows"], "--scores", f["codi_scores"], "-o", f["tmp"] / "codi"],
             ("codi_rows.parquet", "'poetry'")),
        ],
        "storage that cannot be reached (a closed port fails in seconds), missing AWS credentials": [
            (["meta", "-s", "s3://bucket/scores/", "-o", f["tmp"] / "report"], ("storage unreachable",)),
            (["compare", "-s", "s3://bucket/scores/", "-o", f["tmp"] / "b.md"], ("no AWS credentials found",)),
        ],
        "more error rows than `--max-error-rate` (default 0.1); every row is still written": [
            (["score", "-m", "text_stats", "-i", f["blank"], "-o", out, "--no-progress"], ("3 of 4 rows",)),
        ],
    }


def test_every_row_of_the_table_has_cases(files):
    table = exit_code_table()
    assert len(table) >= 8 and set(table.values()) == {1, 2}
    assert set(cases(files)) == set(table), "README exit-code table and tests/test_exit_code_table.py differ"


@pytest.mark.timeout(120)
def test_each_mistake_exits_with_the_tables_code(cli, files, monkeypatch):
    table = exit_code_table()
    for mistake, runs in cases(files).items():
        for args, fragments in runs:
            if any(str(arg).startswith("s3://") for arg in args):
                # meta: credentials and a closed port; compare: no credentials at all
                _aws(monkeypatch, files["tmp"], credentials=args[0] == "meta")
            proc = cli(args)
            line = assert_user_error(proc, table[mistake], *fragments)
            assert "internal error" not in line, (mistake, args, line)

"""`ctgscore run` end to end on a local Ray (slow): positional and `--config` forms, `--set`
overrides, the `--json` summary, `--no-progress` printing only the summary, the error-rate exit
code, `python -m ray_jobs.score_corpus`, and the output read back with `load_scores`."""

from __future__ import annotations

import json
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ctgscore
from ctgscore.testing.cli import assert_user_error, run_cli

TEXTS = ["a b c", "", "one two", "x", " ", "y y y y"]


@pytest.fixture
def ray_temp():
    """A short Ray temp dir (Ray's socket paths must stay under 107 bytes)."""
    path = tempfile.mkdtemp(prefix="ctgr-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def job(tmp_path, ray_temp):
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(6)], "text": TEXTS, "system": ["s"] * 6,
                             "human_q": [float(i) for i in range(6)]}), data / "shard-0.parquet")
    config = tmp_path / "job.yaml"
    config.write_text(
        "input: data\noutput: out/first\nmetrics:\n  - name: text_stats\n"
        "batch_size: 4\npool: {min_size: 1, max_size: 1, num_cpus: 0.5}\n"
        f"ray: {{temp_dir: {ray_temp}}}\n"
    )
    return config


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_run_forms_overrides_summary_and_error_rate(job, tmp_path):
    # 2 of 6 rows are blank: above the default max_error_rate (0.1) -> exit 1, every row still written
    proc = run_cli(["run", job, "--no-progress"], cwd=tmp_path)
    line = assert_user_error(proc, 1, "text_stats", "2 of 6")
    assert proc.stderr.strip() == line  # nothing but the one error line on stderr
    assert len(proc.stdout.strip().splitlines()) == 1  # and the one-line summary on stdout
    frame = ctgscore.load_scores(str(tmp_path / "out" / "first"))
    assert frame["id"].tolist() == [f"r{i}" for i in range(6)]
    assert frame["text_stats_words"].fillna(-1).tolist() == [3.0, -1, 2.0, 1.0, -1, 4.0]
    assert frame["human_q"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert frame["error"].notna().tolist() == [False, True, False, False, True, False]

    # --config form, --set overrides (output moved, a higher limit), JSON summary
    proc = run_cli(["run", "--config", job, "--set", "output=out/second", "--max-error-rate", "0.5", "--json"],
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ok"] and summary["metrics"]["text_stats"]["rows_error"] == 2
    assert summary["metrics"]["text_stats"]["rows_out"] == 6
    assert (tmp_path / "out" / "second" / "manifest.json").exists()

    # the ray job submit entry point is the same command
    proc = run_cli(["--config", job, "--set", "output=out/second", "--set", "max_error_rate=0.5", "--no-progress"],
                   cwd=tmp_path, module="ray_jobs.score_corpus")
    assert proc.returncode == 0, proc.stderr
    assert "6 reused" in proc.stdout  # unchanged rows are not scored twice

"""A quiet, truthful console: a small successful job prints ctgscore's own progress bar and
summary, and no Ray or Ray Data log line, no error-level line; with `--no-progress` only the
summary line. The first run starts its own Ray, the second joins a running one (the session's):
both stay quiet."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tempfile

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.job_support import REPO_ROOT, child_env, make_corpus, remove_ray_dir

RAY_LINE = re.compile(
    r"\(raylet\)|\(pid=|\(MapWorker|core_worker|gcs_server|raylet\.cc|Running Dataset|Execution plan|"
    r"ray\.data|Started a local Ray|Connecting to existing Ray|\b(INFO|WARNING|WARN|ERROR|CRITICAL)\b|"
    r"^\[\d{4}-\d\d-\d\d [\d:,]+ [EWF] \d+|Traceback|object store"
)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_console_of_a_small_job_carries_no_ray_lines(ray_address, tmp_path):
    make_corpus(tmp_path / "in", shards=4, rows=25)
    temp_dir = tempfile.mkdtemp(prefix="rjq", dir="/tmp")
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({
        "input": "in", "output": "out", "metrics": [{"name": "text_stats"}, {"name": "slow_length"}],
        "batch_size": 10, "part_rows": 10, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.25},
        "ray": {"num_cpus": 2, "object_store_memory": 300000000, "temp_dir": temp_dir},
    }))
    try:
        runs = {}
        for flags, joined in (((), {}), (("--no-progress",), {"RAY_ADDRESS": ray_address})):
            result = subprocess.run(
                [sys.executable, "-m", "ray_jobs.score_corpus", "--config", str(config), *flags],
                cwd=REPO_ROOT, env=child_env(**joined), capture_output=True, text=True, timeout=200,
            )
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            runs[flags] = result
            # the second run reuses everything: score again from scratch for the quiet check
            for part in (tmp_path / "out").rglob("*.parquet"):
                part.unlink()
    finally:
        remove_ray_dir(temp_dir)
    with_bars = runs[()]
    lines = [line for line in re.split(r"[\r\n]", with_bars.stderr) if line.strip()]
    assert lines, "no progress bar drawn"
    assert all(line.startswith(("score text_stats", "score slow_length")) for line in lines), lines[:10]
    assert not [line for line in lines if RAY_LINE.search(line)]
    assert {line.split(":")[0] for line in lines} == {"score text_stats", "score slow_length"}  # one bar per metric
    quiet = runs[("--no-progress",)]
    assert quiet.stderr == ""
    out = quiet.stdout.strip().splitlines()
    assert len(out) == 1 and "text_stats: 100 in -> 100 out, 100 scored" in out[0]
    assert not RAY_LINE.search(quiet.stdout)


def test_cluster_messages_go_to_the_session_log_not_stdout(tmp_path, monkeypatch, capsys):
    """What the cluster pushes to a driver (here the raylet's worker-pool warning that once
    reached a joined job's console) is written to the session's log file, not printed."""
    from ray._private import worker as ray_worker

    from ray_jobs import session

    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)  # restored afterwards
    monkeypatch.setattr(session, "_session_log", lambda name: str(tmp_path / name))
    session.divert_cluster_messages()
    session.divert_cluster_messages()  # idempotent
    warning = "WARNING: 8 PYTHON worker processes have been started on node: abc"
    ray_worker.print_to_stdstream({"lines": [warning], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert (tmp_path / "ctgscore-ray-messages.log").read_text() == f"(raylet) {warning}\n"

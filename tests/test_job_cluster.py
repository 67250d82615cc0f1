"""The job on Ray clusters the tests start themselves: `ray start --head` + `ray job submit`
(acceptance 3), a multi-node local cluster with a scoring actor killed mid-run (4), and a
driver killed mid-run then resumed (5). Every cluster gets its own temp dir and ports and is
stopped by killing the processes this test started (never `ray stop`, which would kill every
Ray on the machine, other sessions' included)."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq
import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.job_support import (
    REPO_ROOT,
    VENV_BIN,
    child_env,
    make_corpus,
    stop_group,
)


def write_config(path: pathlib.Path, **data) -> pathlib.Path:
    base = {"batch_size": 10, "pool": {"min_size": 1, "max_size": 2, "num_cpus": 0.5}, "progress": False}
    path.write_text(yaml.safe_dump({**base, **data}))
    return path


def all_output_ids(folder: pathlib.Path) -> list[str]:
    ids = []
    for path in sorted(folder.rglob("*.parquet")):
        ids.extend(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    return ids


def input_ids(paths) -> list[str]:
    return [i for p in paths for i in pq.read_table(p, columns=["id"]).column("id").to_pylist()]


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_ray_job_submit_to_ray_start_head(ray_head, tmp_path):
    """`ray job submit` to a `ray start --head` (the session's `ray_head`, which also checks that
    nothing of the head outlives it)."""
    corpus = make_corpus(tmp_path / "in", shards=8, rows=15)
    config = write_config(tmp_path / "job.yaml", input=str(tmp_path / "in"), output=str(tmp_path / "out"),
                          metrics=[{"name": "text_stats"}])
    submit = subprocess.run(
        [str(VENV_BIN / "ray"), "job", "submit", "--address", ray_head, "--working-dir", ".",
         "--submission-id", f"rescore-test-{os.getpid()}", "--",
         "python", "-m", "ray_jobs.score_corpus", "--config", str(config), "--no-progress"],
        cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=300,
    )
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert "succeeded" in submit.stdout
    assert "text_stats: 120 in -> 120 out" in submit.stdout  # the job's one-line summary
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["metrics"]["text_stats"]["rows_out"] == 120
    assert sorted(all_output_ids(tmp_path / "out" / "text_stats")) == sorted(input_ids(corpus))


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_killed_actor_on_multi_node_cluster_rows_exactly_once(tmp_path):
    corpus = make_corpus(tmp_path / "in", shards=8, rows=40)
    pid_dir = tmp_path / "pids"
    config = write_config(
        tmp_path / "job.yaml", input=str(tmp_path / "in"), output=str(tmp_path / "out"),
        metrics=[{"name": "slow_length", "params": {"delay": 0.03, "pid_dir": str(pid_dir)}}],
        pool={"min_size": 2, "max_size": 2, "num_cpus": 0.5},
    )
    temp_dir = tempfile.mkdtemp(prefix="rjc", dir="/tmp")
    driver = subprocess.Popen(
        [sys.executable, "-c", f"from tests.job_support import run_on_local_cluster; "
                               f"run_on_local_cluster({str(config)!r}, {temp_dir!r})"],
        cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    killed = None
    try:
        deadline = time.time() + 120
        while time.time() < deadline and killed is None:
            assert driver.poll() is None, driver.communicate()[0][-4000:]
            actors = [int(p.name) for p in pid_dir.glob("*")] if pid_dir.exists() else []
            actors = [pid for pid in actors if pid != driver.pid]  # the driver builds the metric once too
            if len(actors) == 2:  # the whole pool is up
                time.sleep(0.5)  # let it get a few batches in flight
                killed = actors[0]
                killed_at = time.time()
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.1)
        assert killed is not None, "no scoring actor started"
        output, _ = driver.communicate(timeout=240)
    finally:
        stop_group(driver, marker=temp_dir)
    assert driver.returncode == 0, output[-4000:]
    assert "NODES 3" in output
    actors = [int(p.name) for p in pid_dir.glob("*") if int(p.name) != driver.pid]
    # a pool of at most 2 actors had a third scoring process: the killed actor was restarted
    assert len(actors) >= 3, f"no scoring actor was restarted after the kill (actor pids: {actors})"
    assert any(p.stat().st_mtime > killed_at for p in pid_dir.glob("*") if int(p.name) not in (killed, driver.pid))
    ids = all_output_ids(tmp_path / "out" / "slow_length")
    assert len(ids) == len(set(ids)) == 320
    assert sorted(ids) == sorted(input_ids(corpus))
    stats = json.loads(output.split("MANIFEST ", 1)[1].splitlines()[0])["slow_length"]
    assert stats["rows_in"] == stats["rows_out"] == 320


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_killed_driver_resumes_without_duplicates_or_gaps(ray_local, tmp_path):
    from ray_jobs.config import load_config
    from ray_jobs.score_corpus import run_job

    corpus = make_corpus(tmp_path / "in", shards=10, rows=30)
    temp_dir = tempfile.mkdtemp(prefix="rjd", dir="/tmp")
    metrics = [{"name": "slow_length", "params": {"delay": 0.03}}]
    config = write_config(tmp_path / "job.yaml", input=str(tmp_path / "in"), output=str(tmp_path / "out"),
                          metrics=metrics, ray={"num_cpus": 2, "object_store_memory": 300000000, "temp_dir": temp_dir})
    out = tmp_path / "out" / "slow_length"
    driver = subprocess.Popen(
        [sys.executable, "-m", "ray_jobs.score_corpus", "--config", str(config), "--no-progress"],
        cwd=REPO_ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list(out.rglob("part-*.parquet")) if out.exists() else []) < 2:
            assert driver.poll() is None, "the job ended before it could be killed"
            time.sleep(0.05)
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and the local Ray it started
        driver.wait(timeout=30)
    finally:
        stop_group(driver, marker=temp_dir)
    committed = sorted(str(p.relative_to(out)) for p in out.rglob("part-*.parquet"))
    assert 2 <= len(committed) < 10, committed  # one part per 30-row shard (part_rows is larger)
    assert not (tmp_path / "out" / "manifest.json").exists()  # an interrupted run leaves no manifest

    resumed = run_job(load_config(config))  # second run on the session's Ray
    report = resumed["metrics"]["slow_length"]
    assert report["shards_reused"] == len(committed)
    assert report["rows_scored"] == 300 - 30 * len(committed)  # fewer rows scored the second time
    ids = all_output_ids(out)
    assert len(ids) == len(set(ids)) == 300  # no duplicates, no gaps
    assert sorted(ids) == sorted(input_ids(corpus))
    assert sorted(p.parent.name for p in out.rglob("part-*.parquet")) == sorted(p.stem for p in corpus)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_killed_driver_mid_shard_resumes_only_uncommitted_parts(ray_local, tmp_path):
    """One large shard in parts of 50 rows: the driver (and its local Ray) is killed while
    the shard is half scored; the re-run keeps every committed part untouched and scores
    exactly the rows of the parts that were not committed."""
    import pyarrow as pa

    from ray_jobs.config import load_config
    from ray_jobs.score_corpus import run_job
    from tests.job_support import make_rows

    rows = make_rows(0, 1200)
    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in" / "big.parquet", row_group_size=130)
    temp_dir = tempfile.mkdtemp(prefix="rjp", dir="/tmp")
    config = write_config(tmp_path / "job.yaml", input=str(tmp_path / "in"), output=str(tmp_path / "out"),
                          metrics=[{"name": "slow_length", "params": {"delay": 0.01}}], part_rows=50,
                          ray={"num_cpus": 2, "object_store_memory": 300000000, "temp_dir": temp_dir})
    out = tmp_path / "out" / "slow_length" / "big"
    driver = subprocess.Popen(
        [sys.executable, "-m", "ray_jobs.score_corpus", "--config", str(config), "--no-progress"],
        cwd=REPO_ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list(out.glob("part-*.parquet")) if out.exists() else []) < 4:
            assert driver.poll() is None, "the job ended before it could be killed"
            time.sleep(0.05)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        stop_group(driver, marker=temp_dir)
    committed = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    assert 4 <= len(committed) < 24, sorted(committed)

    resumed = run_job(load_config(config))
    report = resumed["metrics"]["slow_length"]
    assert report["parts_kept"] == len(committed)
    assert report["rows_scored"] == 1200 - 50 * len(committed)  # only the parts not committed
    assert report["parts_written"] == 24 - len(committed)
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    assert {name: after[name] for name in committed} == committed  # committed parts untouched
    assert len(after) == 24 and not [p for p in out.iterdir() if p.name.startswith(".")]
    ids = all_output_ids(tmp_path / "out" / "slow_length")
    assert ids == [row["id"] for row in rows]  # exactly once, in input order (parts sort by row)


def _readme_submit_line() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    [line] = [ln for ln in text.splitlines() if ln.startswith("ray job submit --address http://127.0.0.1:8265")]
    return line


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_readme_submit_line_works_against_a_local_head(ray_head, tiny_models, tmp_path):
    """The README's line, with $PWD/out and $PWD/.cache/tiny-models pointed at this test's folders,
    against a `ray start --head` (`ray_head`, shared with the submit test above)."""
    line = _readme_submit_line()
    models = pathlib.Path(tiny_models["gpt2"]).parent
    command = (line.replace("http://127.0.0.1:8265", ray_head)
               .replace("$PWD/out", str(tmp_path / "out")).replace("$PWD/.cache/tiny-models", str(models))
               .replace("ray job submit", f"{shlex.quote(str(VENV_BIN / 'ray'))} job submit", 1))
    submit = subprocess.run(command, shell=True, cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True,
                            timeout=240)
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert "succeeded" in submit.stdout
    manifest = json.loads((tmp_path / "out" / "sample" / "manifest.json").read_text())
    assert set(manifest["metrics"]) == {"text_stats", "perplexity"}
    assert manifest["metrics"]["perplexity"]["rows_out"] == 280
    assert (tmp_path / "out" / "sample" / "perplexity").is_dir()

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
def test_run_forms_overrides_summary_and_error_rate(job, tmp_path, ray_address):
    shared_ray = {"RAY_ADDRESS": ray_address}  # join the test run's Ray (as under `ray job submit`)
    # 2 of 6 rows are blank: above the default max_error_rate (0.1) -> exit 1, every row still written
    proc = run_cli(["run", job, "--no-progress"], cwd=tmp_path, env=shared_ray)
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
                   cwd=tmp_path)  # its own local Ray: starting one prints nothing either
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # a successful run: no Ray log lines, no warnings, no bars with --json
    summary = json.loads(proc.stdout)
    assert summary["ok"] and summary["metrics"]["text_stats"]["rows_error"] == 2
    assert summary["metrics"]["text_stats"]["rows_out"] == 6
    assert summary["metrics"]["text_stats"]["error_reasons"] == {"empty field 'text'": 2}
    assert (tmp_path / "out" / "second" / "manifest.json").exists()

    # the ray job submit entry point is the same command, on a console that spells only ASCII: the
    # summary names a file it did not read as `_notes-\xe9.parquet` (was a UnicodeEncodeError, exit 1)
    (tmp_path / "data" / "_notes-é.parquet").write_bytes(b"")
    proc = run_cli(["--config", job, "--set", "output=out/second", "--set", "max_error_rate=0.5", "--no-progress"],
                   cwd=tmp_path, module="ray_jobs.score_corpus", env={**shared_ray, "PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and len(proc.stdout.strip().splitlines()) == 1
    assert "6 reused" in proc.stdout  # unchanged rows are not scored twice
    assert "_notes-\\xe9.parquet" in proc.stdout


def _numbers(node):
    """Every number in a JSON document, in order (timings and paths left out)."""
    if isinstance(node, dict):
        return [x for key, value in sorted(node.items()) if key not in ("wall_s", "seconds", "elapsed_s")
                for x in _numbers(value)]
    if isinstance(node, list):
        return [x for value in node for x in _numbers(value)]
    return [node] if isinstance(node, (int, float)) and not isinstance(node, bool) else []


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_ray_tasks_give_the_same_numbers_as_one_process(tmp_path, ray_temp, ray_address):
    import numpy as np

    rng = np.random.default_rng(5)
    human = rng.normal(size=60)
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(60)], "doc_id": [str(i // 3) for i in range(60)],
                             "system": [f"s{i % 3}" for i in range(60)], "human_q": human,
                             "m1": human + rng.normal(size=60), "m2": rng.normal(size=60)}), path)
    env = {"RAY_TMPDIR": ray_temp, "RAY_ADDRESS": ray_address}  # the Ray tasks run on the test run's Ray
    reports = {}
    for tasks in ("0", "2"):
        out = tmp_path / f"report-{tasks}"
        proc = run_cli(["meta", "-s", path, "-o", out, "--tasks", tasks, "--resamples", "200", "--trials", "200",
                        "--no-progress"], env=env)
        assert proc.returncode == 0, proc.stderr
        reports[tasks] = json.loads((out / "results.json").read_text())
    assert _numbers(reports["0"]) == _numbers(reports["2"])

    splits = {}
    for tasks in ("1", "2"):
        out = tmp_path / f"splits-{tasks}.json"
        proc = run_cli(["splits", "--aspects", "Fyelp", "--protocol", "acd", "--search", "climb", "--restarts", "16",
                        "--max-iters", "50", "--max-splits", "3", "--tasks", tasks, "-o", out], env=env)
        assert proc.returncode == 0, proc.stderr
        splits[tasks] = [(s["seen"], s["divergence"]) for s in json.loads(out.read_text())["splits"]]
    assert splits["1"] == splits["2"] and splits["1"]

"""`ctgscore leaderboard JOB.yaml` end to end on a local dump (slow: it runs the Ray job): the
first refresh ranks two systems; after one system's rows are added, the second refresh scores
only those rows and reports the new system's rank and what moved."""

from __future__ import annotations

import json
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import run_cli


def write_system(path, system: str, words: int) -> None:
    """Ten documents; a system's texts have `words` words, give or take one per document."""
    texts = [" ".join(["w"] * (words + doc % 3 - 1)) for doc in range(10)]
    pq.write_table(pa.table({"id": [f"{system}-{d}" for d in range(10)], "text": texts, "system": [system] * 10,
                             "doc_id": [f"d{d}" for d in range(10)], "dataset": ["toy"] * 10}), path)


@pytest.fixture
def ray_temp():
    path = tempfile.mkdtemp(prefix="ctgl-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_refresh_scores_only_new_rows_and_reports_moves(tmp_path, ray_temp, ray_address):
    data = tmp_path / "data"
    data.mkdir()
    write_system(data / "a.parquet", "sysA", 5)
    write_system(data / "b.parquet", "sysB", 8)
    config = tmp_path / "job.yaml"
    config.write_text("input: data\noutput: out\nmetrics:\n  - name: text_stats\nbatch_size: 8\n"
                      f"pool: {{min_size: 1, max_size: 1, num_cpus: 0.5}}\nray: {{temp_dir: {ray_temp}}}\n")
    args = ["leaderboard", config, "-o", tmp_path / "board", "--columns", "text_stats_words",
            "--resamples", "200", "--trials", "200", "--no-progress"]
    shared_ray = {"RAY_ADDRESS": ray_address}  # the test run's Ray: no Ray start per refresh
    first = run_cli(args + ["--json"], cwd=tmp_path, env=shared_ray)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["job"]["text_stats"] == {"rows_scored": 20, "rows_cached": 0} and not summary["previous"]
    assert [(r["system"], r["rank"]) for r in summary["leaderboard"]] == [("sysB", 1), ("sysA", 2)]
    board = tmp_path / "board"
    assert (board / "board.html").read_text().count("<section") == 1

    write_system(data / "c.parquet", "sysC", 12)
    second = run_cli(args, cwd=tmp_path, env=shared_ray)
    assert second.returncode == 0, second.stderr
    assert "scored 10 new or changed rows (20 reused)" in second.stdout
    assert "toy / text_stats_words: leader sysC 11.9; new sysC rank 1; sysB ▼1 to 2; sysA ▼1 to 3" in second.stdout
    saved = json.loads((board / "leaderboard.json").read_text())
    assert [(r["system"], r["rank"]) for r in saved["leaderboard"]] == [("sysC", 1), ("sysB", 2), ("sysA", 3)]
    assert saved["job"]["text_stats"] == {"rows_scored": 10, "rows_cached": 20}
    history = [json.loads(line) for line in (board / "history.jsonl").read_text().splitlines()]
    assert [h["leaders"] for h in history] == [[{"dataset": "toy", "column": "text_stats_words", "system": s}]
                                               for s in ("sysB", "sysC")]
    page = (board / "board.html").read_text()
    assert "▼1" in page and ">new<" in page


def test_the_cronjob_command_parses():
    """deploy/leaderboard-cronjob.yaml submits a `ctgscore leaderboard` command line that the CLI accepts."""
    import pathlib
    import shlex

    import yaml

    from ctgscore.cli.main import build_parser

    root = pathlib.Path(__file__).resolve().parents[1]
    cron = yaml.safe_load((root / "deploy" / "leaderboard-cronjob.yaml").read_text())
    command = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    argv = shlex.split(command.split(" -- ", 1)[1])
    assert argv[:3] == ["python", "-m", "ctgscore"]
    args = build_parser().parse_args(argv[3:])
    assert args.handler.__module__ == "ctgscore.cli.leaderboard"
    assert (root / args.config_path).exists() and args.tasks == 8

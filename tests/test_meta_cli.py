"""The command line around the statistics: the README's `ray job submit` line works as written,
`meta` stays in-process for small inputs, progress bars only on a terminal and never under
`--no-progress`, a redirected job log without cursor codes."""

from __future__ import annotations

import json
import os
import pathlib
import pty
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import QUIET_ENV, run_cli
from tests.job_support import REPO_ROOT, child_env, free_port

CURSOR = re.compile(r"\x1b\[|\r")


def _scores(tmp_path) -> pathlib.Path:
    from benchmarks.bench_meta_cli import scores

    return scores(tmp_path)


def test_meta_with_default_flags_stays_in_this_process(tmp_path):
    code = ("import sys; from ctgscore.cli.main import main; "
            f"rc = main(['meta', '-s', {str(_scores(tmp_path))!r}, '-o', {str(tmp_path / 'r')!r}, "
            "'--resamples', '50', '--trials', '50', '--no-progress']); "
            "sys.exit(rc or (3 if 'ray' in sys.modules else 0))")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **QUIET_ENV}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # 3: Ray was imported for 64 rows
    assert (tmp_path / "r" / "report.html").exists()
    assert "default auto" in run_cli(["meta", "--help"]).stdout


def _on_a_terminal(args: list[str]) -> str:
    """Run `python -m ctgscore ARGS` with stderr on a pseudo-terminal; returns what it drew there."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ctgscore", *args], stdout=subprocess.PIPE, stderr=slave,
                            env={**os.environ, **QUIET_ENV})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.communicate(timeout=120)
    os.close(master)
    assert proc.returncode == 0
    return b"".join(chunks).decode(errors="replace")


def test_splits_prints_no_bar_under_no_progress_even_on_a_terminal(tmp_path, monkeypatch):
    aspects = json.dumps({"a": ["1", "2", "3"], "b": ["x", "y", "z"], "c": ["p", "q"]})
    args = ["splits", "--aspects", aspects, "--protocol", "acd", "--restarts", "200", "--search", "climb",
            "-o", str(tmp_path / "s.json")]
    assert _on_a_terminal(args + ["--no-progress"]).strip() == ""
    proc = run_cli(args)  # not a terminal: no bar either, and a rounded divergence
    assert "restart blocks" not in proc.stderr and not CURSOR.search(proc.stderr)
    assert re.search(r"max divergence \d\.\d{4} ->", proc.stdout), proc.stdout
    # the in-process runner draws its bar only when asked to and on a terminal
    from splits import protocols

    drawn = []
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr("tqdm.tqdm", lambda blocks, **kw: drawn.append(kw) or blocks)

    class Problem:
        def run_block(self, start, stop):
            return list(range(start, stop))

    blocks = [(k, k + 1) for k in range(6)]
    assert protocols.local_runner(Problem(), blocks, progress=False) == list(range(6)) and not drawn
    assert protocols.local_runner(Problem(), blocks) == list(range(6)) and drawn


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_redirected_run_log_has_no_cursor_codes(tiny_models, ray_address, tmp_path):
    """`ctgscore run` with its output redirected to a file (joining the session's Ray)."""
    model = tiny_models["gpt2"]
    log = tmp_path / "run.log"
    with open(log, "w") as handle:
        proc = subprocess.run(
            [sys.executable, "-m", "ctgscore", "run", "examples/sample_local.yaml", "--set",
             f"output={tmp_path / 'out'}", "--set", f"metrics.1.params.model={model}"],
            cwd=REPO_ROOT, env=child_env(RAY_ADDRESS=ray_address), stdout=handle, stderr=subprocess.STDOUT, timeout=280)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert not CURSOR.search(text), text[-2000:]
    assert "perplexity" in text and (tmp_path / "out" / "manifest.json").exists()


def test_unreachable_hub_default_model_fails_fast_naming_it(tmp_path):
    from ctgscore.testing.cli import assert_user_error

    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": ["hello there world"]}), rows)
    env = {"HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    proc = run_cli(["score", "-m", "perplexity", "-i", rows, "-o", tmp_path / "out.parquet"], env=env, timeout=60)
    assert_user_error(proc, 2, "'gpt2'", "cannot be reached")

"""Running `ctgscore` and checking what a user sees: in this process through `main(argv)`
(`run_cli_in_process`, fast: no interpreter start, no imports again), or in a subprocess the way
a user does (`run_cli`: the real exit status, the console, the interpreter's exit)."""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import subprocess
import sys
from typing import Sequence

QUIET_ENV = {
    # tests only: their local Rays skip the token (no ~/.ray/auth_token written by a test run);
    # the product keeps Ray's default, token authentication (ray_jobs/session.py)
    "RAY_AUTH_MODE": "disabled",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def run_cli(args: Sequence[str], cwd: str | pathlib.Path | None = None, timeout: float = 300,
            module: str = "ctgscore", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m ctgscore ARGS` (or another module) with captured text output."""
    full_env = {**os.environ, **QUIET_ENV, **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def run_cli_in_process(args: Sequence[str], cwd: str | pathlib.Path | None = None,
                       env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`ctgscore ARGS` through `ctgscore.cli.main.main` in this process, with stdout and stderr
    captured (neither is a terminal, as under `run_cli`); `cwd` and `env` hold while it runs.
    Returns what `run_cli` returns. For commands that stay in this process: a command that
    starts Ray or a job, or a check of the interpreter's exit, belongs in `run_cli`."""
    from ctgscore.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    extra = {**QUIET_ENV, **(env or {})}
    saved_env, saved_cwd = {key: os.environ.get(key) for key in extra}, os.getcwd()
    os.environ.update(extra)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # what the interpreter would turn into the exit status
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
                if exc.code is not None and not isinstance(exc.code, int):
                    print(exc.code, file=sys.stderr)
    finally:
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["ctgscore", *map(str, args)], code, out.getvalue(), err.getvalue())


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def assert_user_error(proc: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    """The process exited with `code`, printed no traceback, and exactly one `error:` line on
    stderr that contains every fragment; returns that line."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]

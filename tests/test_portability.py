"""The test suite's own helpers on machines unlike the 2-core one it was written on
(CONTRIBUTING.md, "Where the tests run")."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile

import pytest

from tests.job_support import stop_group


def test_stop_group_removes_its_cluster_dir_under_tmp_whatever_tmpdir_says(tmp_path, monkeypatch):
    """The clusters the tests start keep their Ray dirs in /tmp (short socket paths), also when
    $TMPDIR points elsewhere: stopping one removes its dir there too (it was left behind, a Ray
    session of logs per test, when $TMPDIR was not /tmp)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what gettempdir() says under another $TMPDIR
    marker = pathlib.Path(tempfile.mkdtemp(prefix="rport", dir="/tmp"))
    (marker / "session_latest").mkdir()
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        stop_group(process, marker=str(marker), grace=5)
        assert process.returncode is not None  # the group was stopped
        assert not marker.exists()
    finally:
        shutil.rmtree(marker, ignore_errors=True)


FRESH_CLONE_EXAMPLES = ("demo.yaml", "sample_local.yaml")  # the job configs a newcomer runs locally (README)


def test_the_local_examples_fit_the_ray_they_start_on_one_core(repo_root, monkeypatch):
    """`make demo` and `ctgscore run examples/sample_local.yaml` on one core (or in a container
    limited to one CPU): the local Ray they start has `ray.num_cpus` logical CPUs, else as many
    as Ray detects, and their pools must leave half a CPU to Ray Data's reads, or the job
    refuses to start (`check_pool_fits`; the demo's five pools of 0.2 CPU did on one CPU)."""
    import types

    import ray

    from ray_jobs.config import load_config, metric_pool
    from ray_jobs.job.cluster import check_pool_fits

    local = types.SimpleNamespace(local=True)
    for name in FRESH_CLONE_EXAMPLES:
        config = load_config(str(repo_root / "examples" / name))
        assert config.ray.address is None and not config.input.startswith("s3://"), name
        pools = [metric_pool(config, spec) for spec in config.metrics]
        cpus = float(config.ray.num_cpus or 1)  # a one-core machine: Ray counts one CPU
        monkeypatch.setattr(ray, "cluster_resources", lambda cpus=cpus: {"CPU": cpus})
        check_pool_fits(pools, local)  # raises ConfigError when the pools leave no room to read


def test_the_browser_starts_under_a_deep_tmpdir(tmp_path, monkeypatch):
    """Headless Chromium under a $TMPDIR over 120 bytes long, where a Unix socket would pass
    107 bytes: the report and leaderboard pages still render (Chromium stopped at start with
    "Socket path too long", and every browser test with it)."""
    browser = pytest.importorskip("tests.browser")
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    page = tmp_path / "page.html"
    page.write_text("<!doctype html><title>deep</title><h1 id='top'>ok</h1><a href='#top'>top</a>")
    rendered, _ = browser.render(page, width=400, height=300)
    assert rendered.title == "deep" and rendered.anchors == [{"href": "#top", "text": "top", "target_exists": True}]


def test_the_socket_room_check_matches_ray_at_the_byte(monkeypatch):
    """`check_socket_room` refuses exactly the temp folders whose socket paths Ray's own check
    refuses: 107 bytes pass, 108 do not (probed against Ray 2.60 when written)."""
    import os

    from ray_jobs.session import _SESSION_SOCKET, SOCKET_PATH_MAX, check_socket_room
    from scoring.errors import UsageError

    room = SOCKET_PATH_MAX - len(_SESSION_SOCKET.format(pid=os.getpid()))
    check_socket_room("/" + "d" * (room - 1))  # 107 bytes: Ray starts
    with pytest.raises(UsageError, match=r"'ray\.temp_dir'.* 108 bytes, past the 107-byte limit"):
        check_socket_room("/" + "d" * room)
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", "/" + "t" * 60)  # Ray's default under it: $TMPDIR/ray
    with pytest.raises(UsageError, match=r"\(from \$TMPDIR\) is too deep.*such as /tmp/ray"):
        check_socket_room(None)
    monkeypatch.setenv("RAY_TMPDIR", "/tmp")  # Ray's own variable comes first
    check_socket_room(None)


@pytest.mark.timeout(300)
def test_a_run_under_a_deep_temp_folder_is_refused_before_ray_starts(tmp_path, repo_root):
    """`ctgscore run` whose local Ray would keep its sockets too deep: exit 2 naming the folder
    and the fix (it was Ray's own OSError mid-start, exit 1)."""
    from ctgscore.testing.cli import run_cli

    deep = tmp_path / ("d" * 90)
    config = tmp_path / "job.yaml"
    config.write_text(f"input: {repo_root / 'data' / 'sample'}\noutput: {tmp_path / 'out'}\n"
                      f"metrics: [{{name: text_stats}}]\nray: {{temp_dir: {deep}}}\n")
    got = run_cli(["run", config], env={"RAY_ADDRESS": ""})
    assert got.returncode == 2, got.stderr
    assert "is too deep" in got.stderr and "set 'ray.temp_dir' in the job config" in got.stderr
    assert not deep.exists()  # Ray never started there


def test_wait_port_gives_up_as_soon_as_the_process_to_listen_has_ended():
    """The session's Ray is awaited up to 180 s on a loaded machine; a head that died at once (a
    port taken before it bound it) is seen at once, so the start is tried again with new ports."""
    import time

    from tests.job_support import free_port, wait_port

    dead = subprocess.Popen(["true"])
    dead.wait()
    started = time.monotonic()
    with pytest.raises(ChildProcessError, match="ended"):
        wait_port(free_port(), timeout=60, alive=dead)
    assert time.monotonic() - started < 5


def test_a_console_that_cannot_spell_a_character_gets_its_escape_not_an_error():
    """An ASCII (or Latin-1) console: a character it has no byte for prints as its Python escape;
    a UTF-8 console is left as it is."""
    import io

    from scoring.console_text import escape_what_the_console_cannot_encode

    ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    latin_out = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    utf8_out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="surrogateescape")
    escape_what_the_console_cannot_encode(ascii_out, latin_out, utf8_out, io.StringIO())
    for stream in (ascii_out, latin_out, utf8_out):
        stream.write("café 中文\n")
        stream.flush()
    assert ascii_out.buffer.getvalue() == b"caf\\xe9 \\u4e2d\\u6587\n"
    assert latin_out.buffer.getvalue() == "café \\u4e2d\\u6587\n".encode("latin-1")
    assert utf8_out.errors == "surrogateescape" and utf8_out.buffer.getvalue() == "café 中文\n".encode()


@pytest.mark.timeout(120)
def test_score_on_an_ascii_console_names_a_non_ascii_output_and_exits_0(tmp_path):
    """`ctgscore score -o outé` with PYTHONIOENCODING=ascii (or an ASCII locale without UTF-8
    mode): the summary line names the folder as `out\\xe9` (it was "internal error:
    UnicodeEncodeError", exit 1, after the scores were written)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctgscore.testing.cli import run_cli

    pq.write_table(pa.table({"id": ["a", "b"], "text": ["café au lait", "naïve"]}), tmp_path / "dump.parquet")
    got = run_cli(["score", "-m", "text_stats", "-i", tmp_path / "dump.parquet", "-o", tmp_path / "outé"],
                  env={"PYTHONIOENCODING": "ascii"})
    assert got.returncode == 0, got.stderr
    assert "2 rows, 0 with an error" in got.stdout and "out\\xe9" in got.stdout
    assert pq.read_table(tmp_path / "outé").num_rows == 2


#: Python without UTF-8 mode in the C locale: ASCII is its locale encoding (LC_ALL=C alone turns UTF-8 mode on)
ASCII_LOCALE = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}


def test_the_tiny_corpus_reads_the_same_in_an_ascii_locale(repo_root):
    """The tiny models' corpus (six lines outside ASCII) reads as UTF-8 whatever the locale says
    (it was read in the locale's encoding: UnicodeDecodeError in an ASCII locale, other words
    and another IWF table in a Latin-1 one)."""
    import json
    import os
    import sys

    from ctgscore.testing.tiny_models import corpus_lines

    code = "import json; from ctgscore.testing.tiny_models import corpus_lines; print(json.dumps(corpus_lines()))"
    got = subprocess.run([sys.executable, "-c", code], env={**os.environ, **ASCII_LOCALE, "PYTHONPATH": str(repo_root)},
                         capture_output=True, timeout=120)
    assert got.returncode == 0, got.stderr.decode(errors="replace")[-2000:]
    lines = corpus_lines()
    assert json.loads(got.stdout) == lines and any(not line.isascii() for line in lines)


def test_the_suite_stops_at_once_without_utf8_file_names_and_make_test_gives_them(repo_root):
    """Without UTF-8 file names (`LC_ALL=C PYTHONUTF8=0`: ASCII) a pytest run stops before any test
    with one line that says why and what to set (it ran, and some 60 of the hostile-name,
    multilingual and source-reading tests failed); `make` gives its recipes PYTHONUTF8=1, so
    `make test` runs in any locale."""
    import os
    import sys

    env = {**os.environ, **ASCII_LOCALE, "PYTHONPATH": str(repo_root)}
    got = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--collect-only",
                          str(repo_root / "tests" / "test_tiers.py")], cwd=repo_root, env=env, capture_output=True,
                         timeout=120)
    assert got.returncode == pytest.ExitCode.USAGE_ERROR, got.stdout[-2000:]
    assert b"the tests need UTF-8 file names" in got.stderr and b"set PYTHONUTF8=1" in got.stderr
    if shutil.which("make") is None:
        pytest.skip("no make here")
    probe = 'probe: ; @"$(PY)" -c "import sys; print(sys.getfilesystemencoding())"'
    made = subprocess.run(["make", "-s", f"--eval={probe}", "probe", f"PY={sys.executable}"], cwd=repo_root, env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0 and made.stdout.strip() == "utf-8", made.stderr


def test_the_readme_lines_keep_a_checkout_path_with_a_space_in_one_argument(repo_root, tmp_path):
    """The README's command lines that name `$PWD` (`ctgscore run ... --set input=$PWD/...`,
    `ray job submit`), run from a checkout whose path holds a space: each `--set key=$PWD/...`
    stays one argument (`$PWD` was unquoted: the path split in two, and the command got
    `--set output=/home/a` and a stray word)."""
    checkout = tmp_path / "my checkout é"
    checkout.mkdir()
    lines = [ln.split("   #")[0] for ln in (repo_root / "README.md").read_text(encoding="utf-8").splitlines()
             if "$PWD" in ln]
    assert any(ln.startswith("ray job submit --address") for ln in lines) and any(ln.startswith("ctgscore run") for ln in lines)
    for line in lines:
        echo = "words() { printf '%s\\n' \"$@\"; }; words " + line.split(" ", 1)[1]  # the words the command gets
        got = subprocess.run(["bash", "-c", echo], cwd=checkout, capture_output=True, text=True, timeout=30)
        named = [word for word in got.stdout.splitlines() if str(tmp_path) in word]
        assert got.returncode == 0 and named, (line, got.stdout, got.stderr)
        assert all(f"={checkout}/" in word for word in named), (line, named)


def test_make_gpu_check_and_sweep_run_from_a_checkout_and_python_whose_paths_hold_a_space(repo_root, tmp_path):
    """`make gpu-check PY=...` (as `tests/test_gpu_check.py` and the GPU machine run it) with the
    interpreter, the checkout and the output under folders with a space: the command reaches
    the benchmark (PYTHONPATH=$(CURDIR), $(PY) and $(OUT) were unquoted: `dir: unrecognized
    option '--out'`). `--help` stands in for the dry run; no wheels are installed (WHEELS
    names no folder)."""
    import os
    import sys

    if shutil.which("make") is None:
        pytest.skip("no make here")
    venv = tmp_path / "a venv é"
    venv.symlink_to(sys.prefix)  # this interpreter's environment, reached through a path with a space
    python = venv / "bin" / pathlib.Path(sys.executable).name
    for target, module, flags in (("gpu-check", "gpu_check", "GPU_CHECK_FLAGS"), ("gpu-sweep", "gpu_sweep", "GPU_SWEEP_FLAGS")):
        made = subprocess.run(["make", "-s", target, f"PY={python}", f"OUT={tmp_path / 'o u t'}",
                               f"SWEEP_OUT={tmp_path / 'o u t'}", f"{flags}=--help", f"WHEELS={tmp_path / 'none'}"],
                              cwd=repo_root, env={**os.environ, "PYTHONPATH": ""}, capture_output=True, text=True,
                              timeout=120)
        assert made.returncode == 0 and f"usage: {module}.py" in made.stdout, made.stderr[-2000:]

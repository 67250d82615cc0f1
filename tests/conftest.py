"""Shared fixtures (offline Hugging Face, one local Ray, one S3 server, the CLI in process, the
real data) and the test tiers.

Tiers, set on every collected test by `pytest_collection_modifyitems` (CONTRIBUTING.md):
- `unit`: no Ray, no server, no subprocess; the quick loop (`make test-quick`, `-m unit`).
- `integration`: uses a shared expensive fixture (`tests.tiers.SHARED_FIXTURES`: a Ray, the S3
  server, a mount), calls `run_cli` (a real `python -m ctgscore` subprocess), or is marked `gpu`.
- `system`: marked `slow` without any shared fixture: starts its own cluster, server or job.
`make test` runs the tests in two processes (`pytest -n 2 --dist loadfile`): a module's tests
stay together in one, and both use one Ray (`start_shared_ray`).
A test may name its tier with a marker (`@pytest.mark.integration`), or sit in a folder named
after it (`tests/system/...`). Every test that is not `unit` is also marked `slow`, so
`-m "not slow"` stays the quick loop.

Real data: the full project data beside the checkout (`../shared/data`, what CI has) when it
is there, else the slice committed under `tests/data/` (see its README). Every test runs on
either; `CTGSCORE_TEST_DATA=slice` forces the slice. The header of a pytest run says which.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # tests only; the product keeps Ray's token default (test_ray_auth.py)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `tests.tiers`, `tests.job_support` under a plain `pytest` too
    sys.path.insert(0, str(REPO_ROOT))
FULL_DATA = REPO_ROOT.parent / "shared" / "data"
DATA_SLICE = REPO_ROOT / "tests" / "data"


def real_data_root() -> pathlib.Path:
    """The full data when present (and not overridden), else the committed slice."""
    if os.environ.get("CTGSCORE_TEST_DATA") == "slice" or not FULL_DATA.is_dir():
        return DATA_SLICE
    return FULL_DATA


SHARED_RAY = "CTGSCORE_TEST_RAY_ADDRESS"  # set by the xdist controller for its workers


def require_utf8_file_names() -> None:
    """The tests name files and write text in every script (hostile names, multilingual data),
    which Python can only do when its file system encoding is UTF-8: in a UTF-8 locale, under
    `LC_ALL=C` (Python then turns its UTF-8 mode on) or with `PYTHONUTF8=1` (`make test` sets it).
    Elsewhere (`LC_ALL=C PYTHONUTF8=0`, a Latin-1 locale) one clear error instead of dozens of
    failing tests."""
    encoding = sys.getfilesystemencoding()
    if encoding.lower().replace("-", "") != "utf8":
        raise pytest.UsageError(
            f"the tests need UTF-8 file names, and this Python's file system encoding is {encoding} "
            f"(locale {os.environ.get('LC_ALL') or os.environ.get('LC_CTYPE') or os.environ.get('LANG') or 'unset'}, "
            f"PYTHONUTF8={os.environ.get('PYTHONUTF8', 'unset')}): run `make test`, or set PYTHONUTF8=1")


def pytest_configure(config):
    require_utf8_file_names()
    if _starts_the_shared_ray(config):
        config.ctgscore_shared_ray = start_shared_ray()
        os.environ[SHARED_RAY] = config.ctgscore_shared_ray[1]  # inherited by the workers it starts next
    config.addinivalue_line("markers", "unit: no Ray, no server, no subprocess (the quick loop; set by conftest)")
    config.addinivalue_line("markers", "integration: shares a Ray, an S3 server or a mount, or runs the CLI as a "
                                       "subprocess (set by conftest)")
    config.addinivalue_line("markers", "system: starts its own cluster, server or job (set by conftest)")


def pytest_unconfigure(config):
    shared = getattr(config, "ctgscore_shared_ray", None)
    if shared is not None:
        stop_shared_ray(*shared)
        os.environ.pop(SHARED_RAY, None)


def _starts_the_shared_ray(config) -> bool:
    """The controller of a `pytest -n N` run starts one Ray for all its workers (`ray_local`),
    unless only the unit tier (no Ray) is selected."""
    controller = getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")
    unit_only = (getattr(config.option, "markexpr", "") or "").strip() in ("unit", "not slow")
    return controller and not unit_only and not config.option.collectonly


def worker_environment() -> dict[str, str]:
    """What every worker of the session's Ray gets: offline hub, and the fake credentials of the
    test S3 server (`tests.job_support.FAKE_AWS`) with `AWS_ENDPOINT_URL` at a dead loopback
    port, so an S3 client that ignored a job's `s3.endpoint_url` fails there, never reaching
    anything else."""
    from tests.job_support import FAKE_AWS, free_port

    return {"HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled", **FAKE_AWS,
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}


def start_shared_ray():
    """`ray start --head` for the workers of a `pytest -n N` run: 4 logical CPUs (two workers'
    jobs at once), no dashboard, no log monitor (no test reads Ray's logs through the driver),
    its own temp dir and ports, idle workers kept (`WARM_WORKERS`). One Ray instead of one per
    worker: an idle Ray that has run a Ray Data job costs about 12 % of a core (measured: raylet,
    GCS, agents and Ray Data's three helper actors). Returns (process, address, temp dir)."""
    import json
    import subprocess

    from tests.job_support import PLUGINS, VENV_BIN, free_port, wait_port

    worker_low = 40000 + (os.getpid() % 100) * 100
    env = {**os.environ, **worker_environment(),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(PLUGINS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    failures = []
    for _attempt in range(3):  # a free port taken by another process before Ray binds it: again, with new ports
        temp_dir = tempfile.mkdtemp(prefix="rays", dir="/tmp")
        ports = {name: free_port() for name in ("port", "ray-client-server-port", "node-manager-port",
                                                "object-manager-port", "dashboard-agent-listen-port",
                                                "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port")}
        log = open(pathlib.Path(temp_dir) / "ray-start.log", "wb")  # noqa: SIM115 - the head's whole life
        head = subprocess.Popen(
            [str(VENV_BIN / "ray"), "start", "--head", "--block", "--num-cpus=4", "--node-ip-address=127.0.0.1",
             "--include-dashboard=false", "--include-log-monitor=false", "--disable-usage-stats", f"--temp-dir={temp_dir}",
             f"--object-store-memory={1 << 30}", f"--system-config={json.dumps(WARM_WORKERS)}",
             f"--min-worker-port={worker_low}", f"--max-worker-port={worker_low + 99}",
             *[f"--{name}={port}" for name, port in ports.items()]],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        try:
            wait_port(ports["port"], timeout=180, alive=head)  # a loaded 2-core machine has taken over 60 s
            return head, f"127.0.0.1:{ports['port']}", temp_dir
        except (TimeoutError, ChildProcessError) as exc:
            tail = (pathlib.Path(temp_dir) / "ray-start.log").read_bytes()[-2000:].decode("utf-8", "replace")
            failures.append(f"{exc}; `ray start` said: {tail.strip() or '(nothing)'}")
            stop_shared_ray(head, "", temp_dir)
    raise RuntimeError("the session's Ray did not start, three times:\n" + "\n".join(failures))


def stop_shared_ray(head, address: str, temp_dir: str) -> None:
    from tests.job_support import stop_group

    stop_group(head, marker=temp_dir)
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    from tests.tiers import tier_of

    for item in items:
        tier = tier_of(item)
        item.add_marker(getattr(pytest.mark, tier))
        if tier != "unit" and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


def pytest_report_header(config):
    root = real_data_root()
    kind = "full project data" if root == FULL_DATA else "committed slice"
    return f"ctgscore real data: {root} ({kind})"


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """Root of the real data (`corpora/`, `checklist/`, `codi-eval/`, `compmctg/`): the full
    data beside the checkout, else the committed slice (see module docstring)."""
    return real_data_root()


# The session Ray keeps a few more idle workers: Ray's default keeps as many as it has CPUs and
# ends the others after 1 s idle, so every job would start again the task workers its check and
# read stages need (measured: a small job on a warm Ray, 5.7 s and 6-7 new worker processes;
# with idle workers kept, 3.3 s and 1-2, its actors). An idle worker costs about 0.8 % of a core,
# hence six, and those past six go after a minute. Workers are per driver: this keeps the ones
# of the jobs run in this process.
WARM_WORKERS = {"num_workers_soft_limit": 6, "idle_worker_killing_time_threshold_ms": 60_000}


@pytest.fixture(scope="session")
def ray_local():
    """One Ray for the whole session: under `pytest -n N` the one the controller started for all
    workers (`start_shared_ray`), else a local one started here: 2 CPUs, no dashboard, 1 GiB
    object store, a short temp dir that is removed afterwards. Either way idle workers are kept
    (`WARM_WORKERS`), workers import the project through PYTHONPATH, and they have
    `worker_environment()` (the test S3 server's fake credentials, a dead AWS_ENDPOINT_URL)."""
    import ray

    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    worker_env = worker_environment()
    shared = os.environ.get(SHARED_RAY)
    if shared:
        ray.init(address=shared, log_to_driver=False, runtime_env={"env_vars": worker_env})
        yield ray
        ray.shutdown()
        return
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    # in the environment while Ray starts (its raylet hands it to every worker, also those of a
    # job that joins from a subprocess), not in this process's afterwards
    saved = {key: os.environ.get(key) for key in worker_env}
    os.environ.update(worker_env)
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=1 << 30,
            _temp_dir=temp_dir,
            log_to_driver=False,
            runtime_env={"env_vars": worker_env},
            _system_config=WARM_WORKERS,
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    yield ray
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_address(ray_local) -> str:
    """The address of the shared local Ray (`ray_local`), for a job run in a subprocess:
    `run_cli([...], env={"RAY_ADDRESS": ray_address})` joins it instead of starting its own
    Ray. Its workers have the fake S3 credentials (`ray_local`); jobs that kill Ray processes,
    or check what Ray itself writes, start their own."""
    return ray_local.get_runtime_context().gcs_address


@pytest.fixture(scope="module")
def ray_head():
    """One `ray start --head` with its job server (2 CPUs, its own temp dir and ports) for a
    module's `ray job submit` tests (they sit in one module: an idle head costs CPU too); yields
    the job server's address. Stopped by killing the processes
    it started (never `ray stop`), and nothing of it may be left afterwards."""
    from tests.job_support import pids_using, start_ray_head, stop_group

    temp_dir = tempfile.mkdtemp(prefix="rjs", dir="/tmp")
    head, address = start_ray_head(temp_dir, 20000)
    try:
        yield address
    finally:
        stop_group(head, marker=temp_dir)
    left = pids_using(temp_dir)
    shutil.rmtree(temp_dir, ignore_errors=True)
    assert left == [], f"processes of the shared head outlived it: {left}"


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, str]:
    """The tiny PEGASUS, BART, GPT-2 and IWF table, built once per test session."""
    from ctgscore.testing.tiny_models import build_tiny_models

    return build_tiny_models(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def demo_run(ray_address, tmp_path_factory):
    """`python -m ctgscore.demo` run once per test run, as a newcomer runs it (a real process,
    here joining the session's Ray), on the shipped sample, its tiny models in the checkout's
    `.cache/tiny-models/` (built there when missing, as `make demo` does; the README's examples
    read them there). Yields a namespace: `output` (its output folder; its report is
    `<output>-report/`), `proc` (the finished process), `args` and `env` (to run it again the
    same way), `digest` (`tests.job_digest.demo_digest`, taken right after that first run,
    before any test re-runs anything on the folder) and `as_run` (a copy of the output folder
    made then, for tests that rewrite it). One run serves the newcomer tests and the job-output
    digest."""
    import shutil
    import types

    from ctgscore.testing.cli import run_cli
    from tests.job_digest import demo_digest

    models_dir = REPO_ROOT / ".cache" / "tiny-models"
    output = tmp_path_factory.mktemp("demo") / "demo"
    args, env = ["-o", output, "--no-progress"], {"RAY_ADDRESS": ray_address}
    proc = run_cli(args, module="ctgscore.demo", cwd=REPO_ROOT, timeout=1500, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    digest = demo_digest(output, models_dir, REPO_ROOT / "data" / "sample")
    as_run = shutil.copytree(output, output.parent / "as-run")
    return types.SimpleNamespace(output=output, proc=proc, digest=digest, args=args, env=env, as_run=as_run)


@pytest.fixture(scope="session")
def sample_corpus() -> pathlib.Path:
    """The shipped sample corpus folder (real SummEval and CTRLEval rows)."""
    return REPO_ROOT / "data" / "sample"


@pytest.fixture(scope="session")
def moto():
    """One S3 server (moto, in memory) on 127.0.0.1 for the whole test run; yields its endpoint
    URL. Buckets live as long as the server: a test makes its own (`s3_bucket`, or a name no
    other module uses)."""
    from tests.job_support import start_moto, stop_group

    process, endpoint = start_moto()
    yield endpoint
    stop_group(process)


@pytest.fixture
def s3_bucket(moto, request) -> str:
    """A new, empty bucket on the shared S3 server for this test; yields its name (the
    endpoint is the `moto` fixture). Named after the test, so a listing shows whose it is."""
    import re
    import uuid

    import s3fs

    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem or 'test'}-{uuid.uuid4().hex[:8]}"
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": moto},
                           skip_instance_cache=True)
    fs.mkdir(name)
    yield name


@pytest.fixture
def cli():
    """`cli(args, cwd=None, env=None)`: `ctgscore ARGS` run in this process through
    `ctgscore.cli.main.main`, returning a `CompletedProcess` (returncode, stdout, stderr) like
    `run_cli`'s. For commands that stay in this process; `run_cli` (a real subprocess) is for the
    exit status and console of the interpreter itself and for commands that start Ray."""
    from ctgscore.testing.cli import run_cli_in_process

    return run_cli_in_process


@pytest.fixture
def mounted(tmp_path):
    """mount(options) -> a fresh tmpfs folder (a real read-only or full file system for fault
    tests; needs root, skipped elsewhere); unmounted afterwards."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command here (a minimal container)")
    mounts = []

    def mount(options: str) -> pathlib.Path:
        target = tmp_path / f"mnt{len(mounts)}"
        target.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounts.append(target)
        return target

    yield mount
    for target in mounts:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)

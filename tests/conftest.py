"""Shared fixtures: offline Hugging Face, a session-scoped local Ray, and the real data.

Real data: the full project data beside the checkout (`../shared/data`, what CI has) when it
is there, else the slice committed under `tests/data/` (see its README). Every test runs on
either; `CTGSCORE_TEST_DATA=slice` forces the slice. The header of a pytest run says which.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
FULL_DATA = REPO_ROOT.parent / "shared" / "data"
DATA_SLICE = REPO_ROOT / "tests" / "data"


def real_data_root() -> pathlib.Path:
    """The full data when present (and not overridden), else the committed slice."""
    if os.environ.get("CTGSCORE_TEST_DATA") == "slice" or not FULL_DATA.is_dir():
        return DATA_SLICE
    return FULL_DATA


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


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray for the whole session: 2 CPUs, no dashboard, 1 GiB object store, a short
    temp dir that is removed afterwards. Workers import the project through PYTHONPATH."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=1 << 30,
        _temp_dir=temp_dir,
        log_to_driver=False,
        runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled"}},
    )
    yield ray
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, str]:
    """The tiny PEGASUS, BART, GPT-2 and IWF table, built once per test session."""
    from ctgscore.testing.tiny_models import build_tiny_models

    return build_tiny_models(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def sample_corpus() -> pathlib.Path:
    """The shipped sample corpus folder (real SummEval and CTRLEval rows)."""
    return REPO_ROOT / "data" / "sample"


@pytest.fixture(scope="module")
def moto():
    """An S3 server (moto) on 127.0.0.1, one per test module (each module's buckets start
    empty); yields its endpoint URL."""
    from tests.job_support import start_moto, stop_group

    process, endpoint = start_moto()
    yield endpoint
    stop_group(process)


@pytest.fixture
def mounted(tmp_path):
    """mount(options) -> a fresh tmpfs folder (a real read-only or full file system for fault
    tests; needs root, skipped elsewhere); unmounted afterwards."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
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

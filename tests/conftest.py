"""Shared fixtures: offline Hugging Face, a session-scoped local Ray, and the shared data."""

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
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """`../shared/data` beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        if os.environ.get("CI"):
            pytest.fail("../shared/data must be beside the checkout in CI")
        pytest.skip("../shared/data is not beside this checkout")
    return SHARED_DATA


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
    from scoring.tiny_models import build_tiny_models

    return build_tiny_models(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def sample_corpus() -> pathlib.Path:
    """The shipped sample corpus folder (real SummEval and CTRLEval rows)."""
    return REPO_ROOT / "data" / "sample"

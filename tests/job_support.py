"""Helpers for the Ray job tests: canonical toy shards, test-only row metrics (imported by
Ray workers as `tests.job_support:...` through PYTHONPATH), a moto S3 server on loopback,
and process bookkeeping for clusters the tests start themselves."""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from scoring.metric import RowMetric
from scoring.signature import Signature

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# `slow_length` is registered as a `ctgscore.metrics` plugin by a dist-info folder here (job
# configs name metrics only by registered name); workers import its class by module path
PLUGINS = REPO_ROOT / "tests" / "job_plugins"
if str(PLUGINS) not in sys.path:
    sys.path.append(str(PLUGINS))
VENV_BIN = pathlib.Path(sys.executable).parent
WORDS = "the a cat dog sat on mat ran fast slow big small red blue green tree house river".split()

CANONICAL_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("dataset", pa.string()),
        ("doc_id", pa.string()),
        ("system", pa.string()),
        ("source", pa.string()),
        ("prefix", pa.string()),
        ("attribute", pa.string()),
        ("text", pa.string()),
        ("references", pa.list_(pa.string())),
        ("human_quality", pa.float64()),
    ]
)


def make_rows(shard: int, n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed * 1000 + shard)
    rows = []
    for i in range(n):
        prefix = " ".join(rng.choice(WORDS) for _ in range(2))
        body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25)))
        rows.append(
            {
                "id": f"s{shard}-r{i}",
                "dataset": "toy",
                "doc_id": f"doc{i % 7}",
                "system": f"sys{i % 3}",
                "source": body[::-1],
                "prefix": prefix,
                "attribute": "positive" if i % 2 else "negative",
                "text": f"{prefix} {body}",
                "references": [body],
                "human_quality": float(rng.randint(1, 5)),
            }
        )
    return rows


def write_rows(path: pathlib.Path, rows: list[dict], schema: pa.Schema = CANONICAL_SCHEMA) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def make_corpus(folder: pathlib.Path, shards: int, rows: int, seed: int = 0) -> list[pathlib.Path]:
    paths = []
    for shard in range(shards):
        path = folder / f"part-{shard:05d}.parquet"
        write_rows(path, make_rows(shard, rows, seed))
        paths.append(path)
    return paths


def read_folder(folder: pathlib.Path) -> list[dict]:
    rows = []
    for path in sorted(folder.rglob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def shard_output(metric_folder: pathlib.Path, rel: str) -> pathlib.Path:
    """The output folder of one input shard (its path without `.parquet`)."""
    return metric_folder / (rel[: -len(".parquet")] if rel.endswith(".parquet") else rel)


def shard_rows(metric_folder: pathlib.Path, rel: str) -> list[dict]:
    """One shard's output rows, its parts read in row order (names sort by start row)."""
    rows = []
    for path in sorted(shard_output(metric_folder, rel).glob("part-*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def part_files(metric_folder: pathlib.Path) -> list[str]:
    """Every part under a metric folder, relative to it."""
    return sorted(str(p.relative_to(metric_folder)) for p in metric_folder.rglob("*") if p.is_file())


class SlowLengthMetric(RowMetric):
    """Character count of `text`, optionally slow (seconds per row), recording the pid of
    each scoring process (as a score column and as a file in `pid_dir`). `salt` stands in for
    a model revision: it is part of the signature."""

    name = "slow_length"
    required_columns = ("text",)
    output_columns = ("slow_chars", "slow_pid")

    def __init__(self, delay: float = 0.0, pid_dir: str | None = None, salt: int = 0):
        self.delay = delay
        self.salt = salt
        if pid_dir:
            pathlib.Path(pid_dir).mkdir(parents=True, exist_ok=True)
            (pathlib.Path(pid_dir) / str(os.getpid())).write_text("")

    def signature(self) -> Signature:
        return Signature(self.name, "1", {"salt": self.salt})

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.delay:
            time.sleep(self.delay * len(rows))
        return [{"slow_chars": float(len(row["text"])), "slow_pid": float(os.getpid())} for row in rows]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def start_moto() -> tuple[subprocess.Popen, str]:
    """moto's S3 server on 127.0.0.1 (in-memory); returns the process and its endpoint."""
    port = free_port()
    server = VENV_BIN / "moto_server"
    process = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_port(port)
    return process, f"http://127.0.0.1:{port}"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(PLUGINS)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update({"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"})
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])  # `python` in job entrypoints
    env.pop("RAY_ADDRESS", None)
    env.update(extra)
    return env


def pids_using(marker: str) -> list[int]:
    """Processes whose command line contains `marker` (our own temp dir): the Ray processes
    of a cluster a test started, so they can be stopped by pid without touching others'."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline or _has_open_file_under(entry, marker):
            found.append(int(entry.name))
    return found


def _has_open_file_under(proc: pathlib.Path, marker: str) -> bool:
    """Ray agents rewrite their command line (`ray::DashboardAgent`), but keep log files
    open under the cluster's temp dir."""
    try:
        return any(marker in os.readlink(fd) for fd in (proc / "fd").iterdir())
    except OSError:
        return False


def stop_group(process: subprocess.Popen, marker: str | None = None, grace: float = 10.0) -> None:
    """SIGTERM the process group we started (then SIGKILL), then any leftover process whose
    command line names our temp dir."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=grace)
    if marker:
        deadline = time.time() + grace
        while time.time() < deadline and pids_using(marker):
            time.sleep(0.2)
        for pid in pids_using(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if marker.startswith(tempfile.gettempdir() + "/"):
            shutil.rmtree(marker, ignore_errors=True)  # the cluster's own temp dir


def run_on_local_cluster(config_path: str, temp_dir: str, nodes: int = 2, cpus_per_node: int = 2) -> None:
    """Driver for the multi-node test (run in its own process): a head with no CPUs and
    `nodes` raylets on this machine (`ray.cluster_utils.Cluster`), then the job.

    Nodes get 2 logical CPUs: Ray Data's ListFiles/read tasks need one whole CPU on one node,
    and fractional actors spread over 1-CPU nodes leave none (a silent hang, measured here)."""
    import json

    import ray
    from ray.cluster_utils import Cluster

    from ray_jobs.config import load_config
    from ray_jobs.score_corpus import run_job

    # Cluster records its address under Ray's temp root (/tmp/ray by default), which a fresh
    # machine does not have: keep that file in this test's own temp dir too
    os.environ["RAY_TMPDIR"] = temp_dir
    os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "temp_dir": temp_dir,
            "include_dashboard": False,
            "object_store_memory": 256 << 20,
        },
    )
    for _ in range(nodes):
        cluster.add_node(num_cpus=cpus_per_node, object_store_memory=256 << 20)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        print("NODES", len([n for n in ray.nodes() if n["Alive"]]), flush=True)
        manifest = run_job(load_config(config_path))
        print("MANIFEST " + json.dumps(manifest["metrics"], default=str), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()

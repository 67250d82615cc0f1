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
        if pid_dir:  # one file per scoring process: its Ray node id and GPU ids (empty outside Ray)
            node, gpus, actor = "", [], ""
            try:
                import ray

                if ray.is_initialized():
                    context = ray.get_runtime_context()
                    node, gpus, actor = context.get_node_id(), ray.get_gpu_ids(), context.get_actor_id() or ""
            except Exception:  # noqa: BLE001 - outside a Ray worker
                pass
            pathlib.Path(pid_dir).mkdir(parents=True, exist_ok=True)
            (pathlib.Path(pid_dir) / str(os.getpid())).write_text(f"{node}\n{','.join(str(g) for g in gpus)}\n{actor}")

    def signature(self) -> Signature:
        return Signature(self.name, "1", {"salt": self.salt})

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.delay:
            time.sleep(self.delay * len(rows))
        return [{"slow_chars": float(len(row["text"])), "slow_pid": float(os.getpid())} for row in rows]


def part_bytes(rel: str, etag: str, size: int, digest: str, start: int, stop: int, errors: int = 0, retry: int = 0) -> bytes:
    """A part as a worker writes it (Parquet with the job's footer metadata) for rows
    [start, stop) of the input `rel` (etag, size), its first `errors` rows in error (the first
    `retry` of them marked for the next run), without running a metric."""
    from ray_jobs import incremental
    from ray_jobs.storage import writes

    rows = stop - start
    error = [("retry next run: out of memory" if i < retry else "empty field 'text'") if i < errors else None
             for i in range(rows)]
    table = pa.table({"id": [f"r{i}" for i in range(start, stop)], "error": pa.array(error, pa.string())})
    return writes.table_bytes(table, incremental.part_metadata(rel, etag, size, "", digest, start, stop, errors, 0, retry))


def turned_table(table: pa.Table, turn) -> pa.Table:
    """`table` with every string (and every string in a list) passed through `turn`, which keeps
    its length: other content, the same Parquet size when written without compression,
    dictionary or statistics (`equal_size_bytes`)."""
    columns = []
    for column in table.columns:
        values = column.to_pylist()
        if pa.types.is_string(column.type):
            values = [turn(v) if v is not None else None for v in values]
        elif pa.types.is_list(column.type):
            values = [[turn(s) for s in v] if v is not None else None for v in values]
        columns.append(pa.array(values, type=column.type))
    return pa.table(columns, schema=table.schema)


def equal_size_bytes(table: pa.Table) -> bytes:
    """`table` as Parquet bytes whose size depends only on its values' lengths."""
    import io

    sink = io.BytesIO()
    pq.write_table(table, sink, compression="NONE", use_dictionary=False, write_statistics=False)
    return sink.getvalue()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0, alive: subprocess.Popen | None = None) -> None:
    """Until something listens on loopback `port`; `TimeoutError` after `timeout` s, and
    `ChildProcessError` as soon as `alive` (the process that should listen) has ended."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if alive is not None and alive.poll() is not None:
            raise ChildProcessError(f"the process to listen on 127.0.0.1:{port} ended (exit {alive.returncode})")
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


HEAD_PORTS = ("port", "dashboard-port", "ray-client-server-port", "node-manager-port", "object-manager-port",
              "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
              "runtime-env-agent-port")


def start_ray_head(temp_dir: str, worker_base: int) -> tuple[subprocess.Popen, str]:
    """`ray start --head --block` with the job server, its own temp dir and ports (2 CPUs);
    returns the process (stop it with `stop_group(head, marker=temp_dir)`) and the job
    server's address once it listens."""
    ports = {name: free_port() for name in HEAD_PORTS}
    worker_low = worker_base + (os.getpid() % 200) * 100
    head = subprocess.Popen(
        [str(VENV_BIN / "ray"), "start", "--head", "--block", "--num-cpus=2", "--node-ip-address=127.0.0.1",
         "--dashboard-host=127.0.0.1", "--disable-usage-stats", "--include-dashboard=true", f"--temp-dir={temp_dir}",
         "--object-store-memory=300000000", f"--min-worker-port={worker_low}", f"--max-worker-port={worker_low + 99}",
         *[f"--{name}={port}" for name, port in ports.items()]],
        env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_port(ports["dashboard-port"], timeout=60)
    except TimeoutError:
        stop_group(head, marker=temp_dir)
        raise
    return head, f"http://127.0.0.1:{ports['dashboard-port']}"


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
        if marker.startswith((tempfile.gettempdir() + "/", "/tmp/")):  # the clusters' dirs are under /tmp whatever $TMPDIR is
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


def run_on_gpu_cluster(config_path: str, cuda_config_path: str, temp_dir: str) -> None:
    """Driver for the logical-GPU test (its own process): a head with 1 CPU and no GPU and
    one worker node with 2 CPUs and 2 logical GPUs on this CPU-only machine, then the job
    (printed as JSON lines), then a job that asks for `device: cuda` (its error printed)."""
    import json

    import ray
    from ray.cluster_utils import Cluster

    from ray_jobs.config import load_config
    from ray_jobs.score_corpus import run_job

    os.environ["RAY_TMPDIR"] = temp_dir
    os.environ["CTGSCORE_SIMULATED_GPUS"] = "1"  # logical GPUs without CUDA: GPU pools may score on the CPU
    os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "num_gpus": 0, "temp_dir": temp_dir, "include_dashboard": False,
                        "object_store_memory": 256 << 20},
    )
    gpu_node = cluster.add_node(num_cpus=2, num_gpus=2, object_store_memory=256 << 20)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        print("NODES " + json.dumps({"head": cluster.head_node.node_id, "gpu": gpu_node.node_id}), flush=True)
        manifest = run_job(load_config(config_path))
        print("MANIFEST " + json.dumps(manifest["metrics"], default=str), flush=True)
        try:
            run_job(load_config(cuda_config_path))
            print("CUDA_ERROR none", flush=True)
        except Exception as exc:  # noqa: BLE001 - the test checks type and message
            print(f"CUDA_ERROR {type(exc).__name__} {getattr(exc, 'exit_code', None)} {exc}", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


def fake_autoscaler_config(gcs_port: int, idle_timeout_minutes: float = 0.2, max_gpu_workers: int = 2) -> dict:
    """A whole autoscaler config for Ray's fake multi-node provider (the wheel ships no
    example to start from): a 1-CPU head without GPU and a GPU worker type from 0 up to
    `max_gpu_workers`, each worker 1 CPU and 1 logical GPU."""
    return {
        "cluster_name": "ctgscore-fake",
        "max_workers": max_gpu_workers,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle_timeout_minutes,
        "provider": {
            "type": "fake_multinode",
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
            "gcs_address": f"127.0.0.1:{gcs_port}",
        },
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 1}, "node_config": {}, "max_workers": 0},
            "ray.worker.gpu": {
                "resources": {"CPU": 1, "GPU": 1, "object_store_memory": 200 << 20},
                "node_config": {},
                "min_workers": 0,
                "max_workers": max_gpu_workers,
            },
        },
        "head_node_type": "ray.head.default",
        "auth": {},
        "docker": {},
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
    }


def run_job_watching_nodes(config_path: str, address: str) -> None:
    """Driver for the autoscaling test (its own process): joins the cluster at `address`,
    runs the job while a thread records the most GPU nodes alive at once, prints both."""
    import json
    import threading

    import ray

    from ray_jobs.config import load_config
    from ray_jobs.score_corpus import run_job

    ray.init(address=address, log_to_driver=False)
    peak = {"gpu_nodes": 0}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            alive = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
            peak["gpu_nodes"] = max(peak["gpu_nodes"], len(alive))
            done.wait(0.5)

    print("GPU_NODES_BEFORE", len([n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]), flush=True)
    print("JOB_START", time.time(), flush=True)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        manifest = run_job(load_config(config_path))
    finally:
        done.set()
        thread.join()
    print("PEAK_GPU_NODES", peak["gpu_nodes"], flush=True)
    print("MANIFEST " + json.dumps(manifest["metrics"], default=str), flush=True)
    ray.shutdown()


def alive_gpu_nodes(address: str) -> int:
    """GPU nodes alive in the cluster at `address`, asked from a short-lived process."""
    code = (
        "import ray; ray.init(address=%r, log_to_driver=False, logging_level='ERROR'); "
        "print('ALIVE', len([n for n in ray.nodes() if n['Alive'] and n['Resources'].get('GPU')]))" % address
    )
    result = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60)
    return int(result.stdout.split("ALIVE ", 1)[1].split()[0])


def remove_ray_dir(ray_dir: str) -> None:
    """Kill the processes of a Ray a test started under its own temp dir (found by that dir,
    so nobody else's Ray is touched), then remove the dir."""
    for pid in pids_using(ray_dir):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    shutil.rmtree(ray_dir, ignore_errors=True)


# Credentials for the moto server: fake, and with the instance-metadata lookup switched off so
# nothing tries to reach an address outside this machine.
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def moto_session(endpoint: str, monkeypatch) -> dict:
    """The fake credentials in this test's environment (`FAKE_AWS`), and the fsspec
    `storage_options` (s3fs keyword arguments) that reach the moto server at `endpoint`."""
    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    return {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}, "skip_instance_cache": True}


class DeviceFaultMetric(SlowLengthMetric):
    """`slow_length` whose first scoring call (once per `marker_dir`, across processes)
    raises what PyTorch raises after a device-side assert: the process's CUDA context is lost."""

    name = "device_fault"

    def __init__(self, marker_dir: str, delay: float = 0.0):
        super().__init__(delay=delay)
        self.marker_dir = marker_dir

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        marker = pathlib.Path(self.marker_dir) / "fired"
        try:
            with open(marker, "x") as handle:
                handle.write(str(os.getpid()))
        except FileExistsError:
            return super().score_valid(rows)
        raise RuntimeError("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")


def constraints_report_args(folder: pathlib.Path, rows: dict, scores: dict) -> list:
    """Writes canonical CoDI `rows` and their `scores` (column -> values, as `pa.table` takes
    them) to FOLDER/in.parquet and FOLDER/scores.parquet; returns the `ctgscore constraints
    report` arguments that report them into FOLDER/report (no Self-BLEU, no progress bars)."""
    pq.write_table(pa.table(rows), folder / "in.parquet")
    pq.write_table(pa.table(scores), folder / "scores.parquet")
    return ["constraints", "report", "-i", folder / "in.parquet", "--scores", folder / "scores.parquet",
            "-o", folder / "report", "--no-self-bleu", "--no-progress"]

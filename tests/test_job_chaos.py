"""Chaos: a TCP proxy in front of the moto S3 server resets a fraction of requests (before
forwarding them, or after forwarding them and passing part of the answer). A job through the
proxy finishes with every row exactly once, or fails with one clean `error:` line and, re-run
without faults, completes with nothing lost.

`python -m tests.test_job_chaos 0.05 0.1 0.2 0.3` measures which fault rates a job survives
(one job per rate and seed; prints a table)."""

from __future__ import annotations

import asyncio
import json
import pathlib
import random
import socket
import struct
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq
import pytest

from ctgscore.testing.proxy import LoopbackProxy
from tests.job_support import (
    FAKE_AWS,
    child_env,
    free_port,
    make_corpus,
    remove_ray_dir,
    start_moto,
    stop_group,
)


class ChaosProxy(LoopbackProxy):
    """Loopback TCP proxy to `127.0.0.1:target`. Each chunk a client sends is, with probability
    `rate`, answered by a reset (RST) instead of being forwarded, or forwarded with the reply
    cut off after its first bytes (or, after `dead_after` chunks, every chunk is reset). At most
    `max_faults` random faults; the proxy stops by itself after `lifetime_s` seconds."""

    def __init__(self, target: int, rate: float, seed: int = 0, max_faults: int = 10_000, lifetime_s: float = 600,
                 dead_after: int | None = None):
        super().__init__(target, lifetime_s)
        self.rate, self.max_faults = rate, max_faults
        self.dead_after = dead_after  # after this many chunks every chunk is reset: the endpoint "dies"
        self.random = random.Random(seed)
        self.faults = {"reset": 0, "cut": 0}
        self.chunks = 0

    def _fault(self) -> str | None:
        self.chunks += 1
        if self.dead_after is not None and self.chunks > self.dead_after:
            self.faults["reset"] += 1
            return "reset"
        if sum(self.faults.values()) >= self.max_faults or self.random.random() >= self.rate:
            return None
        kind = self.random.choice(("reset", "cut"))
        self.faults[kind] += 1
        return kind

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            self._reset(client_w)
            return
        cut = asyncio.Event()

        async def upstream() -> None:
            while data := await client_r.read(1 << 16):
                kind = self._fault()
                if kind == "reset":
                    self._reset(client_w), self._reset(server_w)
                    return
                if kind == "cut":
                    cut.set()
                server_w.write(data)
                await server_w.drain()
            server_w.close()

        async def downstream() -> None:
            while data := await server_r.read(1 << 16):
                if cut.is_set():
                    client_w.write(data[: max(1, len(data) // 3)])
                    await client_w.drain()
                    self._reset(client_w), self._reset(server_w)
                    return
                client_w.write(data)
                await client_w.drain()
            client_w.close()

        try:
            await asyncio.gather(upstream(), downstream())
        except (OSError, asyncio.IncompleteReadError):
            self._reset(client_w), self._reset(server_w)


def _s3(endpoint: str):
    import s3fs

    return s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)


def _run_job(config_path: pathlib.Path, timeout: float = 400, **extra_env: str) -> subprocess.CompletedProcess:
    """The job as a process of its own; with RAY_ADDRESS in `extra_env` it joins that Ray (the
    session's: its workers have the fake credentials and a dead AWS_ENDPOINT_URL too), else
    it starts its own (as the config's `ray` section says), whose workers get `extra_env`."""
    env = child_env(**FAKE_AWS, **extra_env)
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"  # whatever ignores the config: a dead loopback port
    return subprocess.run(
        [sys.executable, "-m", "ray_jobs.score_corpus", "--config", str(config_path)],
        env=env, capture_output=True, text=True, timeout=timeout,
    )


def _write_config(path: pathlib.Path, endpoint: str, ray_dir: str, output: str) -> pathlib.Path:
    path.write_text(json.dumps({
        "input": "s3://chaos-in/dump",
        "output": output,
        "metrics": [{"name": "text_stats"}],
        "batch_size": 8,
        "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
        "s3": {"endpoint_url": endpoint},
        "ray": {"num_cpus": 2, "temp_dir": ray_dir},
        "progress": False,
    }))
    return path


def _output_ids(fs, prefix: str) -> list[str]:
    fs.invalidate_cache()
    ids: list[str] = []
    for name in sorted(fs.find(prefix)):
        leaf = name.rsplit("/", 1)[-1]
        if leaf.endswith(".parquet") and not leaf.startswith((".", "_")):  # `_id_index.parquet` is no part
            with fs.open(name, "rb") as handle:
                ids.extend(pq.read_table(handle, columns=["id"]).column("id").to_pylist())
    return ids


def _debris(fs, prefix: str) -> list[str]:
    fs.invalidate_cache()
    return [n for n in fs.find(prefix) if ".tmp-" in n.rsplit("/", 1)[-1]]


def chaos_round(tmp: pathlib.Path, moto_endpoint: str, rate: float, seed: int, shards: int = 6, rows: int = 20,
                ray_address: str | None = None) -> dict:
    """One job through a proxy at `rate`; on failure, the re-run without faults. Returns what
    happened and checks exactly-once and no debris either way. The jobs join `ray_address`
    when given, else each starts its own Ray."""
    joined = {"RAY_ADDRESS": ray_address} if ray_address else {}
    fs = _s3(moto_endpoint)
    if not fs.exists("chaos-in"):
        fs.mkdir("chaos-in")
        fs.mkdir("chaos-out")
        expected = []
        for path in make_corpus(tmp / "in", shards=shards, rows=rows):
            fs.put_file(str(path), f"chaos-in/dump/{path.name}")
            expected.extend(pq.read_table(path, columns=["id"]).column("id").to_pylist())
        (tmp / "expected.json").write_text(json.dumps(expected))
    expected = json.loads((tmp / "expected.json").read_text())
    output = f"s3://chaos-out/rate{int(rate * 100)}-seed{seed}"
    ray_dir = tempfile.mkdtemp(prefix="rchaos", dir="/tmp")
    port = int(moto_endpoint.rsplit(":", 1)[1])
    try:
        with ChaosProxy(port, rate, seed=seed) as proxy:
            started = time.time()
            first = _run_job(_write_config(tmp / f"chaos-{seed}.json", proxy.endpoint, ray_dir, output), **joined)
            wall = time.time() - started
        result = {"rate": rate, "seed": seed, "chunks": proxy.chunks, "faults": dict(proxy.faults),
                  "first_rc": first.returncode, "wall_s": round(wall, 1), "stderr_tail": first.stderr.strip().splitlines()[-1:]}
        if first.returncode != 0:
            lines = [line for line in first.stderr.strip().splitlines() if line.strip()]
            assert "Traceback" not in first.stderr, first.stderr[-3000:]
            assert lines and lines[-1].startswith("error: "), first.stderr[-3000:]
            again = _run_job(_write_config(tmp / f"clean-{seed}.json", moto_endpoint, ray_dir, output), **joined)
            assert again.returncode == 0, again.stderr[-3000:]
            result["rerun_rc"] = again.returncode
        got = _output_ids(fs, output.removeprefix("s3://"))
        assert sorted(got) == sorted(expected)  # every row exactly once
        manifest = json.loads(fs.cat_file(output.removeprefix("s3://") + "/manifest.json"))
        assert manifest["metrics"]["text_stats"]["rows_out"] == len(expected)
        assert _debris(fs, output.removeprefix("s3://")) == []
        return result
    finally:
        remove_ray_dir(ray_dir)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_proxy_resets_a_fraction_of_requests(moto):
    fs_direct = _s3(moto)
    fs_direct.mkdir("proxy-check")
    with ChaosProxy(int(moto.rsplit(":", 1)[1]), rate=0.3, seed=1) as proxy:
        import botocore.session
        from botocore.config import Config

        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=proxy.endpoint, region_name="us-east-1", aws_access_key_id="testing",
            aws_secret_access_key="testing", config=Config(retries={"max_attempts": 1, "mode": "standard"}),
        )
        outcomes = []
        for i in range(60):
            try:
                client.put_object(Bucket="proxy-check", Key=f"k{i}", Body=b"x" * 100)
                outcomes.append("ok")
            except Exception:  # noqa: BLE001 - a reset or cut request
                outcomes.append("failed")
    failed = outcomes.count("failed")
    assert proxy.faults["reset"] + proxy.faults["cut"] >= failed > 0
    assert 6 <= failed <= 30  # about 30% of 60 single-attempt requests


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_job_through_a_flaky_proxy_loses_nothing(moto, ray_address, tmp_path):
    result = chaos_round(tmp_path, moto, rate=0.1, seed=7, ray_address=ray_address)
    assert sum(result["faults"].values()) > 0, result  # faults really happened


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_endpoint_dying_mid_job_fails_cleanly_and_the_rerun_completes(moto, ray_address, tmp_path):
    """The dying run starts its own Ray (its workers need CTGSCORE_S3_MAX_ATTEMPTS=2); the re-run
    joins the session's."""
    fs = _s3(moto)
    fs.mkdir("dying-in")
    expected = []
    for path in make_corpus(tmp_path / "in", shards=6, rows=20):
        fs.put_file(str(path), f"dying-in/dump/{path.name}")
        expected.extend(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    fs.mkdir("dying-out")
    output = "s3://dying-out/scores"
    port = int(moto.rsplit(":", 1)[1])
    ray_dir = tempfile.mkdtemp(prefix="rdie", dir="/tmp")
    config = {"input": "s3://dying-in/dump"}
    try:
        with ChaosProxy(port, rate=0.0, dead_after=60) as proxy:  # alive for the plan, dead while scoring
            path = _write_config(tmp_path / "dying.json", proxy.endpoint, ray_dir, output)
            path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
            first = _run_job(path, CTGSCORE_S3_MAX_ATTEMPTS="2")
        assert first.returncode == 1, first.stderr[-3000:]
        lines = [line for line in first.stderr.splitlines() if line.strip()]
        assert "Traceback" not in first.stderr and lines[-1].startswith("error: "), first.stderr[-3000:]
        assert _debris(fs, "dying-out/scores") == []

        path = _write_config(tmp_path / "alive.json", moto, ray_dir, output)
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
        again = _run_job(path, RAY_ADDRESS=ray_address)
        assert again.returncode == 0, again.stderr[-3000:]
        assert sorted(_output_ids(fs, "dying-out/scores")) == sorted(expected)
        assert _debris(fs, "dying-out/scores") == []
        print("dying endpoint:", lines[-1], f"({proxy.chunks} chunks through the proxy)")
    finally:
        remove_ray_dir(ray_dir)


if __name__ == "__main__":  # the fault-rate sweep for the README
    rates = [float(a) for a in sys.argv[1:]] or [0.05, 0.1, 0.2, 0.3]
    process, endpoint = start_moto()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rate in rates:
                for seed in (1, 2):
                    try:
                        print(json.dumps(chaos_round(pathlib.Path(tmp), endpoint, rate, seed)), flush=True)
                    except AssertionError as exc:
                        print(json.dumps({"rate": rate, "seed": seed, "assertion": str(exc)[-500:]}), flush=True)
    finally:
        stop_group(process)

"""The failure paths a GPU brings, checked on CPU (docs/gpu.md, "Failure table for GPU
faults"): bisection frees the failed attempt, accelerator errors by type and text, a
single-row out-of-memory retried by the next run, a GPU pool without CUDA, a hung call."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

import pytest

from ray_jobs import incremental
from ray_jobs.job import device_guard
from scoring.errors import RETRY_PREFIX, is_accelerator_error
from scoring.metric import RowMetric
from scoring.signature import Signature


class Held:
    """Stands for the device tensors a failed attempt's frames hold."""


class Failing(RowMetric):
    name = "failing"
    output_columns = ("value",)

    def __init__(self, fail):
        self.fail = fail
        self.alive_at_call: list[int] = []
        self.attempts: list[weakref.ref] = []

    def signature(self):
        return Signature(self.name, "1", {})

    def score_valid(self, rows):
        gc.disable()  # only reference counting may free the earlier attempts' objects
        try:
            self.alive_at_call.append(sum(ref() is not None for ref in self.attempts))
        finally:
            gc.enable()
        held = Held()
        self.attempts.append(weakref.ref(held))
        self.fail(rows, held)
        return [{"value": float(len(row["text"]))} for row in rows]


def test_bisection_frees_the_failed_attempt_before_the_halves_run():
    def fail(rows, held):
        if any(row["text"] == "bad" for row in rows):
            raise RuntimeError("a shape error on an odd input")

    metric = Failing(fail)
    rows = [{"id": str(i), "text": "bad" if i == 5 else f"row {i}"} for i in range(8)]
    results = metric.score_rows(rows)
    assert results[5]["error"] == "RuntimeError: a shape error on an odd input"
    assert [r["value"] for i, r in enumerate(results) if i != 5] == [5.0] * 7
    assert len(metric.alive_at_call) > 3 and set(metric.alive_at_call) == {0}


def test_out_of_memory_on_one_row_is_marked_for_the_next_run():
    def fail(rows, held):
        if any(row["text"] == "huge" for row in rows):
            raise RuntimeError("out of memory on a single item (OutOfMemoryError: CUDA out of memory)")

    rows = [{"id": str(i), "text": "huge" if i == 2 else f"row {i}"} for i in range(4)]
    results = Failing(fail).score_rows(rows)
    assert results[2]["error"].startswith(RETRY_PREFIX + "RuntimeError: out of memory on a single item")
    assert device_guard.retry_rows(results) == 1 and all(r["error"] is None for i, r in enumerate(results) if i != 2)
    meta = incremental.part_metadata("a.parquet", "e", 1, "sig", "d", 0, 4, errors=1, skipped=0, retry=1)
    assert not incremental.part_is_complete((4, meta), "e", 1, "d", 0, 4)  # the next run scores the part again
    assert incremental.part_is_complete((4, {**meta, incremental.META_PREFIX + "rows_retry": "0"}), "e", 1, "d", 0, 4)
    clean = incremental.part_metadata("a.parquet", "e", 1, "sig", "d", 0, 4, errors=1, skipped=0)
    assert incremental.META_PREFIX + "rows_retry" not in clean  # footers without retries stay as they were
    assert incremental.part_is_complete((4, clean), "e", 1, "d", 0, 4)


def test_accelerator_errors_by_type_and_by_driver_text():
    class AcceleratorError(RuntimeError):
        pass

    class Subclass(AcceleratorError):
        pass

    assert is_accelerator_error(Subclass("anything"))
    assert is_accelerator_error(RuntimeError("CUDA driver error: an illegal instruction was encountered"))
    assert is_accelerator_error(RuntimeError("CUDA error: device-side assert triggered"))
    assert not is_accelerator_error(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_accelerator_error(ValueError("cuda error in a row's text"))  # a ValueError is the row's

    def fail(rows, held):
        raise RuntimeError("CUDA driver error: unspecified launch failure")

    with pytest.raises(RuntimeError, match="CUDA driver error"):  # never bisected into row errors
        Failing(fail).score_rows([{"id": "a", "text": "x"}, {"id": "b", "text": "y"}])


def test_a_gpu_pool_without_cuda_fails_with_one_line(monkeypatch):
    monkeypatch.delenv(device_guard.SIMULATED_GPUS, raising=False)
    with pytest.raises(device_guard.NoCudaInGpuPool) as caught:
        device_guard.require_cuda("cpu", 1, cuda_available=False)
    assert "\n" not in str(caught.value) and "refusing to score on the CPU" in str(caught.value)
    with pytest.raises(device_guard.NoCudaInGpuPool):
        device_guard.require_cuda("cpu", 1, cuda_available=True)  # `device: auto` resolved to the CPU
    with pytest.raises(device_guard.NoCudaInGpuPool):
        device_guard.require_cuda("auto", 1, cuda_available=False)
    device_guard.require_cuda("cuda", 1, cuda_available=True)
    device_guard.require_cuda("auto", 1, cuda_available=True)
    device_guard.require_cuda(None, 1, cuda_available=False)  # a rule metric in a GPU pool has no model
    device_guard.require_cuda("cpu", 0, cuda_available=False)


def test_a_hung_call_ends_the_process_and_a_quick_one_does_not(tmp_path):
    script = textwrap.dedent("""
        import time
        from ray_jobs.job.device_guard import Watchdog
        dog = Watchdog(0.5, "bartscore")
        with dog.guard("a.parquet rows 0-10"):
            time.sleep(0.01)
        print("quick call done", flush=True)
        with dog.guard("a.parquet rows 10-20"):
            time.sleep(30)
        print("never")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == device_guard.HANG_EXIT
    assert proc.stdout.strip() == "quick call done"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "rows 10-20 ran past unit_timeout_s=0.5" in lines[0]


def test_unit_timeout_is_a_pool_setting():
    from ray_jobs.config import metric_pool, parse_config

    config = parse_config({"input": "in", "output": "out", "pool": {"num_gpus": 1, "unit_timeout_s": 900},
                           "metrics": [{"name": "text_stats", "pool": {"unit_timeout_s": 60}}, {"name": "bleu"}]})
    assert [metric_pool(config, spec).unit_timeout_s for spec in config.metrics] == [60, 900]

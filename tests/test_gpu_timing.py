"""`gpu_timing.steady_seconds` on a simulated asynchronous device: a call that only queues work
returns at once, as a CUDA matmul does, and the device drains the queue at its own pace."""

import time

import pytest

from benchmarks import gpu_timing

pytestmark = pytest.mark.unit


class QueueingDevice:
    """Each call queues `cost` seconds of device work and returns at once while fewer than
    `depth` calls wait (else it waits for one to finish, as a full launch queue makes the host
    wait); `synchronize` waits until the queue is empty. Time is simulated: nothing sleeps."""

    def __init__(self, cost: float, depth: int) -> None:
        self.cost, self.depth, self.now, self.done_at, self.calls = cost, depth, 0.0, 0.0, 0

    def clock(self) -> float:
        return self.now

    def waiting(self) -> int:
        return max(0, round((self.done_at - self.now) / self.cost))

    def call(self) -> int:
        if self.waiting() >= self.depth:
            self.now = self.done_at - (self.depth - 1) * self.cost
        self.now += 1e-6  # the launch itself
        self.done_at = max(self.done_at, self.now) + self.cost
        self.calls += 1
        return self.calls

    def synchronize(self, device: str) -> None:
        self.now = max(self.now, self.done_at)


@pytest.mark.parametrize(("cost", "min_seconds"), [(0.021, 1.0), (0.0017, 1.0), (0.4, 1.0), (2.5, 1.0), (1e-4, 0.05)])
def test_a_measurement_lasts_about_min_seconds_however_deep_the_launch_queue(monkeypatch, cost, min_seconds):
    """A float32 8192-cube matmul on an H200 (21 ms) with a 1,024-deep launch queue: the host's
    clock passed 1 s after about 1,000 launches, and the measurement lasted their 23 s. Each
    measurement now lasts at least `min_seconds` and at most that plus a call and a little, and
    the time per call is the device's."""
    device = QueueingDevice(cost, depth=1024)
    monkeypatch.setattr(gpu_timing, "synchronize", device.synchronize)
    monkeypatch.setattr(gpu_timing.time, "perf_counter", device.clock)
    timing = gpu_timing.steady_seconds(device.call, "cuda", min_seconds, 3)
    assert len(timing["wall"]) == 3 and timing["cut_short"] == 0
    for wall, calls in zip(timing["wall"], timing["calls"]):
        assert min_seconds <= wall <= min_seconds * 1.1 + cost + 1e-3, (wall, calls)
    assert timing["seconds"] == pytest.approx(cost, rel=0.01, abs=2e-6)
    assert timing["result"] == device.calls  # the last call's result


def test_the_deadline_leaves_out_later_measurements_but_never_the_first(monkeypatch):
    device = QueueingDevice(0.01, depth=1024)
    monkeypatch.setattr(gpu_timing, "synchronize", device.synchronize)
    monkeypatch.setattr(gpu_timing.time, "perf_counter", device.clock)
    timing = gpu_timing.steady_seconds(device.call, "cuda", 0.5, 5, deadline=time.monotonic() - 1)
    assert len(timing["runs"]) == 1 and timing["cut_short"] == 4

"""The machine a GPU benchmark ran on: the exact GPU model and its peaks, torch / CUDA / cuDNN /
driver versions, SM clock and power sampled while the timed runs ran, and a measured GEMM
ceiling (a large bfloat16 matmul at steady state on the same GPU)."""

from __future__ import annotations

import platform
import shutil
import statistics
import subprocess
import threading

import torch

from benchmarks.gpu_peaks import lookup

_SMI_FIELDS = "clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,utilization.gpu"


def _smi(query: str, device_id: str | None) -> list[str] | None:
    """One line of `nvidia-smi --query-gpu=<query>` for this device, split; None without it."""
    if not shutil.which("nvidia-smi"):
        return None
    command = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"]
    if device_id:
        command += ["-i", device_id]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 and device_id:  # an id nvidia-smi does not take (a MIG slice): the only GPU, if one
        return _smi(query, None) if torch.cuda.device_count() == 1 else None
    return [v.strip() for v in lines[0].split(",")] if done.returncode == 0 and lines else None


def _number(text: str | None) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _device_uuid(device: str) -> str | None:
    try:
        uuid = str(torch.cuda.get_device_properties(torch.device(device)).uuid)
    except Exception:  # noqa: BLE001 - an older torch without .uuid: nvidia-smi's first GPU
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def describe(device: str) -> dict:
    """The device, its peaks (gpu_peaks.lookup) and the software versions."""
    import transformers

    from scoring.varlen_attention import varlen_support

    info = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "python": platform.python_version(), "cudnn": None, "driver": None, "varlen_attn": varlen_support()}
    if not device.startswith("cuda"):
        info.update(name=platform.processor() or platform.machine() or "cpu", peaks=lookup("cpu"))
        return info
    props = torch.cuda.get_device_properties(torch.device(device))
    info.update(name=props.name, sm_count=props.multi_processor_count, memory_bytes=props.total_memory,
                capability=f"{props.major}.{props.minor}", uuid=_device_uuid(device), cudnn=torch.backends.cudnn.version(),
                peaks=lookup(props.name, props.multi_processor_count))
    driver = _smi("driver_version,clocks.max.sm,power.limit", info["uuid"])
    if driver:
        info.update(driver=driver[0], sm_clock_max_mhz=_number(driver[1]), power_limit_w=_number(driver[2]))
    return info


class Sampler:
    """SM clock, power, temperature and utilisation sampled every `every` seconds in a thread
    while a `with` block runs (nvidia-smi; torch.cuda.clock_rate / power_draw without it)."""

    def __init__(self, device: str, every: float = 1.0):
        self.device, self.every = device, every
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._uuid = _device_uuid(device) if device.startswith("cuda") else None

    def sample(self) -> dict | None:
        if not self.device.startswith("cuda"):
            return None
        row = _smi(_SMI_FIELDS, self._uuid)
        if row:
            keys = ("sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w", "temperature_c", "utilization_pct")
            return dict(zip(keys, map(_number, row)))
        try:
            return {"sm_clock_mhz": float(torch.cuda.clock_rate()), "power_w": torch.cuda.power_draw() / 1000.0}
        except Exception:  # noqa: BLE001 - no NVML either: nothing to record
            return None

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            found = self.sample()
            if found:
                self.samples.append(found)

    def __enter__(self) -> "Sampler":
        if self.device.startswith("cuda"):
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def summary(self) -> dict | None:
        """Median and range of each sampled quantity (None: nothing sampled)."""
        if not self.samples:
            return None
        out = {"samples": len(self.samples)}
        for key in self.samples[0]:
            values = [s[key] for s in self.samples if s.get(key) is not None]
            if values:
                out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        return out


def gemm_ceiling(device: str, dtype: torch.dtype, shapes: list[tuple[int, int, int]], seconds: float, repeats: int) -> list[dict]:
    """TFLOP/s of `a @ b` ((m, k) x (k, n)) per shape at steady state: after a warm-up, `repeats`
    timed runs each repeating the matmul until `seconds` have passed; the median run."""
    from benchmarks.gpu_timing import steady_seconds, synchronize

    results = []
    generator = torch.Generator(device=device).manual_seed(0)
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device, dtype=dtype, generator=generator)
        b = torch.randn(k, n, device=device, dtype=dtype, generator=generator)
        out = torch.empty(m, n, device=device, dtype=dtype)
        torch.mm(a, b, out=out)  # warm-up: cuBLAS picks its kernel
        synchronize(device)
        timing = steady_seconds(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), device, seconds, repeats)
        flops = 2.0 * m * k * n
        results.append({"m": m, "k": k, "n": n, "dtype": str(dtype).replace("torch.", ""), "seconds_per_call": timing["seconds"],
                        "tflops": flops / timing["seconds"] / 1e12, "calls_per_run": timing["calls"]})
    synchronize(device)
    return results



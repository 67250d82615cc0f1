"""Peak FLOP/s per GPU model and dtype, for MFU: the exact model from the name CUDA reports
(`torch.cuda.get_device_name`), checked against the SM count it reports, never a guess.

Every figure below is from the vendor's datasheet for that part (NVIDIA H100, H200, A100, L4
and A10 datasheets): the dense tensor-core peak for bfloat16 (the "with sparsity"
figures halved) and the IEEE float32 peak (CUDA cores, not TF32). Float32 rows are divided by
the float32 peak, bfloat16 rows by the bfloat16 one; any other dtype has no peak here.

A name that matches no rule, or an ambiguous one (a bare "NVIDIA H100" is SXM or NVL, whose
peaks differ), gives no peak, so MFU is reported as null with the name beside it. So does an
SM count other than the part's (a MIG slice, say): the table's peak is the whole chip's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    model: str
    bf16_tflops: float | None  # dense bfloat16 tensor-core peak
    fp32_tflops: float | None  # IEEE float32 (non-tensor) peak
    sm_count: int | None  # SMs of the full part (None: not checked)
    source: str = "vendor datasheet"


# vendor datasheet figures (dense; the datasheets print bf16 "with sparsity", twice these)
PARTS = {
    "H100 SXM": Part("NVIDIA H100 SXM5", 989.5, 67.0, 132),  # vendor datasheet: bf16 1,979* / FP32 67
    "H100 PCIe": Part("NVIDIA H100 PCIe", 756.5, 51.0, 114),  # vendor datasheet: bf16 1,513* / FP32 51
    "H100 NVL": Part("NVIDIA H100 NVL", 835.5, 60.0, 132),  # vendor datasheet: bf16 1,671* / FP32 60
    "H200 SXM": Part("NVIDIA H200 SXM", 989.5, 67.0, 132),  # vendor datasheet: bf16 1,979* / FP32 67
    "H200 NVL": Part("NVIDIA H200 NVL", 835.5, 60.0, None),  # vendor datasheet: bf16 1,671* / FP32 60
    "A100 SXM4 40GB": Part("NVIDIA A100 SXM4 40GB", 312.0, 19.5, 108),  # vendor datasheet: bf16 312 / FP32 19.5
    "A100 SXM4 80GB": Part("NVIDIA A100 SXM4 80GB", 312.0, 19.5, 108),  # vendor datasheet
    "A100 PCIe 40GB": Part("NVIDIA A100 PCIe 40GB", 312.0, 19.5, 108),  # vendor datasheet
    "A100 PCIe 80GB": Part("NVIDIA A100 PCIe 80GB", 312.0, 19.5, 108),  # vendor datasheet
    "L4": Part("NVIDIA L4", 121.0, 30.3, 58),  # vendor datasheet: bf16 242* / FP32 30.3
    "A10": Part("NVIDIA A10", 125.0, 31.2, 72),  # vendor datasheet: bf16 250* / FP32 31.2
    # the A10G is an AWS-only part with no public NVIDIA datasheet: known, but no peak
    "A10G": Part("NVIDIA A10G", None, None, None, source="no public vendor datasheet"),
}


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t]


def identify(name: str) -> str | None:
    """The PARTS key for a CUDA device name ('NVIDIA H100 80GB HBM3' -> 'H100 SXM'), or None
    when the name does not say exactly which part it is."""
    tokens = _tokens(name)
    has = set(tokens).__contains__
    sxm = any(t.startswith("sxm") for t in tokens)
    if has("h100"):
        if has("nvl"):
            return "H100 NVL"
        if has("pcie"):
            return "H100 PCIe"
        if sxm or has("hbm3"):  # the SXM5 part reports itself as 'NVIDIA H100 80GB HBM3'
            return "H100 SXM"
        return None
    if has("h200"):  # 'gh200' is another token: the Grace Hopper superchip is not in the table
        if has("nvl"):
            return "H200 NVL"
        if has("pcie"):
            return None
        return "H200 SXM"  # the SXM part reports itself as 'NVIDIA H200'
    if has("a100"):
        form = "SXM4" if sxm else "PCIe" if has("pcie") else None
        memory = "80GB" if has("80gb") else "40GB" if has("40gb") else None
        return f"A100 {form} {memory}" if form and memory else None
    for key, token in (("L4", "l4"), ("A10G", "a10g"), ("A10", "a10")):
        if has(token):
            return key
    return None


def lookup(name: str, sm_count: int | None = None) -> dict:
    """{'name', 'part', 'bf16_tflops', 'fp32_tflops', 'source', 'reason'}: the part's peaks, or
    None peaks with the reason (unknown name, no datasheet, SM count not the part's)."""
    key = identify(name)
    out = {"name": name, "part": None, "bf16_tflops": None, "fp32_tflops": None, "sm_count": sm_count,
           "source": None, "reason": None}
    if key is None:
        out["reason"] = f"no peak for {name!r}: not an exact model in the table (pass --peak-tflops)"
        return out
    part = PARTS[key]
    out.update(part=part.model, source=part.source)
    if part.bf16_tflops is None:
        out["reason"] = f"{part.model}: {part.source}"
        return out
    if part.sm_count is not None and sm_count is not None and sm_count != part.sm_count:
        out["reason"] = f"{part.model} has {part.sm_count} SMs, this device {sm_count} (a MIG slice?): peak unknown"
        return out
    out.update(bf16_tflops=part.bf16_tflops, fp32_tflops=part.fp32_tflops)
    return out


def peak_flops(peaks: dict, dtype: str) -> float | None:
    """FLOP/s to divide a `dtype` run by: bfloat16 -> the dense bf16 peak, float32 -> the IEEE
    float32 peak, anything else (or an unknown part) -> None."""
    tflops = {"bfloat16": peaks.get("bf16_tflops"), "float32": peaks.get("fp32_tflops")}.get(dtype)
    return tflops * 1e12 if tflops else None

"""The peak table behind MFU: the exact GPU model from the name CUDA reports, its SM count
checked, the bf16 or fp32 peak by the run's dtype, and no peak at all rather than a guess."""

from __future__ import annotations

import pytest

from benchmarks.gpu_peaks import PARTS, identify, lookup, peak_flops


@pytest.mark.parametrize(("name", "part"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),  # what the SXM5 part reports
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),  # the name of the earlier H200 run (benchmarks/results/gpu-check-h200)
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA A10", "A10"),
])
def test_device_names_map_to_their_exact_part(name, part):
    assert identify(name) == part


@pytest.mark.parametrize("name", ["NVIDIA H100", "NVIDIA GH200 480GB", "NVIDIA L40", "NVIDIA A100", "NVIDIA GeForce RTX 4090",
                                  "Tesla T4", "cpu", ""])
def test_ambiguous_or_unknown_names_get_no_peak(name):
    found = lookup(name)
    assert found["bf16_tflops"] is None and found["fp32_tflops"] is None
    assert found["name"] == name and found["reason"]
    assert peak_flops(found, "bfloat16") is None and peak_flops(found, "float32") is None


def test_h100_variants_get_their_own_peaks_not_the_sxm_ones():
    sxm, pcie, nvl = (lookup(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL"))
    assert sxm["bf16_tflops"] == pytest.approx(989.5) and sxm["fp32_tflops"] == 67
    assert pcie["bf16_tflops"] == pytest.approx(756.5) and pcie["fp32_tflops"] == 51
    assert nvl["bf16_tflops"] == pytest.approx(835.5) and nvl["fp32_tflops"] == 60
    assert all(p["source"] == "vendor datasheet" for p in (sxm, pcie, nvl))


def test_float32_runs_are_divided_by_the_ieee_fp32_peak():
    h200 = lookup("NVIDIA H200", 132)
    assert peak_flops(h200, "bfloat16") == pytest.approx(989.5e12)
    assert peak_flops(h200, "float32") == pytest.approx(67e12)
    # the first H200 run's BART distinct float32: 129.63 TFLOP in 3.389 s is 57 % of fp32, not 3.9 %
    assert 129.63e12 / 3.389 / peak_flops(h200, "float32") == pytest.approx(0.571, abs=0.002)
    assert peak_flops(h200, "float16") is None  # no figure for a dtype the table does not hold


def test_an_sm_count_other_than_the_parts_gives_no_peak():
    assert lookup("NVIDIA H100 80GB HBM3", 132)["bf16_tflops"] == pytest.approx(989.5)
    sliced = lookup("NVIDIA H100 80GB HBM3", 16)  # a MIG slice reports the full name
    assert sliced["bf16_tflops"] is None and "MIG" in sliced["reason"]
    assert sliced["part"] == "NVIDIA H100 SXM5"


def test_a_part_without_a_datasheet_is_named_but_has_no_peak():
    a10g = lookup("NVIDIA A10G", 80)
    assert a10g["part"] == "NVIDIA A10G" and a10g["bf16_tflops"] is None and "datasheet" in a10g["reason"]


def test_every_known_peak_says_where_it_comes_from_and_fp32_is_below_bf16():
    for part in PARTS.values():
        if part.bf16_tflops is not None:
            assert part.source == "vendor datasheet" and 0 < part.fp32_tflops < part.bf16_tflops

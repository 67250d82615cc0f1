"""The kernel classifier and the per-category breakdown, on the kernel names and times of the
first H200 run's profile (benchmarks/results/gpu-check-h200/bench_gpu.log: BART-large bf16
s->h, distinct sources, one 418 ms engine call)."""

from __future__ import annotations

import pathlib
import re
from types import SimpleNamespace

import pytest

from benchmarks.gpu_profile import Record, breakdown, category, classify, over_vocabulary, records_from_events

LOG = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "gpu-check-h200" / "bench_gpu.log"


def _profile_rows() -> list[tuple[str, float, float]]:
    """(name, self CPU ms, self CUDA ms) of every row of the committed profile table."""
    def ms(text: str) -> float:
        value = float(re.sub(r"[a-z]+$", "", text))
        return value / 1000 if text.endswith("us") else value

    rows = []
    for line in LOG.read_text().splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 11 and cells[-1].isdigit():
            rows.append((cells[0], ms(cells[2]), ms(cells[6])))
    return rows


EXPECTED = {  # name prefix in the H200 profile -> category by name alone
    "nvjet_sm90_tst_": "gemm",  # cuBLAS's Hopper GEMMs: the linears
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wg": "attention",
    "void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_": "gemm",  # the output layer: head only by its operator
    "void at::native::(anonymous namespace)::vectorized_l": "elementwise",  # layer norm
    "void at::native::vectorized_elementwise_kernel<8, at": "elementwise",  # GELU
    "Command Buffer Full": None,  # CUPTI's record of blocked launches, not a kernel
    "aten::addmm": "gemm", "aten::mm": "gemm", "aten::_cudnn_attention_forward": "attention",
    "aten::native_layer_norm": "elementwise", "aten::gelu": "elementwise", "aten::add": "elementwise",
}


def test_every_row_of_the_h200_profile_is_classified_as_expected():
    rows = _profile_rows()
    assert len(rows) == 15
    for name, _, _ in rows:
        prefix = next(p for p in EXPECTED if name.startswith(p))
        assert classify(name) == EXPECTED[prefix], name


@pytest.mark.parametrize(("name", "expected"), [
    ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1", "gemm"),
    ("cublasLt::splitKreduce_kernel<32, 16, int, float>", "gemm"),
    ("triton_tem_fused_mm_0", "gemm"),
    ("triton_red_fused_logsumexp_3", "head"),
    ("triton_poi_fused_add_gelu_native_layer_norm_1", "elementwise"),
    ("Memcpy HtoD (Pinned -> Device)", "memcpy"),
    ("Memset (Device)", "memcpy"),
    ("void at::native::index_elementwise_kernel<128, 4>", "elementwise"),
    ("some_new_kernel_family", "other"),
    ("Stream Sync", None),
    ("Event Sync", None),
])
def test_kernel_families_beyond_the_h200_run(name, expected):
    assert classify(name) == expected


def test_the_output_layer_is_told_apart_by_the_vocabulary_in_its_operator():
    assert over_vocabulary([[30000, 1024], [1024, 50265]], [50265])
    assert over_vocabulary([[30000, 50304]], [50265])  # padded to a multiple of 64 for aligned kernels
    assert not over_vocabulary([[50265, 1024], [1024, 4096]], [50265])  # rows are not the vocabulary
    assert not over_vocabulary([[4096, 1024], []], [50265])
    assert category("void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_...", True) == "head"
    assert category("nvjet_sm90_tst_128x248_64x4_2x1_v_bz_coopA_bias_TNT", False) == "gemm"
    assert category("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wg", True) == "attention"


def test_the_h200_distinct_call_broken_down():
    """The table's kernel rows laid end to end, the head GEMM linked to the vocabulary: 142 ms of
    linears (the top rows), 87 attention, 38 head, 52 memory-bound, and the rest of the 418 ms
    steady call idle or in kernels below the table's top 15."""
    records, clock = [], 0.0
    for name, self_cpu, self_cuda in _profile_rows():
        if self_cpu == 0:  # device kernels have no CPU time of their own
            records.append(Record(name, clock * 1e3, (clock + self_cuda) * 1e3, head="cutlass_75" in name))
            clock += self_cuda
    records.append(Record("Command Buffer Full", 0.0, 49_328.0))  # must not count as busy
    found = breakdown(records, span_us=430_000, call_seconds=0.418)
    assert found["ms"]["gemm"] == pytest.approx(88.638 + 22.425 + 15.826 + 15.481)
    assert found["ms"]["attention"] == pytest.approx(86.516)
    assert found["ms"]["head"] == pytest.approx(38.421)
    assert found["ms"]["elementwise"] == pytest.approx(26.696 + 25.328)
    busy = 142.37 + 86.516 + 38.421 + 52.024
    assert found["busy_ms"] == pytest.approx(busy, abs=1e-3)
    assert found["ms"]["idle"] == pytest.approx(418 - busy, abs=1e-3)
    assert found["busy_fraction"] == pytest.approx(busy / 418, rel=1e-6)
    assert found["busy_fraction_profiled"] == pytest.approx(busy / 430, rel=1e-6)
    assert sum(found["share"].values()) == pytest.approx(1.0)
    assert found["top"][0] == {"name": "nvjet_sm90_tst_128x248_64x4_2x1_v_bz_coopA_bias_TNT", "category": "gemm", "ms": 88.638, "calls": 1}


def test_overlapping_kernels_count_once_towards_busy_time():
    found = breakdown([Record("nvjet_a", 0, 100), Record("nvjet_b", 50, 150), Record("Memcpy DtoD", 300, 350)], span_us=500)
    assert found["busy_ms"] == pytest.approx(0.2) and found["ms"]["idle"] == pytest.approx(0.3)
    nested = breakdown([Record("aten::addmm", 0, 100), Record("aten::gelu", 10, 60)], span_us=500, nested=True)
    assert nested["busy_ms"] == pytest.approx(0.15)  # CPU self times: summed, not united


def _event(id_, name, start, end, cuda=False, linked=0, shapes=None, parent=None):
    return SimpleNamespace(id=id_, name=name, device_type="DeviceType.CUDA" if cuda else "DeviceType.CPU", linked_correlation_id=linked,
                           input_shapes=shapes or [], time_range=SimpleNamespace(start=start, end=end), cpu_parent=parent,
                           cpu_children=[], is_async=False)


def test_kernels_take_the_head_from_the_operator_that_launched_them():
    call = _event(1, "bench-call", 0, 1000)
    mm = _event(2, "aten::mm", 10, 20, shapes=[[512, 1024], [1024, 50265]], parent=call)
    addmm = _event(3, "aten::addmm", 30, 40, shapes=[[4096], [512, 1024], [1024, 4096]], parent=call)
    ranged = _event(4, "OutputHead.logsumexp", 50, 60, parent=call)  # a profiler range named for the head
    add = _event(5, "aten::add", 52, 58, shapes=[[512, 16]], parent=ranged)
    events = [call, mm, addmm, ranged, add,
              _event(10, "void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_>", 100, 400, cuda=True, linked=2),
              _event(11, "nvjet_sm90_tst_256x152", 400, 500, cuda=True, linked=3),
              _event(12, "void at::native::vectorized_elementwise_kernel<4>", 500, 550, cuda=True, linked=5),
              _event(13, "Command Buffer Full", 0, 900, cuda=True, linked=3),
              _event(14, "Stream Sync", 550, 990, cuda=True, linked=0),  # the call's final sync: waiting, not work
              _event(15, "bench-call", 90, 560, cuda=True),  # the call's range mirrored onto the GPU timeline
              _event(16, "OutputHead.logsumexp", 500, 550, cuda=True)]
    events[-3].activity_type = "cuda_sync"
    events[-2].activity_type = events[-1].activity_type = "gpu_user_annotation"
    events[-1].is_user_annotation = True
    records, span, source = records_from_events(events, [50265], "bench-call")
    assert source == "cuda kernels" and span == 1000
    found = breakdown(records, span)
    assert found["ms"]["head"] == pytest.approx(0.35) and found["ms"]["gemm"] == pytest.approx(0.1)
    assert found["busy_ms"] == pytest.approx(0.45) and found["ms"]["idle"] == pytest.approx(0.55)

"""examples/summeval_gptscore.yaml: its metric section, with a tiny random Llama in place of the
hub model and the CPU settings its first line gives (`--set`), scores rows of the data it names;
every column equals the definition (G1 per pair, G4 directions, agg mean) computed pair by pair
with one unpadded forward each. Tiny random weights: the numbers mean nothing beyond that."""

from __future__ import annotations

import math
import pathlib

import pyarrow.parquet as pq
import pytest

from ctgscore.testing.tiny_llms import build_decoder
from ray_jobs.config import load_config
from ray_jobs.job.metrics import build_metric_for, resolve_metric
from tests.test_prompted_lm import naive_row

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "summeval_gptscore.yaml"


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    """A Llama-family model (GQA, no pad token) with room for a SummEval source in its prompt."""
    return str(build_decoder("llama", tmp_path_factory.mktemp("tiny-llama"), positions=2048))


@pytest.mark.timeout(300)
def test_the_gptscore_example_scores_summeval_rows_with_a_tiny_llama(tiny_llama):
    first_line = EXAMPLE.read_text(encoding="utf-8").splitlines()[0]
    cpu = {"metrics.0.pool.num_gpus": "0", "dtype": "float32"}
    assert all(f"--set {key}={value}" in first_line for key, value in cpu.items())  # what the example tells a CPU user
    config = load_config(EXAMPLE, {"metrics.0.params.model": tiny_llama, **cpu})
    [spec] = config.metrics
    resolved = resolve_metric(config, spec)  # as the job's driver does: checked params, signature
    assert resolved.params["model"] == tiny_llama and resolved.params["dtype"] == "float32"
    metric = build_metric_for(spec, resolved.params, resolved.cls, row_limits=config.limits.row_limits())
    assert metric.aspects == ("coherence", "consistency", "fluency", "relevance") and metric.agg == "mean"
    assert resolved.output_columns == tuple(f"gptscore_{a}_{d}" for a in metric.aspects for d in ("s_h", "r_h", "h_r", "f"))
    assert "templates:4:" in resolved.signature and "model:tiny-llama" in resolved.signature

    rows = pq.read_table(config.input).slice(0, 3).to_pylist()  # three summaries of one document
    assert len({row["source"] for row in rows}) == 1 and all(len(row["references"]) == 11 for row in rows)
    got = metric.score_rows(rows)
    for row, result in zip(rows, got):
        assert result["error"] is None, result["error"]
        expected = naive_row(metric, row)
        assert set(expected) == set(resolved.output_columns)
        for column, value in expected.items():
            assert math.isfinite(result[column]) and result[column] < 0, column
            assert result[column] == pytest.approx(value, abs=1e-5), column
    assert len({result["gptscore_fluency_s_h"] for result in got}) == 3  # each summary its own score

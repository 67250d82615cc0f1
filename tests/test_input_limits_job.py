"""The Ray scoring job with hostile cells (`scoring.limits`): a CoDI constraint nested 100,000
deep, a 50 MB text and a row with a million references are each one row error while the
shard's other rows are scored, and a shard that inflates is refused as a bad shard naming
its sizes."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.registry import build_metric


def _rows() -> list[dict]:
    normal = [
        {"id": f"ok{i}", "text": f"the cat sat on mat number {i}", "references": [f"a cat sat on the mat {i}"],
         "constraint": json.dumps({"task": "length", "label": [1, 8 + i % 2]})}
        for i in range(6)
    ]
    hostile = [
        {"id": "nested", "text": "short", "references": ["short"], "constraint": "[" * 100_000 + "]" * 100_000},
        {"id": "huge", "text": "word " * 10_000_000, "references": ["word"],
         "constraint": json.dumps({"task": "length", "label": [1, 5]})},
        {"id": "many", "text": "a text", "references": ["a reference"] * 1_000_000,
         "constraint": json.dumps({"task": "length", "label": [1, 5]})},
    ]
    return normal[:3] + hostile + normal[3:]


@pytest.mark.timeout(400)
def test_hostile_cells_are_row_errors_and_an_inflating_shard_is_refused(ray_local, ray_address, tmp_path):
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job

    shards = tmp_path / "dump"
    shards.mkdir()
    rows = _rows()
    pq.write_table(pa.Table.from_pylist(rows), shards / "mixed.parquet")
    bomb = shards / "bomb.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(24)], "text": ["a" * 900_000] * 24,
                             "references": [["a"]] * 24, "constraint": ["{}"] * 24}),
                   bomb, compression="zstd", use_dictionary=False)
    config = parse_config({
        "input": str(shards), "output": str(tmp_path / "out"),
        "metrics": [{"name": "codi"}, {"name": "chrf"}],
        "batch_size": 4, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
        "skip_bad_shards": True, "progress": False, "ray": {"address": ray_address},
    })  # fmt: skip
    manifest = run_job(config)

    [bad] = manifest["bad_shards"]
    assert bad["file"] == str(bomb)
    assert f"in a file of {bomb.stat().st_size} bytes" in bad["error"] and "uncompressed bytes" in bad["error"]

    expected_errors = {
        "codi": {"nested": "max_json_depth", "huge": "max_cell_bytes"},  # codi reads no references
        "chrf": {"huge": "max_cell_bytes", "many": "max_references"},
    }
    for label, errors in expected_errors.items():
        report = manifest["metrics"][label]
        assert report["rows_in"] == report["rows_out"] == len(rows)
        out = {row["id"]: row for row in pq.read_table(tmp_path / "out" / label).to_pylist()}
        assert set(out) == {row["id"] for row in rows}
        for row_id, knob in errors.items():
            assert knob in (out[row_id]["error"] or ""), (label, row_id, out[row_id])
        scored = [row for row in rows if row["id"] not in errors]
        expected = build_metric(label, {}).score_rows(scored)
        column = {"codi": "codi_success", "chrf": "chrf"}[label]
        for row, want in zip(scored, expected):
            assert out[row["id"]]["error"] is None, (label, row["id"], out[row["id"]]["error"])
            assert out[row["id"]][column] == pytest.approx(want[column]), (label, row["id"])

"""The scoring job on the session's local Ray: parity with in-process scoring, deterministic
part names, each metric folder one dataset, incremental re-runs, bad input, pruning."""

from __future__ import annotations

import os
import pathlib
import shutil
import sys

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from ray_jobs.config import parse_config
from ray_jobs.score_corpus import JobError, run_job
from scoring.registry import build_metric
from tests.job_support import SlowLengthMetric, make_corpus, make_rows, part_files, shard_output, shard_rows, write_rows

SLOW = {"name": "slow_length"}


def job(input_dir, output_dir, metrics, **extra):
    data = {
        "input": str(input_dir),
        "output": str(output_dir),
        "metrics": metrics,
        "batch_size": 16,
        "pool": {"min_size": 1, "max_size": 2, "num_cpus": 0.5},
        "progress": False,
        **extra,
    }
    return parse_config(data)


def assert_matches_in_process(metric, input_path: pathlib.Path, metric_folder: pathlib.Path, rel: str, skip=("slow_pid",)):
    """Output rows == `metric.score_rows` on the input rows, row for row, in input order."""
    inputs = pq.read_table(input_path).to_pylist()
    expected = metric.score_rows(inputs)
    got = shard_rows(metric_folder, rel)
    assert [row["id"] for row in got] == [row["id"] for row in inputs]
    signature = str(metric.signature())
    for source, want, have in zip(inputs, expected, got):
        for column in (*metric.output_columns, "error", "warning"):
            if column not in skip:
                assert have[column] == want[column], (source["id"], column)
        assert have["signature"] == signature
        assert have["row_key"] == metric.row_key(source)
        for column in ("dataset", "system", "doc_id", "human_quality"):
            assert have[column] == source[column]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_local_job_matches_in_process_scores(ray_local, tmp_path):
    paths = make_corpus(tmp_path / "in", shards=9, rows=30)
    rows = make_rows(9, 6)
    rows[1]["text"] = None
    rows[2]["text"] = "   "
    write_rows(tmp_path / "in" / "nested" / "part-00009.parquet", rows)
    paths.append(tmp_path / "in" / "nested" / "part-00009.parquet")
    write_rows(tmp_path / "in" / "part-00010-empty.parquet", [])  # an empty shard still gets its (empty) output
    paths.append(tmp_path / "in" / "part-00010-empty.parquet")
    config = job(tmp_path / "in", tmp_path / "out", [{"name": "text_stats"}, SLOW], part_rows=20)

    manifest = run_job(config)

    rels = sorted(str(p.relative_to(tmp_path / "in")) for p in paths)
    for label in ("text_stats", "slow_length"):
        # deterministic names: one folder per shard, parts of at most part_rows rows named by row range
        written = part_files(tmp_path / "out" / label)
        expected_ranges = {rel: [(0, 20), (20, 30)] for rel in rels}
        expected_ranges["nested/part-00009.parquet"] = [(0, 6)]
        expected_ranges["part-00010-empty.parquet"] = [(0, 0)]
        got_ranges: dict[str, list] = {}
        for name in written:
            folder, part = name.rsplit("/", 1)
            _, start, stop, version = part[: -len(".parquet")].split("-")
            assert len(version) == 12
            got_ranges.setdefault(folder + ".parquet", []).append((int(start), int(stop)))
        assert got_ranges == expected_ranges
        # the metric folder is one dataset: pandas reads it whole, the manifest is beside it
        frame = pd.read_parquet(tmp_path / "out" / label)
        assert len(frame) == 9 * 30 + 6 and frame["id"].is_unique
        report = manifest["metrics"][label]
        assert report["rows_in"] == report["rows_out"] == 9 * 30 + 6
        assert report["rows_scored"] == 9 * 30 + 6 and report["rows_cached"] == 0
        assert report["rows_error"] == 2
    for metric, label in ((build_metric("text_stats"), "text_stats"), (SlowLengthMetric(), "slow_length")):
        for path in paths:
            rel = str(path.relative_to(tmp_path / "in"))
            assert_matches_in_process(metric, path, tmp_path / "out" / label, rel)
    nested = shard_rows(tmp_path / "out" / "text_stats", "nested/part-00009.parquet")
    assert [row["error"] for row in nested[:3]] == [None, "null field 'text'", "empty field 'text'"]
    on_disk = __import__("json").loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk["input"]["rows"] == 9 * 30 + 6
    assert {f["file"] for f in on_disk["input"]["files"]} == {str(p) for p in paths}
    assert all(f["etag"] and f["size"] > 0 for f in on_disk["input"]["files"])
    assert on_disk["signature"].startswith("metric:ctgscore.ray_job")


def _mtimes(folder: pathlib.Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*.parquet")}


def _changed_shards(before: dict[str, int], after: dict[str, int]) -> set[str]:
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    return {k.rsplit("/", 1)[0] for k in changed}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_incremental_reruns_score_only_what_changed(ray_local, tmp_path):
    make_corpus(tmp_path / "in", shards=8, rows=25)
    metrics = [{"name": "text_stats"}, {"name": "slow_length", "params": {"salt": 0}}]
    first = run_job(job(tmp_path / "in", tmp_path / "out", metrics))
    assert first["metrics"]["text_stats"]["rows_scored"] == 200
    before = {label: _mtimes(tmp_path / "out" / label) for label in ("text_stats", "slow_length")}

    # unchanged corpus: everything reused, nothing rewritten
    second = run_job(job(tmp_path / "in", tmp_path / "out", metrics))
    for label in ("text_stats", "slow_length"):
        report = second["metrics"][label]
        assert (report["rows_scored"], report["rows_cached"], report["shards_reused"]) == (0, 200, 8)
        assert _mtimes(tmp_path / "out" / label) == before[label]

    # one shard changes: 3 edited rows and 2 new rows are scored, its 22 other rows reused
    changed = tmp_path / "in" / "part-00002.parquet"
    rows = pq.read_table(changed).to_pylist()
    for row in rows[:3]:
        row["text"] = row["text"] + " edited now"
    rows += [dict(rows[5], id="new-1", text="brand new row"), dict(rows[6], id="new-2", text="another new one")]
    write_rows(changed, rows)
    third = run_job(job(tmp_path / "in", tmp_path / "out", metrics))
    for label in ("text_stats", "slow_length"):
        report = third["metrics"][label]
        assert (report["rows_scored"], report["rows_cached"], report["rows_out"]) == (5, 197, 202)
        after = _mtimes(tmp_path / "out" / label)
        assert _changed_shards(before[label], after) == {"part-00002"}  # its old part replaced, nothing else touched
        assert len(list(shard_output(tmp_path / "out" / label, "part-00002.parquet").iterdir())) == 1
        assert third["metrics"][label]["parts_replaced"] == 1
    assert_matches_in_process(build_metric("text_stats"), changed, tmp_path / "out" / "text_stats", "part-00002.parquet")
    assert_matches_in_process(SlowLengthMetric(), changed, tmp_path / "out" / "slow_length", "part-00002.parquet")

    # a new "model revision" of one metric invalidates exactly that metric's rows
    text_before = _mtimes(tmp_path / "out" / "text_stats")
    metrics[1] = {"name": "slow_length", "params": {"salt": 1}}
    fourth = run_job(job(tmp_path / "in", tmp_path / "out", metrics))
    assert fourth["metrics"]["slow_length"]["rows_scored"] == 202
    assert fourth["metrics"]["text_stats"]["rows_scored"] == 0
    assert _mtimes(tmp_path / "out" / "text_stats") == text_before
    assert {row["signature"] for row in shard_rows(tmp_path / "out" / "slow_length", "part-00000.parquet")} == {
        str(SlowLengthMetric(salt=1).signature())
    }

    # a shard removed from the dump: its output is kept and reported (never deleted silently) ...
    os.remove(tmp_path / "in" / "part-00007.parquet")
    gone = shard_output(tmp_path / "out" / "text_stats", "part-00007.parquet")
    kept_files = sorted(gone.iterdir())
    fifth = run_job(job(tmp_path / "in", tmp_path / "out", metrics))
    for label in ("text_stats", "slow_length"):
        assert fifth["metrics"][label]["rows_out"] == 177
        assert fifth["metrics"][label]["orphaned_outputs"] == [str(shard_output(tmp_path / "out" / label, "part-00007.parquet"))]
        assert fifth["metrics"][label]["pruned_outputs"] == []
    assert sorted(gone.iterdir()) == kept_files
    # ... and removed only with prune: true, every removal recorded
    sixth = run_job(job(tmp_path / "in", tmp_path / "out", metrics, prune=True))
    for label in ("text_stats", "slow_length"):
        assert not any(shard_output(tmp_path / "out" / label, "part-00007.parquet").glob("*.parquet"))
        assert sixth["metrics"][label]["pruned_outputs"] == [
            str(p).replace("/text_stats/", f"/{label}/") for p in kept_files
        ]
        assert sixth["metrics"][label]["rows_scored"] == 0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bad_input_is_named_and_good_rows_come_out(ray_local, tiny_models, tmp_path):
    folder = tmp_path / "in"
    good = make_rows(0, 12)
    write_rows(folder / "good.parquet", good)
    nulls = make_rows(1, 5)
    nulls[0]["text"] = None
    nulls[1]["text"] = ""
    write_rows(folder / "nulls.parquet", nulls)
    mismatch = make_rows(2, 5)
    mismatch[2]["prefix"] = "zebra unicorn"
    mismatch[4]["text"] = "not the prefix at all"
    write_rows(folder / "mismatch.parquet", mismatch)
    no_prefix = pa.Table.from_pylist(make_rows(3, 4)).drop_columns(["prefix"])
    pq.write_table(no_prefix, folder / "no_prefix.parquet")
    (folder / "truncated.parquet").write_bytes((folder / "good.parquet").read_bytes()[:-100])
    wrong = pa.Table.from_pylist(make_rows(4, 3))
    wrong = wrong.set_column(wrong.schema.get_field_index("human_quality"), "human_quality", pa.array(["a", "b", "c"]))
    pq.write_table(wrong, folder / "wrong_type.parquet")

    ctrleval = {
        "name": "ctrleval",
        "params": {"model": tiny_models["pegasus"], "iwf": tiny_models["iwf"], "aspects": ["consistency"]},
    }
    metrics = [{"name": "text_stats"}, ctrleval]

    with pytest.raises(JobError) as excinfo:
        run_job(job(folder, tmp_path / "out", metrics))
    message = str(excinfo.value)
    assert "2 bad input shard(s)" in message and "skip_bad_shards" in message
    assert f"{folder / 'truncated.parquet'}: unreadable Parquet" in message
    assert f"{folder / 'wrong_type.parquet'}: column 'human_quality' has type string, expected float64" in message
    assert not (tmp_path / "out").exists()  # failed before any work started

    manifest = run_job(job(folder, tmp_path / "out", metrics, skip_bad_shards=True))
    assert sorted((b["file"], b["error"].split(" (")[0]) for b in manifest["bad_shards"]) == [
        (str(folder / "truncated.parquet"), "unreadable Parquet"),
        (str(folder / "wrong_type.parquet"), "column 'human_quality' has type string, expected float64"),
    ]
    for label in ("text_stats", "ctrleval"):
        assert manifest["metrics"][label]["rows_in"] == manifest["metrics"][label]["rows_out"] == 12 + 5 + 5 + 4
        assert sorted(p.name for p in (tmp_path / "out" / label).iterdir()) == ["good", "mismatch", "no_prefix", "nulls"]
    errors = lambda label, name: [r["error"] for r in shard_rows(tmp_path / "out" / label, name)]  # noqa: E731
    assert errors("text_stats", "nulls.parquet")[:2] == ["null field 'text'", "empty field 'text'"]
    assert errors("text_stats", "no_prefix.parquet") == [None] * 4  # text_stats does not read prefix
    assert errors("ctrleval", "no_prefix.parquet") == [None] * 4  # not CTRLEval consistency rows: skipped
    assert [r["skipped"] for r in shard_rows(tmp_path / "out" / "ctrleval", "no_prefix.parquet")] == ["no prefix"] * 4
    assert manifest["metrics"]["ctrleval"]["rows_skipped"] == 4
    assert any("no_prefix.parquet lacks column 'prefix' read by metric ctrleval" in n for n in manifest["schema_notes"])
    mismatch_errors = errors("ctrleval", "mismatch.parquet")
    assert [i for i, e in enumerate(mismatch_errors) if e] == [2, 4]
    assert "does not start with its prefix" in mismatch_errors[2]
    samples = manifest["metrics"]["ctrleval"]["error_samples"]
    assert {"file": str(folder / "mismatch.parquet"), "row": 4, "id": mismatch[4]["id"]}.items() <= next(
        s for s in samples if s["id"] == mismatch[4]["id"]
    ).items()
    # good rows are scored, and equal to in-process scoring with the same model
    from ray_jobs.job.metrics import build_metric_for, metric_params

    config = job(folder, tmp_path / "out", metrics)
    metric = build_metric_for(config.metrics[1], metric_params(config, config.metrics[1]))
    assert_matches_in_process(metric, folder / "mismatch.parquet", tmp_path / "out" / "ctrleval", "mismatch.parquet")
    assert all(r["ctrleval_consistency"] is not None for r in shard_rows(tmp_path / "out" / "ctrleval", "good.parquet"))
    shutil.rmtree(tmp_path / "out")


def _outputs(folder: pathlib.Path) -> dict[str, list[dict]]:
    return {str(p.relative_to(folder)): pq.read_table(p).to_pylist() for p in sorted(folder.rglob("*.parquet"))}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_plan_trusts_the_manifest_only_where_storage_agrees(ray_local, tmp_path):
    """Every part's footer is read and checked against the previous manifest's record: a part
    deleted or overwritten behind the job's back, or a shard replaced by one of the same name
    and size, is detected and its rows are scored again; without a manifest the footers give
    the same result."""
    make_corpus(tmp_path / "in", shards=4, rows=20)
    replaced = tmp_path / "in" / "part-00002.parquet"
    rows = pq.read_table(replaced).to_pylist()
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(replaced)), replaced, compression="none", use_dictionary=False)
    metrics = [{"name": "text_stats"}]
    out = tmp_path / "out" / "text_stats"
    run_job(job(tmp_path / "in", tmp_path / "out", metrics, part_rows=10))
    unchanged = run_job(job(tmp_path / "in", tmp_path / "out", metrics, part_rows=10))["metrics"]["text_stats"]
    assert (unchanged["rows_scored"], unchanged["footers_read"], unchanged["parts_kept"]) == (0, 8, 8)
    assert "parts_not_reused" not in unchanged
    reference = _outputs(out)

    # a part deleted: the manifest still lists it, the listing does not; its rows come back
    deleted = sorted(shard_output(out, "part-00000.parquet").iterdir())[0]
    deleted.unlink()
    report = run_job(job(tmp_path / "in", tmp_path / "out", metrics, part_rows=10))["metrics"]["text_stats"]
    assert (report["rows_scored"], report["footers_read"], report["rows_out"]) == (10, 7, 80)
    assert _outputs(out) == reference

    # a part overwritten (same name, fewer rows): its bytes differ from the record (md5), so it
    # is not reused, and its range is written again
    overwritten = sorted(shard_output(out, "part-00001.parquet").iterdir())[1]
    table = pq.read_table(overwritten)
    pq.write_table(table.slice(0, 4), overwritten)
    report = run_job(job(tmp_path / "in", tmp_path / "out", metrics, part_rows=10))["metrics"]["text_stats"]
    assert (report["parts_written"], report["footers_read"], report["rows_out"]) == (1, 8, 80)
    assert [(item["file"], item["field"]) for item in report["parts_not_reused"]] == [(str(overwritten), "md5")]
    assert _outputs(out) == reference

    # a shard replaced by one of the same name and size (one word split in two)
    size = replaced.stat().st_size
    rows[3]["text"] = rows[3]["text"][:1] + " " + rows[3]["text"][2:]
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(replaced)), replaced, compression="none", use_dictionary=False)
    assert replaced.stat().st_size == size
    report = run_job(job(tmp_path / "in", tmp_path / "out", metrics, part_rows=10))["metrics"]["text_stats"]
    assert (report["rows_scored"], report["rows_cached"]) == (1, 79)
    assert_matches_in_process(build_metric("text_stats"), replaced, out, "part-00002.parquet")
    reference = _outputs(out)

    # no manifest: every part's footer is read, with the same plan and the same output
    (tmp_path / "out" / "manifest.json").unlink()
    report = run_job(job(tmp_path / "in", tmp_path / "out", metrics, part_rows=10))["metrics"]["text_stats"]
    assert (report["rows_scored"], report["footers_read"], report["parts_kept"]) == (0, 8, 8)
    assert _outputs(out) == reference

"""`ctgscore.load_scores`: stored scores back as one wide table by id (round trips through
`ctgscore score`, the job's folder-per-metric layout with a manifest, and S3)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ctgscore
from ctgscore.testing.cli import run_cli_in_process
from scoring.errors import InputError
from scoring.schema import output_table

IDS = ["r0", "r1", "r2", "r3", "r4"]
TEXTS = ["a b c", "a a", "", "one two three four", "x"]


def _input(tmp_path):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": IDS, "text": TEXTS, "system": ["A", "A", "B", "B", "B"],
                             "doc_id": ["d0", "d1", "d0", "d1", "d2"], "human_q": [1.0, 2.0, 3.0, 4.0, 5.0]}), path)
    return path


def _hand_run(ids, values, errors, column="m_value"):
    """A metric run's output written by hand through the schema module (like any writer)."""
    results = [{column: v, "error": e, "warning": None} for v, e in zip(values, errors)]
    return output_table(ids, results, [column], "metric:hand|v:1", [f"k{i}" for i in ids],
                        {"system": ["A", "A", "B", "B", "B"][: len(ids)]})


def test_round_trip_through_score_and_job_layout(tmp_path):
    rows = _input(tmp_path)
    out = tmp_path / "out"
    (out / "text_stats").mkdir(parents=True)
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", rows, "-o", out / "text_stats" / "part-0.parquet",
                    "--no-progress", "--max-error-rate", "1"])
    assert proc.returncode == 0, proc.stderr
    (out / "hand" / "shard-a").mkdir(parents=True)  # parts may sit in sub-folders
    pq.write_table(_hand_run(IDS[:3], [0.5, 1.5, None], [None, None, "bad row"]), out / "hand" / "shard-a" / "p0.parquet")
    pq.write_table(_hand_run(IDS[3:], [3.5, 4.5], [None, None]), out / "hand" / "p1.parquet")
    (out / "manifest.json").write_text(json.dumps({"metrics": {"text_stats": {}, "hand": {}}}))

    frame = ctgscore.load_scores(str(out))
    assert list(frame["id"]) == IDS
    assert list(frame.columns) == ["id", "system", "doc_id", "human_q", "text_stats_words", "text_stats_dist1",
                                   "text_stats_dist2", "text_stats_dist3", "m_value", "error", "skipped"]
    assert list(frame["human_q"]) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert list(frame["system"]) == ["A", "A", "B", "B", "B"]
    words = [float(len(t.split())) if t.strip() else math.nan for t in TEXTS]
    assert frame["text_stats_words"].tolist()[:2] == words[:2] and frame["text_stats_words"].tolist()[3:] == words[3:]
    assert math.isnan(frame.loc[2, "text_stats_words"])  # the empty text could not be scored
    assert frame.loc[2, "error"].startswith("text_stats: ") and "hand: bad row" in frame.loc[2, "error"]
    assert frame["error"].isna().tolist() == [True, True, False, True, True]
    assert frame["m_value"].tolist()[:2] == [0.5, 1.5] and frame["m_value"].tolist()[3:] == [3.5, 4.5]

    only = ctgscore.load_scores(str(out), metrics=["hand"])
    assert "text_stats_words" not in only and list(only["m_value"].fillna(-1)) == [0.5, 1.5, -1, 3.5, 4.5]
    # the manifest's runs are read; a stray folder it does not list is not
    (out / "stray").mkdir()
    pq.write_table(_hand_run(IDS, [9.0] * 5, [None] * 5, column="stray"), out / "stray" / "x.parquet")
    assert "stray" not in ctgscore.load_scores(str(out)).columns
    # each metric folder is a plain dataset for pandas too
    assert len(pd.read_parquet(out / "text_stats")) == 5


def test_without_manifest_every_subfolder_is_a_run_and_clashing_columns_get_labels(tmp_path):
    out = tmp_path / "out"
    for label, values in (("ppl_small", [1.0, 2.0]), ("ppl_big", [3.0, 4.0])):
        (out / label).mkdir(parents=True)
        pq.write_table(_hand_run(IDS[:2], values, [None, None], column="perplexity"), out / label / "0.parquet")
    frame = ctgscore.load_scores(str(out))
    assert frame[["ppl_big.perplexity", "ppl_small.perplexity"]].values.tolist() == [[3.0, 1.0], [4.0, 2.0]]


def test_single_file_and_errors(tmp_path):
    path = tmp_path / "scores.parquet"
    pq.write_table(_hand_run(IDS[:2], [1.0, 2.0], [None, None]), path)
    assert ctgscore.load_scores(str(path))["m_value"].tolist() == [1.0, 2.0]
    with pytest.raises(InputError, match="absent"):
        ctgscore.load_scores(str(tmp_path / "absent"))
    with pytest.raises(InputError, match="no metric run 'nope'"):
        ctgscore.load_scores(str(path), metrics=["nope"])
    dup = tmp_path / "dup"
    dup.mkdir()
    pq.write_table(_hand_run(IDS[:2], [1.0, 2.0], [None, None]), dup / "a.parquet")
    pq.write_table(_hand_run(IDS[:1], [1.0], [None]), dup / "b.parquet")
    with pytest.raises(InputError, match="'r0' appears twice"):
        ctgscore.load_scores(str(dup))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_reads_s3_prefix(moto, s3_bucket, tmp_path, monkeypatch):
    import s3fs

    from tests.job_support import moto_session

    options = moto_session(moto, monkeypatch)
    fs = s3fs.S3FileSystem(**options)
    local = tmp_path / "m.parquet"
    pq.write_table(_hand_run(IDS[:3], [1.0, 2.0, 3.0], [None, "oops", None]), local)
    fs.put(str(local), f"{s3_bucket}/run/hand/part-0.parquet")
    fs.pipe(f"{s3_bucket}/run/manifest.json", json.dumps({"metrics": {"hand": {}}}).encode())
    frame = ctgscore.load_scores(f"s3://{s3_bucket}/run", storage_options=options)
    assert frame["id"].tolist() == IDS[:3]
    assert frame["m_value"].fillna(-1).tolist() == [1.0, -1, 3.0]
    assert frame["error"].tolist() == [None, "hand: oops", None]


def test_manifest_outputs_select_current_shards_only(tmp_path):
    """A job manifest names the shard folders of its current input; a folder whose input shard
    is gone (kept because nobody asked to prune it) is not read, and the output may have moved."""
    written_to = "/somewhere/else/out"  # where the job wrote; the folder was copied here since
    out = tmp_path / "copied"
    for shard, ids, values in (("shard-0", IDS[:2], [1.0, 2.0]), ("dump/shard-1", IDS[2:4], [3.0, 4.0]),
                               ("old-shard", IDS[:2], [9.0, 9.0])):
        folder = out / "hand" / shard
        folder.mkdir(parents=True)
        pq.write_table(_hand_run(ids, values, [None] * len(ids)), folder / "part-0000000000-0000000002-abc.parquet")
    manifest = {"config": {"output": written_to}, "metrics": {"hand": {
        "outputs": [{"folder": f"{written_to}/hand/shard-0"}, {"folder": f"{written_to}/hand/dump/shard-1"}],
        "orphaned_outputs": [f"{written_to}/hand/old-shard"]}}}
    (out / "manifest.json").write_text(json.dumps(manifest))
    frame = ctgscore.load_scores(str(out))
    assert frame["id"].tolist() == IDS[:4] and frame["m_value"].tolist() == [1.0, 2.0, 3.0, 4.0]

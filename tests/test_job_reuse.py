"""Reuse by content on a local output (`ray_jobs.job.plan`, `ray_jobs.job.reuse_cache`): two
different shards of the same byte size renamed together, then replaced by two others of that
size. (The same over S3, where a copy changes the ETag: tests/test_job_s3.py.)"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tests.job_support import equal_size_bytes, shard_rows, turned_table

SCORES = ("text_stats", "bleu")


def _config(folder, out):
    from ray_jobs.config import parse_config

    return parse_config({"input": str(folder), "output": str(out), "progress": False, "part_rows": 8,
                         "metrics": [{"name": "text_stats"}, {"name": "bleu"}],
                         "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_equal_size_shards_renamed_or_replaced_reuse_only_their_own_rows(ray_local, sample_corpus, tmp_path, monkeypatch):
    """Renamed (same bytes, so the same version): each new shard copies its own folder's parts,
    0 rows scored. Replaced by two shards of the same size and rows but other content: the
    renamed folders are lent as their row cache (`SameSizeFolders`), no row matches, every row
    is scored, and the scores are those of a run from scratch: none lost, none wrongly reused."""
    from ray_jobs.job.reuse_cache import SameSizeFolders
    from ray_jobs.score_corpus import run_job

    lent: dict[str, list[str]] = {}
    apply = SameSizeFolders.apply

    def spy(self, shard_plan):
        apply(self, shard_plan)
        if shard_plan.reused_from:
            lent[f"{self.plan.metric.label}/{shard_plan.shard.rel}"] = list(shard_plan.reused_from)

    monkeypatch.setattr(SameSizeFolders, "apply", spy)

    base = pq.read_table(sample_corpus / "summeval-00000.parquet").slice(0, 12)
    mirrored = turned_table(base, lambda s: s[::-1])

    def rotate(s):
        return s[1:] + s[:1]

    data = {"a": equal_size_bytes(base), "b": equal_size_bytes(mirrored),
            "c": equal_size_bytes(turned_table(base, rotate)), "d": equal_size_bytes(turned_table(mirrored, rotate))}
    assert len({len(d) for d in data.values()}) == 1 and len(set(data.values())) == 4
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    for shard in "ab":
        (folder / f"old-{shard}.parquet").write_bytes(data[shard])
    first = run_job(_config(folder, out))
    assert all(first["metrics"][label]["rows_scored"] == 24 for label in SCORES)
    before = {(label, shard): shard_rows(out / label, f"old-{shard}.parquet") for label in SCORES for shard in "ab"}
    for shard in "ab":
        (folder / f"old-{shard}.parquet").rename(folder / f"new-{shard}.parquet")
    again = run_job(_config(folder, out))
    for label in SCORES:
        report = again["metrics"][label]
        assert (report["rows_scored"], report["rows_cached"], report["rows_out"]) == (0, 24, 24), (label, report)
        assert report["reused_by_content"] == {f"new-{shard}.parquet": [str(out / label / f"old-{shard}")] for shard in "ab"}
        for shard in "ab":
            assert shard_rows(out / label, f"new-{shard}.parquet") == before[(label, shard)]
    for shard in "ab":
        (folder / f"new-{shard}.parquet").unlink()
        (folder / f"other-{'c' if shard == 'a' else 'd'}.parquet").write_bytes(data["c" if shard == "a" else "d"])
    assert lent == {}  # renamed: the same bytes, their own folders copied
    third = run_job(_config(folder, out))
    assert lent == {f"{label}/other-{shard}.parquet": [str(out / label / "new-a"), str(out / label / "new-b")]
                    for label in SCORES for shard in "cd"}  # names alike in nothing: listing order
    scratch = tmp_path / "scratch"
    fresh = run_job(_config(folder, scratch))
    for label in SCORES:
        report = third["metrics"][label]
        assert (report["rows_scored"], report["rows_cached"], report["rows_out"]) == (24, 0, 24), (label, report)
        assert "reused_by_content" not in report and fresh["metrics"][label]["rows_scored"] == 24
        for shard in "cd":
            assert shard_rows(out / label, f"other-{shard}.parquet") == shard_rows(scratch / label, f"other-{shard}.parquet")

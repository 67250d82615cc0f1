"""The per-metric report (`ray_jobs.job.report.metric_report`) on a synthetic plan: which
folders a renamed shard's rows came from (`reused_by_content`), read from the workers' reports
in one pass, however many shards were renamed."""

from __future__ import annotations

import types

from ray_jobs.job.plan import MetricPlan, Shard, ShardPlan
from ray_jobs.job.report import metric_report
from ray_jobs.storage.listing import ShardInfo

OUT = "s3://bucket/out"


class _Report(dict):
    """A worker's report that counts how often its shard is looked up."""

    lookups = 0

    def __getitem__(self, key):
        if key == "rel":
            _Report.lookups += 1
        return super().__getitem__(key)


def _renamed(n: int):
    """`n` renamed shards of 10 rows, each lent two old folders as its row cache; shard i's
    report says its rows came from its own old folder (and shard 0's also from one no plan
    named, listed after the planned ones)."""
    metric = types.SimpleNamespace(label="ppl", spec=types.SimpleNamespace(name="perplexity"), params={},
                                   signature="sig", digest="d", described_on=None)
    plan = MetricPlan(metric=metric)
    covers, reports = [], []
    for i in range(n):
        rel = f"new-{i:05d}.parquet"
        shard_plan = ShardPlan(shard=Shard(ShardInfo(uri=f"s3://bucket/in/{rel}", rel=rel, size=10, etag="e"), 10, {}, "v"))
        shard_plan.units = [(0, 10)]
        shard_plan.reused_from = [f"{OUT}/ppl/other-{i:05d}", f"{OUT}/ppl/old-{i:05d}"]
        plan.shards[rel] = shard_plan
        covers.append(types.SimpleNamespace(rel=rel, uri=shard_plan.shard.info.uri, parts=[1], num_rows=10))
        lent = {f"{OUT}/ppl/old-{i:05d}": 10, f"{OUT}/ppl/other-{i:05d}": 0}
        if i == 0:
            lent[f"{OUT}/ppl/elsewhere"] = 1
        reports.append(_Report(rel=rel, rows=10, cached=10, reasons={}, samples=[], lent=lent))
    committed = types.SimpleNamespace(covers=covers, replaced=0, kept_for_bad_shards=[], orphaned=[], pruned=[])
    verified = types.SimpleNamespace(rows_out=10 * n, rows_error=0, parts=n)
    return plan, committed, verified, reports


def test_lenders_of_many_renamed_shards_are_read_in_one_pass():
    n = 300
    plan, committed, verified, reports = _renamed(n)
    _Report.lookups = 0
    report = metric_report(OUT, plan, committed, verified, reports,
                           {"started": 0.0, "ended": 1.0, "first_at": None, "rows_after_first": 0}, 0.0)
    lenders = report["reused_by_content"]
    assert len(lenders) == n and report["rows_cached"] == 10 * n
    assert lenders["new-00000.parquet"] == [f"{OUT}/ppl/old-00000", f"{OUT}/ppl/elsewhere"]  # planned first
    assert lenders[f"new-{n - 1:05d}.parquet"] == [f"{OUT}/ppl/old-{n - 1:05d}"]  # a folder that gave 0 rows: not named
    # each report's shard is looked up a few times, not once per renamed shard (n * n = 90000)
    assert _Report.lookups <= 5 * n, _Report.lookups


def test_the_json_summary_names_the_inputs_not_read_as_the_summary_line_does():
    from ray_jobs.entrypoint import run_summary
    from ray_jobs.job.manifest import summary_line

    manifest = {"metrics": {}, "bad_shards": [], "input": {"files": []}, "wall_s": 1.0, "manifest": "/out/manifest.json",
                "inputs_not_read": ["/in/a.PARQUET", "/in/_b.parquet"]}
    assert "2 file(s) named like Parquet not read" in summary_line(manifest)
    assert run_summary(manifest, "/out", [])["inputs_not_read"] == ["/in/a.PARQUET", "/in/_b.parquet"]
    assert run_summary({"metrics": {}}, "/out", [])["inputs_not_read"] == []


def test_the_summary_line_counts_one_shard_as_one():
    from ray_jobs.job.manifest import summary_line

    def line(files):
        return summary_line({"metrics": {}, "bad_shards": [], "input": {"files": files}, "wall_s": 1.0, "manifest": "m"})

    assert line(["a.parquet"]).startswith("ctgscore run: 1 shard;")  # was "1 shards"
    assert line(["a.parquet", "b.parquet"]).startswith("ctgscore run: 2 shards;")
    assert line([]).startswith("ctgscore run: 0 shards;")

"""A metric that applies to no row of a run fails it (exit 2, one line naming the metric, the
column it needed and the closest column present), `score` prints each score's mean, and a
renamed input reuses its scores by content (0 rows scored; the old folder is named)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from ctgscore.testing.cli import assert_user_error


def _dump(sample_corpus, path, rows=12, rename=None):
    table = pq.read_table(sample_corpus / "summeval-00000.parquet").slice(0, rows)
    if rename:
        table = table.rename_columns([rename.get(name, name) for name in table.column_names])
    pq.write_table(table, path)
    return path


def test_a_job_whose_only_metric_needs_an_absent_column_exits_2_naming_it(cli, sample_corpus, tiny_models, tmp_path):
    """`refs` for `references`: `run` refuses before any work (no Ray, no output), and `score`
    alike, each with one line naming the metric, the column and its closest match."""
    folder = tmp_path / "in"
    folder.mkdir()
    _dump(sample_corpus, folder / "a.parquet", rename={"references": "refs"})
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"input": str(folder), "output": str(tmp_path / "out"), "metrics": [{"name": "bleu"}]}))
    line = assert_user_error(cli(["run", str(config), "--no-progress"]), 2, "metric bleu applies to no row", "'references'",
                             "closest present: 'refs'")
    assert "absent from every input shard" in line
    assert not (tmp_path / "out" / "bleu").exists()
    assert_user_error(cli(["score", "-m", "bleu", "-i", str(folder / "a.parquet"), "-o", str(tmp_path / "o.parquet")]), 2,
                      "metric bleu applies to no row", "'references'", "closest present: 'refs'")
    # per direction: each missing column is named with the directions that need it
    renamed = _dump(sample_corpus, tmp_path / "b.parquet", rename={"source": "src", "references": "refs"})
    assert_user_error(cli(["score", "-m", "bartscore", "--param", "directions=[s_h,r_h]", "--param", f"model={tiny_models['bart']}",
                           "-i", str(renamed), "-o", str(tmp_path / "o.parquet")]), 2,
                      "column 'source' (for s_h) (absent from", "closest present: 'src'", "column 'references' (for r_h)")


def test_score_fails_when_the_columns_are_null_in_every_row_and_prints_means(cli, sample_corpus, tmp_path):
    nulls = tmp_path / "nulls.parquet"
    table = pq.read_table(_dump(sample_corpus, tmp_path / "a.parquet"))
    table = table.set_column(table.schema.get_field_index("references"), "references",
                             pa.nulls(table.num_rows, type=table.schema.field("references").type))
    pq.write_table(table, nulls)
    assert_user_error(cli(["score", "-m", "bleu", "-i", str(nulls), "-o", str(tmp_path / "o.parquet")]), 2,
                      "metric bleu applies to no row", "all 12 rows were skipped", "no references")
    # a minority of rows without references: the run succeeds and says how many it skipped and why
    mixed = table.set_column(table.schema.get_field_index("references"), "references",
                             pa.array([["a reference ."]] * 9 + [None] * 3, type=table.schema.field("references").type))
    pq.write_table(mixed, tmp_path / "mixed.parquet")
    proc = cli(["score", "-m", "bleu", "-i", str(tmp_path / "mixed.parquet"), "-o", str(tmp_path / "o.parquet")])
    assert proc.returncode == 0, proc.stderr
    out = pq.read_table(tmp_path / "o.parquet")
    mean = pc.mean(out.column("bleu")).as_py()
    assert "3 skipped" in proc.stdout and "3 x no references" in proc.stdout
    assert f"mean bleu {mean:.4f} (9 rows)" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_renaming_an_input_reuses_its_scores_by_content(ray_local, sample_corpus, tmp_path):
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job, summary_line
    from tests.job_support import shard_rows

    folder = tmp_path / "in"
    folder.mkdir()
    _dump(sample_corpus, folder / "old.parquet", rows=20)

    def config(**extra):
        return parse_config({"input": str(folder), "output": str(tmp_path / "out"), "progress": False,
                             "metrics": [{"name": "text_stats"}, {"name": "bleu"}], **extra,
                             "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}})

    first = run_job(config())
    assert first["metrics"]["text_stats"]["rows_scored"] == 20
    (folder / "old.parquet").rename(folder / "new.parquet")
    again = run_job(config())
    for label in ("text_stats", "bleu"):
        report = again["metrics"][label]
        assert (report["rows_scored"], report["rows_cached"], report["rows_out"]) == (0, 20, 20)
        assert report["reused_by_content"] == {"new.parquet": [str(tmp_path / "out" / label / "old")]}
        assert report["orphaned_outputs"] == [str(tmp_path / "out" / label / "old")]
        assert shard_rows(tmp_path / "out" / label, "new.parquet") == shard_rows(tmp_path / "out" / label, "old.parquet")
    line = summary_line(again)
    assert "0 scored, 20 reused" in line and "reused the scores of the same content" in line
    assert str(tmp_path / "out" / "text_stats" / "old") in line and "--prune" in line
    pruned = run_job(config(prune=True))
    report = pruned["metrics"]["text_stats"]
    assert report["rows_scored"] == 0 and report["orphaned_outputs"] == [] and len(report["pruned_outputs"]) == 1
    assert not list((tmp_path / "out" / "text_stats" / "old").glob("*.parquet"))
    # a copy of a present input: its scores come from the original's folder, nothing is orphaned
    (folder / "copy.parquet").write_bytes((folder / "new.parquet").read_bytes())
    copied = run_job(config())["metrics"]["bleu"]
    assert (copied["rows_scored"], copied["rows_cached"], copied["rows_out"]) == (0, 40, 40)
    assert copied["reused_by_content"] == {"copy.parquet": [str(tmp_path / "out" / "bleu" / "new")]}
    assert copied["orphaned_outputs"] == []
    assert len(shard_rows(tmp_path / "out" / "text_stats", "new.parquet")) == 20


def test_metrics_lists_the_columns_of_each_direction_and_aspect(cli):
    proc = cli(["metrics", "bartscore", "ctrleval"])
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert ["s_h", "text,", "source"] in lines and ["h_r", "text,", "references"] in lines
    assert ["coherence", "text"] in lines and ["relevance", "text,", "attribute"] in lines
    assert "reads: text, source, references" in proc.stdout  # no longer `text` alone

"""A scores folder holds files nobody named one by one: a `manifest.json` that is a symlink to
`/dev/zero`, or a named pipe called `part-0.parquet`, used to make `load_scores`, `meta` and
`compare` wait for ever (a pipe blocks its reader until a writer comes; `/dev/zero` never
ends). Each is now refused by name before it is opened (`scoring.job_output`)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ctgscore
from scoring.errors import InputError

pytestmark = [pytest.mark.timeout(60), pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")]


@pytest.fixture
def scores(tmp_path):
    folder = tmp_path / "out" / "ppl"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a", "b"], "system": ["s", "t"], "perplexity": [3.0, 4.0]}),
                   folder / "part-00000.parquet")
    return tmp_path / "out"


def _special(path, kind):
    if kind == "pipe":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)


@pytest.mark.parametrize("kind", ["pipe", "device"])
@pytest.mark.parametrize("where", ["manifest.json", "ppl/part-00001.parquet"])
def test_a_special_file_in_a_scores_folder_is_refused_by_name(scores, kind, where):
    assert len(ctgscore.load_scores(str(scores))) == 2  # the folder as it was reads
    _special(scores / where, kind)
    with pytest.raises(InputError, match=rf"{where.split('/')[-1]}: a {'named pipe' if kind == 'pipe' else 'device'}"):
        ctgscore.load_scores(str(scores))


def test_a_named_pipe_given_as_the_scores_file_is_refused(tmp_path):
    pipe = tmp_path / "scores.parquet"
    os.mkfifo(pipe)
    with pytest.raises(InputError, match="scores.parquet: a named pipe, not a regular file"):
        ctgscore.load_scores(str(pipe))


def test_meta_names_the_pipe_and_exits_1(scores, tmp_path, cli):
    os.mkfifo(scores / "ppl" / "part-00001.parquet")
    result = cli(["meta", "-s", str(scores), "-o", str(tmp_path / "report")])
    assert result.returncode == 1, result.stderr
    assert "part-00001.parquet: a named pipe" in result.stderr


def test_a_symlinked_regular_file_and_a_symlink_loop_still_read(scores, tmp_path):
    elsewhere = tmp_path / "kept.parquet"
    pq.write_table(pa.table({"id": ["c"], "system": ["s"], "perplexity": [5.0]}), elsewhere)
    os.symlink(elsewhere, scores / "ppl" / "part-00001.parquet")
    os.symlink("..", scores / "ppl" / "loop")
    assert sorted(ctgscore.load_scores(str(scores))["id"]) == ["a", "b", "c"]


@pytest.mark.parametrize("kind", ["pipe", "device"])
def test_a_checklist_csv_that_is_a_pipe_or_a_device_is_refused(tmp_path, cli, kind):
    """A checklist is recognised by its file name, so a symlink `ctrl_topic.csv -> /dev/zero`
    in a pull request was read until memory ran out, and a pipe waited for ever."""
    checklist = tmp_path / "ctrl_topic.csv"
    _special(checklist, kind)
    result = cli(["meta", "-s", str(checklist), "-o", str(tmp_path / "report")])
    assert result.returncode == 1, result.stderr
    assert f"ctrl_topic.csv: a {'named pipe' if kind == 'pipe' else 'device'}, not a regular file" in result.stderr


def test_score_refuses_a_named_pipe_among_its_input_shards(tmp_path, cli):
    """`ctgscore score -i FOLDER` opened every `*.parquet` under it: a FIFO there waited for ever."""
    shards = tmp_path / "in"
    shards.mkdir()
    pq.write_table(pa.table({"id": ["a"], "text": ["one two"]}), shards / "a.parquet")
    os.mkfifo(shards / "b.parquet")
    result = cli(["score", "-i", str(shards), "-o", str(tmp_path / "scores.parquet"), "--metric", "text_stats"])
    assert result.returncode == 1, result.stderr
    assert "b.parquet: a named pipe, not a regular file" in result.stderr

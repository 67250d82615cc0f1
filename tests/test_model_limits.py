"""What the CPU stage settles (docs/gpu.md): a row with a token id past the model's embedding,
or longer than its position table, is that row's error naming the id (length) and the size,
before any forward; a `max_length` past the position table is refused before any work."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli
from scoring.errors import UsageError
from scoring.metric import RowError
from scoring.model_limits import ModelLimits, raise_row_error

EXTRA = "<extra_oov>"


def test_problems_name_the_id_the_length_and_the_limit():
    limits = ModelLimits("m", vocabulary=10, positions=4)
    values = np.array([1, 2, 3, 9, 10, 0, 1, 2, 3, 4, 5, -1])
    offsets = np.array([0, 3, 5, 10, 12])  # [1 2 3] [9 10] [0 1 2 3 4] [5 -1]
    found = limits.problems(values, offsets)
    assert sorted(found) == [1, 2, 3]
    assert "token id 10" in found[1] and "10 embedding rows" in found[1]
    assert "5 tokens" in found[2] and "4 positions" in found[2]
    assert "token id -1" in found[3]
    with pytest.raises(RowError) as caught:
        raise_row_error(limits, values, offsets, np.array([7, 7, 8, 9]), "target")
    assert caught.value.row_index == 7 and caught.value.reason.startswith("target: token id 10")
    with pytest.raises(UsageError, match="max_length 5 is past the position table of m .4 positions"):
        limits.check_max_length(5)
    limits.check_max_length(4)


def test_limits_come_from_the_config_without_weights(tiny_models):
    from transformers import AutoConfig

    bart = ModelLimits.from_config(AutoConfig.from_pretrained(tiny_models["bart"]))
    roberta = ModelLimits.from_config(AutoConfig.for_model("roberta", max_position_embeddings=514, pad_token_id=1))
    gpt2 = AutoConfig.from_pretrained(tiny_models["gpt2"])
    assert (bart.vocabulary, bart.positions) == (AutoConfig.from_pretrained(tiny_models["bart"]).vocab_size, 1024)
    assert roberta.positions == 512  # a 514-row table whose positions start after the padding index
    assert ModelLimits.from_config(gpt2).positions == gpt2.n_positions


@pytest.fixture(scope="module")
def bart_with_an_extra_id(tiny_models, tmp_path_factory):
    """The tiny BART whose tokenizer holds one id more than its embedding has rows (as
    bart-large-cnn ships: `<mask>` is id 50,264 on a 50,264-row embedding)."""
    from transformers import AutoConfig, AutoTokenizer

    folder = tmp_path_factory.mktemp("bart_extra") / "bart"
    shutil.copytree(tiny_models["bart"], folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_special_tokens({"additional_special_tokens": [EXTRA]})
    tokenizer.save_pretrained(folder)
    rows = AutoConfig.from_pretrained(folder).vocab_size
    assert tokenizer.convert_tokens_to_ids(EXTRA) == rows == len(tokenizer) - 1
    return str(folder), rows


@pytest.fixture(scope="module")
def bart_with_512_positions(tiny_models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bart512") / "bart"
    shutil.copytree(tiny_models["bart"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 512
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _rows(n=6):
    return [{"id": str(i), "text": f"The council met on day {i} and approved the budget.",
             "source": f"On day {i} the council approved the new budget after a debate."} for i in range(n)]


def test_an_id_past_the_embedding_is_one_row_error_in_the_library(bart_with_an_extra_id):
    from scoring.bartscore import BARTScoreMetric, BARTScorer

    folder, rows = bart_with_an_extra_id
    metric = BARTScoreMetric(model=folder, directions=["s_h"])
    data = _rows()
    data[2]["text"] = f"The council {EXTRA} approved it."
    results = metric.score_rows(data)
    assert results[2]["error"] == f"s_h target: token id {rows} is outside the vocabulary of bart ({rows} embedding rows)"
    assert all(r["error"] is None and r["bartscore_s_h"] < 0 for i, r in enumerate(results) if i != 2)
    table, reasons = metric.prepare_rows(data)  # the job's CPU stage: the row is left out
    assert table.num_rows == len(data) - 1 and reasons[2].startswith("s_h target: token id")
    with pytest.raises(ValueError, match=f"target 0: token id {rows} is outside"):
        BARTScorer(folder).score(["a source"], [f"a {EXTRA} target"])


def test_a_row_longer_than_the_position_table_is_its_error(tiny_models):
    """Rows are cut to `max_length`, which may not pass the table, so a longer row reaches the
    check only from ids prepared for another configuration: still a row error, no forward."""
    from scoring.bartscore import BARTScoreMetric

    metric = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"])
    data = _rows(3)
    data[1]["source"] = " ".join(["word"] * 40)
    metric.scorer.limits = ModelLimits("bart", metric.scorer.limits.vocabulary, 30)
    results = metric.score_rows(data)
    assert results[1]["error"].startswith("s_h source: ") and "longer than the position table of bart (30 positions)" in results[1]["error"]
    assert results[0]["error"] is None and results[2]["error"] is None


def test_max_length_past_the_position_table_is_refused_before_the_weights(bart_with_512_positions, tiny_models):
    from scoring.bartscore import BARTScoreMetric
    from scoring.perplexity import PerplexityMetric

    # the weights have 1,024 positions: loading them would fail, so the refusal comes first
    with pytest.raises(UsageError, match="max_length 1024 is past the position table of bart .512 positions"):
        BARTScoreMetric(model=bart_with_512_positions, max_length=1024)
    with pytest.raises(UsageError, match="max_length"):
        PerplexityMetric(model=tiny_models["gpt2"], max_length=100_000)


def test_cli_refuses_max_length_and_scores_around_the_bad_row(bart_with_512_positions, bart_with_an_extra_id, tmp_path):
    data = _rows(4)
    data[3]["text"] = f"{EXTRA} closes the text"
    source = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(data), source)
    proc = run_cli(["score", "-m", "bartscore", "--param", f"model={bart_with_512_positions}", "--param", "directions=s_h",
                    "--param", "max_length=1024", "-i", source, "-o", tmp_path / "refused.parquet"])
    assert_user_error(proc, 2, "max_length 1024", "512 positions")
    assert not (tmp_path / "refused.parquet").exists()

    folder, rows = bart_with_an_extra_id
    proc = run_cli(["score", "-m", "bartscore", "--param", f"model={folder}", "--param", "directions=s_h",
                    "-i", source, "-o", tmp_path / "out.parquet"])
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [r["id"] for r in out] == [r["id"] for r in data], proc.stderr
    assert f"token id {rows}" in out[3]["error"] and f"({rows} embedding rows)" in out[3]["error"]
    assert all(r["error"] is None and r["bartscore_s_h"] is not None for r in out[:3])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ray_job_scores_around_the_bad_row_and_refuses_max_length(ray_local, bart_with_an_extra_id, bart_with_512_positions, tmp_path):
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job
    from tests.job_support import shard_rows

    folder, rows = bart_with_an_extra_id
    data = _rows(6)
    data[4]["source"] = f"A source holding {EXTRA} in the middle."
    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pylist(data), tmp_path / "in" / "rows.parquet")

    def job(model, out, **extra):
        return parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / out), "part_rows": 4, "progress": False,
                             "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
                             "metrics": [{"name": "bartscore", "params": {"model": model, "directions": ["s_h"], **extra}}]})

    report = run_job(job(folder, "out"))["metrics"]["bartscore"]
    assert report["rows_out"] == 6 and report["rows_error"] == 1 and report.get("rows_retry", 0) == 0
    out = shard_rows(tmp_path / "out" / "bartscore", "rows.parquet")
    assert out[4]["error"] == f"s_h source: token id {rows} is outside the vocabulary of bart ({rows} embedding rows)"
    assert all(r["error"] is None and r["bartscore_s_h"] < 0 for i, r in enumerate(out) if i != 4)
    with pytest.raises(UsageError, match="max_length 1024 is past the position table of bart .512 positions"):
        run_job(job(bart_with_512_positions, "refused", max_length=1024))

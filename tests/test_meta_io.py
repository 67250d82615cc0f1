"""Reading score Parquet shards from a folder and from an s3:// prefix (moto server on loopback)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from meta_eval.io import read_scores


def _shards():
    ids = [f"r{i}" for i in range(12)]
    first = pd.DataFrame({"id": ids[:6], "m": np.arange(6.0), "error": [None] * 5 + ["boom"],
                          "signature": "metric:m|v:1", "doc_id": "d", "system": list("abcabc"),
                          "human_q": np.arange(6.0)})
    second = first.assign(id=ids[6:], error=[None] * 6, m=np.arange(6.0, 12.0))
    return first, second


def test_folder_of_shards_drops_error_rows(tmp_path):
    first, second = _shards()
    first.to_parquet(tmp_path / "a.parquet")
    second.to_parquet(tmp_path / "b.parquet")
    table = read_scores(str(tmp_path))
    assert (table.n_input_rows, table.n_error_rows, len(table.frame)) == (12, 1, 12)
    assert table.metrics == ["m"] and table.humans == ["human_q"]
    row = table.frame.set_index("id").loc["r5"]
    assert np.isnan(row["m"]) and row["human_q"] == 5.0  # error: score excluded, judgment kept
    assert table.frame["m"].notna().sum() == 11


def test_separate_metric_runs_are_joined_on_id(tmp_path):
    first, second = _shards()
    both = pd.concat([first, second])
    both.to_parquet(tmp_path / "run1.parquet")
    both[["id", "signature"]].assign(other=np.arange(12.0) * 2, error=None).to_parquet(tmp_path / "run2.parquet")
    table = read_scores(str(tmp_path))
    assert set(table.metrics) == {"m", "other"}
    assert table.n_error_rows == 1
    frame = table.frame.set_index("id")
    assert np.isnan(frame.loc["r5", "m"]) and frame.loc["r5", "other"] == 10.0  # error of run 1 only
    ok = frame.drop(index="r5")
    assert (ok["other"] == ok["m"] * 2).all()
    assert table.runs["m"]["rows_error"] == 1 and table.runs["other"]["rows_error"] == 0


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_read_scores_from_s3_prefix(moto, s3_bucket, monkeypatch):
    endpoint = moto
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(key, value)
    import s3fs

    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint})
    first, second = _shards()
    for name, frame in (("part-0.parquet", first), ("part-1.parquet", second)):
        with fs.open(f"{s3_bucket}/scores/{name}", "wb") as handle:
            frame.to_parquet(handle)
    table = read_scores(f"s3://{s3_bucket}/scores")
    assert (table.n_input_rows, table.n_error_rows) == (12, 1)
    assert sorted(table.frame["id"]) == sorted(set(first["id"]) | set(second["id"]))
    assert table.frame.set_index("id")["m"].isna().sum() == 1


def test_non_numeric_score_column_names_file_row_and_value(tmp_path):
    first, _ = _shards()
    first["m"] = first["m"].astype(str)
    first.loc[3, "m"] = "n/a"
    first.to_parquet(tmp_path / "a.parquet")
    with pytest.raises(ValueError, match=rf"'m' is not numeric \(row 3 of {re.escape(str(tmp_path / 'a.parquet'))}: 'n/a'\)"):
        read_scores(str(tmp_path), metrics=["m"])


def test_non_numeric_score_column_of_one_run_names_its_own_file_and_row(tmp_path):
    """Runs joined on id (sorted: a, b, m, z) put the bad value of run `rb`'s row 0 (id z) at
    row 3 of the joined frame; the error names rb's file and row 0. Before: "row 3"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = {"id": ["z", "a", "m", "b"], "system": ["s1", "s2", "s1", "s2"], "doc_id": ["d1", "d1", "d2", "d2"],
            "human_q": [1.0, 2.0, 3.0, 4.0]}
    for run, column in (("ra", {"perplexity": [1.0, 2.0, 3.0, 4.0]}), ("rb", {"mine": ["x" * 500, "2", "1", "3"]})):
        (tmp_path / run).mkdir()
        pq.write_table(pa.table({**keys, **column}), tmp_path / run / "p.parquet")
    with pytest.raises(ValueError, match="not numeric") as error:
        read_scores(str(tmp_path), metrics=["mine"])
    message = str(error.value)
    assert f"column 'mine' is not numeric (row 0 of {tmp_path / 'rb' / 'p.parquet'}: 'xxx" in message
    assert len(message) < 400  # the value quoted, cut


def test_perplexity_variants_are_lower_is_better_and_input_columns_are_not_scores(tmp_path):
    first, _ = _shards()
    first = first.assign(perplexity_gpt2=1.0, text="some text", prefix="some")
    first.to_parquet(tmp_path / "a.parquet")
    table = read_scores(str(tmp_path))
    assert "perplexity_gpt2" in table.lower_is_better and "m" not in table.lower_is_better
    assert "text" not in table.metrics and "prefix" not in table.metrics


def test_check_columns_names_a_missing_column_with_the_visible_ones_and_a_text_value_by_its_row():
    """`_check_columns` without `files`: a missing column is named beside at most 50 of the
    columns a message may list (internal `_` columns left out) and marked `missing_column`; a
    column that is no number is named with its first text value and that value's row."""
    from meta_eval.io import _check_columns
    from scoring.errors import InputError

    frame = pd.DataFrame({"id": ["a", "b"], "_bleu_stat_0": [1, 2], "m": [1.0, 2.0], "t": [0.5, "x"],
                          **{f"c{k:02d}": [0.0, 0.0] for k in range(49)}})
    with pytest.raises(InputError) as caught:
        _check_columns(frame, ["m", "nope"], "src.parquet")
    shown = ", ".join(["'id'", "'m'", "'t'"] + [f"'c{k:02d}'" for k in range(47)])
    assert str(caught.value) == f"src.parquet: column 'nope' not found (have: {shown} and 2 more)"
    assert caught.value.missing_column == "nope"
    with pytest.raises(InputError, match=r"^src.parquet: column 't' is not numeric \(row 1: 'x'\)$"):
        _check_columns(frame, ["m", "t"], "src.parquet")


def test_two_checks_with_one_reason_lose_no_row(tmp_path):
    """A unit column named "no d" and a system column named "d key not valid UTF-8" give two
    checks the same reason ("no d key not valid UTF-8"): their rows are added up, not the
    later count written over the earlier one (4 rows came out as 2 kept and 1 left out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from meta_eval.partials import PartialSpec, file_partial

    def keys(values):
        return pa.array(values, pa.binary()).view(pa.string())

    path = tmp_path / "part.parquet"
    pq.write_table(pa.table({"no d": keys([b"\xff", b"u", b"u", b"u"]),
                             "d key not valid UTF-8": keys([b"x", None, b"y", b"x"]),
                             "score": pa.array([1.0, 2.0, 3.0, 4.0])}), path)
    spec = PartialSpec(runs={"m": (("score", "score"),)}, system="d key not valid UTF-8", unit="no d")
    part = file_partial(spec, "m", str(path))
    assert part.key_rows == {(None, None): 2, (None, "no d key not valid UTF-8"): 2}
    assert sum(part.key_rows.values()) == part.rows == 4

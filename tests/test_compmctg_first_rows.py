"""`ctgscore compmctg` names the first score row it leaves out for a key that is not valid UTF-8
(`id`, `dataset`) by the file that stored it (the part, for a folder of parts) and its row
there, as `meta`, `compare` and `constraints report` name theirs (`ctgscore.scores.
load_scores_placed`, `meta_eval.io.RowFiles`). Before, an `id` was named "some row" of the
scores and a `dataset` by the folder and the row's id."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_keys_not_utf8_more import BAD, compmctg_files

BAD_ROW = 5  # of 16; a folder of parts: row 2 of its second part (rows 3 to 15)


def split_in_parts(scores_file, folder):
    """The scores file as a folder of two parts, rows 0-2 and 3-15."""
    table = pq.read_table(scores_file)
    folder.mkdir()
    pq.write_table(table.slice(0, 3), folder / "part-0.parquet")
    pq.write_table(table.slice(3), folder / "part-1.parquet")
    return folder


@pytest.mark.parametrize("kind", ["string", "binary"])
@pytest.mark.parametrize("column", ["id", "dataset"])
@pytest.mark.parametrize("layout", ["file", "parts"])
def test_compmctg_names_a_key_not_utf8_by_its_file_and_row(tmp_path, cli, kind, column, layout):
    bad = {f"scores:{column}": BAD_ROW, **({"dump:id": BAD_ROW} if column == "id" else {})}
    folder = compmctg_files(tmp_path, "in", bad, kind=kind)
    scores = folder / "scores.parquet"
    where = f"{scores}: column {column!r}, row {BAD_ROW}"
    if layout == "parts":
        scores = split_in_parts(scores, tmp_path / "parts")
        where = f"{scores / 'part-1.parquet'}: column {column!r}, row {BAD_ROW - 3}"
    got = cli(["compmctg", "--dump", folder / "dump.parquet", "--scores", scores, "--splits",
               f"toy={folder / 'split.json'}", "-o", tmp_path / "table.json", "--json"])
    assert got.returncode == 0, got.stderr
    reason = f"{column} key not valid UTF-8"
    summary = json.loads(got.stdout)
    assert summary["rows_left_out"] == {reason: 1} and summary["rows_left_out_first"] == {reason: where}
    table = json.loads((tmp_path / "table.json").read_text())
    assert table["rows"]["rows_left_out_first"] == {reason: where}
    assert f"first {reason}: {where}" in (tmp_path / "table.md").read_text()
    assert "some row" not in got.stdout + (tmp_path / "table.md").read_text()


def test_scored_rows_without_places_names_the_row_of_the_frame_given(tmp_path):
    """A caller that passes a DataFrame of its own (no files known) gets the row in it."""
    import ctgscore
    from meta_eval.compmctg import scored_rows

    folder = compmctg_files(tmp_path, "in", {"scores:id": BAD_ROW, "dump:id": BAD_ROW})
    scores = ctgscore.load_scores(str(folder / "scores.parquet"))
    row = int(np.flatnonzero([isinstance(v, bytes) for v in scores["id"]])[0])
    _, rows = scored_rows(str(folder / "dump.parquet"), scores, source="my frame")
    assert rows.first == {"id key not valid UTF-8": f"my frame: column 'id', row {row}"}


def test_load_scores_placed_finds_an_id_not_utf8_in_its_shard_of_a_job_output(tmp_path):
    """A job's output whose ids repeat across shards (rows keyed by id and shard): the row whose
    id is not UTF-8 is found in its own shard's file, at its row there."""
    from ctgscore.scores import load_scores, load_scores_placed
    from tests.test_job_output_shards import _job_output

    out = _job_output(tmp_path)
    for label in ("ppl", "words"):  # r3, the second row of shard sub/b, becomes bytes that are not UTF-8
        (part,) = (out / label / "sub" / "b").glob("*.parquet")
        table = pq.read_table(part)
        ids = [BAD if value == "r3" else value.encode() for value in table.column("id").to_pylist()]
        pq.write_table(table.set_column(0, "id", pa.array(ids, pa.binary()).view(pa.string())), part)
    frame, places = load_scores_placed(str(out))
    assert frame.equals(load_scores(str(out))) and "shard" in frame
    rows = np.flatnonzero([isinstance(v, bytes) for v in frame["id"]])
    assert rows.tolist() == [len(frame) - 1]  # bytes sort after every text
    where = places.where(frame, "id", rows, str(out))
    assert where.startswith(str(out / "ppl" / "sub" / "b")) and where.endswith(": column 'id', row 1"), where

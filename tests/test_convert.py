"""`ctgscore convert`: JSONL, CSV and line-aligned text round trips to the canonical Parquet,
the column mapping, validation, and the report of what was dropped and why."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore import convert
from ctgscore.testing.cli import run_cli_in_process
from scoring import schema
from scoring.errors import InputError, UsageError

ROWS = [
    {"id": "a1", "dataset": "toy", "system": "s1", "doc_id": "d1", "source": "a source, with a comma",
     "text": "first \"quoted\" hypothesis", "references": ["ref one", "ref two"], "human_overall": 3.5,
     "attributes": {"sentiment": "Positive", "tense": "Past"}},
    {"id": "a2", "dataset": "toy", "system": "s1", "doc_id": "d2", "source": "second source",
     "text": "üñí ✓ multi\nline", "references": ["only ref"], "human_overall": 1.0,
     "attributes": {"sentiment": "Negative", "tense": "Present"}},
]


def _read(path):
    return pq.read_table(path)


def _as_rows(table):
    rows = table.to_pylist()
    for row in rows:
        if row.get("attributes") is not None:
            row["attributes"] = dict(row["attributes"])
    return rows


def test_jsonl_round_trip_with_canonical_types(tmp_path):
    src = tmp_path / "dump.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS), encoding="utf-8")
    out = tmp_path / "dump.parquet"
    proc = run_cli_in_process(["convert", "-i", src, "-o", out, "--json"])
    assert proc.returncode == 0, proc.stderr
    table = _read(out)
    assert _as_rows(table) == [{k: r[k] for k in table.column_names} for r in ROWS]
    assert set(table.column_names) == set(ROWS[0])
    for name in table.column_names:  # every column has its canonical type
        assert schema.expected_input_type(name, table.schema.field(name).type) is None, name
    report = json.loads(proc.stdout)
    assert report["rows_read"] == 2 and report["rows_written"] == 2 and report["dropped"] == {}


def test_csv_round_trip_with_mapping(tmp_path):
    src = tmp_path / "dump.csv"
    with open(src, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["uid", "hyp", "ref1", "ref2", "score", "src", "notes"])
        for row in ROWS:
            refs = row["references"] + [""] * (2 - len(row["references"]))
            writer.writerow([row["id"], row["text"], *refs, row["human_overall"], row["source"], "free text"])
    out = tmp_path / "dump.parquet"
    proc = run_cli_in_process(["convert", "-i", src, "-o", out, "--map", "id=uid", "--map", "text=hyp",
                    "--map", "references=ref1,ref2", "--map", "human_overall=score", "--map", "source=src",
                    "--dataset", "toy", "--system", "s1"])
    assert proc.returncode == 0, proc.stderr
    rows = _as_rows(_read(out))
    keys = ("id", "text", "references", "human_overall", "source", "dataset", "system")
    assert rows == [{k: r[k] for k in keys} for r in ROWS]
    assert "notes" in proc.stdout  # the unmapped field is reported as left out


def test_aligned_text_files_like_bert_score(tmp_path):
    cands, refs1, refs2, srcs = (tmp_path / n for n in ("c.txt", "r1.txt", "r2.txt", "s.txt"))
    cands.write_text("the cat sat\na dog ran\n")
    refs1.write_text("a cat sat\nthe dog runs\n")
    refs2.write_text("the cat was sitting\na dog was running\n")
    srcs.write_text("source 0\nsource 1\n")
    out = tmp_path / "aligned.parquet"
    proc = run_cli_in_process(["convert", "-c", cands, "-r", refs1, "-r", refs2, "-s", srcs, "-o", out, "--system", "sysA"])
    assert proc.returncode == 0, proc.stderr
    assert _as_rows(_read(out)) == [
        {"id": "sysA:0", "doc_id": "0", "system": "sysA", "source": "source 0", "text": "the cat sat",
         "references": ["a cat sat", "the cat was sitting"]},
        {"id": "sysA:1", "doc_id": "1", "system": "sysA", "source": "source 1", "text": "a dog ran",
         "references": ["the dog runs", "a dog was running"]},
    ]


def test_converted_rows_score_through_the_cli(tmp_path):
    cands = tmp_path / "c.txt"
    cands.write_text("one two three\nfour\n")
    rows, scores = tmp_path / "rows.parquet", tmp_path / "scores.parquet"
    assert run_cli_in_process(["convert", "-c", cands, "-o", rows]).returncode == 0
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", rows, "-o", scores, "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    assert _read(scores).column("text_stats_words").to_pylist() == [3.0, 1.0]


def test_validation_drops_rows_with_reasons(tmp_path):
    lines = [
        json.dumps({"id": 1, "text": "ok"}),                     # int id -> "1"
        json.dumps({"id": 2}),                                   # no text
        "{not json",                                             # not JSON
        json.dumps([1, 2]),                                      # not an object
        json.dumps({"id": 1, "text": "again"}),                  # duplicate id
        json.dumps({"id": 3, "text": "x", "human_q": "high"}),   # not a number
        json.dumps({"id": 4, "text": "x", "references": [1]}),   # reference not a string
        json.dumps({"id": 5, "text": "x", "references": "single", "human_q": "2"}),
        "",
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines))
    table, report = convert.convert_file(str(path))
    assert table.column("id").to_pylist() == ["1", "3", "5"]  # an unparsable rating keeps its generation
    assert table.column("references").to_pylist() == [None, None, ["single"]]
    assert table.column("human_q").to_pylist() == [None, None, 2.0]
    assert report.rows_read == 8 and report.rows_written == 3
    assert report.dropped == {
        "no text": 1, "line is not valid JSON": 1, "line is not a JSON object": 1,
        "duplicate id (the first row with it is kept)": 1, "references: expected strings, got int": 1,
    }
    assert report.warnings == {"human_q: 'high' is not a number (kept as null)": 1}
    assert report.warning_examples["human_q: 'high' is not a number (kept as null)"] == [6]
    assert any("warning, 1 row(s) kept: human_q: 'high'" in line for line in report.lines())
    assert report.examples["no text"] == [2] and report.examples["line is not valid JSON"] == [3]


def test_a_field_null_in_every_row_written_is_named_as_left_out(tmp_path):
    """A rating field whose every value is unparsable is kept as null row by row, so the column
    is left out; the report says so (its warnings alone read as if the column were kept)."""
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps({"id": i, "text": "x", "human_q": "high", "human_r": i, "source": None})
                              for i in range(3)))
    table, report = convert.convert_file(str(path))
    assert "human_q" not in table.column_names and table.column("human_r").to_pylist() == [0.0, 1.0, 2.0]
    assert report.columns_without_values == ["source", "human_q"]
    assert "  columns left out, no row written has a value in them: source, human_q" in report.lines()
    assert report.as_dict()["columns_without_values"] == ["source", "human_q"]
    written = convert.write_file(str(path), tmp_path / "d.parquet")  # the batched writer says the same
    assert written.columns_without_values == ["source", "human_q"]


def test_mapping_errors():
    with pytest.raises(UsageError, match="not a canonical column"):
        convert.parse_mapping(["hypothesis=hyp"])
    with pytest.raises(UsageError, match="mapped twice"):
        convert.parse_mapping(["text=a", "text=b"])
    assert convert.parse_mapping(["references=r1,r2", "references=r3", "text=hyp"]) == {
        "references": ["r1", "r2", "r3"], "text": ["hyp"]}


def test_nothing_convertible_is_an_input_error(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": 1}) + "\n")
    with pytest.raises(InputError, match="no row could be converted"):
        convert.convert_file(str(path))
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"uid": 1, "hyp": "a text", "score": 3}) + "\n")
    with pytest.raises(InputError, match=r"fields are hyp, score, uid: name the text and id fields with --map"):
        convert.convert_file(str(other))
    bad = tmp_path / "latin1.csv"
    bad.write_bytes("id,text\n1,caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        convert.convert_file(str(bad))


def test_tsv_and_missing_values(tmp_path):
    path = tmp_path / "d.tsv"
    path.write_text("id\ttext\thuman_a\tsystem\nx\thello world\t\ts\ny\tbye\t2\t\n")
    table, report = convert.convert_file(str(path))
    assert table.to_pylist() == [{"id": "x", "system": "s", "text": "hello world", "human_a": None},
                                 {"id": "y", "system": None, "text": "bye", "human_a": 2.0}]
    assert table.schema.field("human_a").type == pa.float64() and report.dropped == {}


def test_parquet_with_own_names_and_types(tmp_path):
    """A Parquet dump with its own column names and types (int ids, int ratings, a binary text
    column holding one invalid UTF-8 value) is mapped onto the canonical columns."""
    src = tmp_path / "own.parquet"
    texts = pa.array([b"first text", b"bad \xff byte", b"third"], type=pa.binary()).view(pa.string())
    pq.write_table(pa.table({"uid": [10, 11, 12], "hyp": texts, "refs": [["r1"], ["r2"], []],
                             "rating": [4, 5, 3], "aspects": pa.array([[("tense", "Past")], [], None],
                                                                      type=pa.map_(pa.string(), pa.string()))}), src)
    out = tmp_path / "canonical.parquet"
    proc = run_cli_in_process(["convert", "-i", src, "-o", out, "--map", "id=uid", "--map", "text=hyp", "--map", "references=refs",
                    "--map", "human_rating=rating", "--map", "attributes=aspects", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert _as_rows(_read(out)) == [
        {"id": "10", "text": "first text", "references": ["r1"], "attributes": {"tense": "Past"}, "human_rating": 4.0},
        {"id": "12", "text": "third", "references": [], "attributes": None, "human_rating": 3.0},
    ]
    assert json.loads(proc.stdout)["dropped"] == {"hyp is not valid UTF-8": 1}

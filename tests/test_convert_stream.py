"""`ctgscore convert` in batches: the output and the report are the same whatever the batch
size (one row, a few rows, a few bytes), and the same as the whole-file conversion built
from the list readers; the reader yields bounded batches; a failure leaves no file."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore import convert
from ctgscore.convert import stream
from ctgscore.testing.cli import run_cli_in_process
from scoring.errors import InputError

# (max_rows, max_bytes): one row a batch, boundaries at odd places, a byte budget that ends
# every batch at its first row, and the default (the whole file in one batch here)
LIMITS = [(1, stream.MAX_BATCH_BYTES), (2, stream.MAX_BATCH_BYTES), (3, stream.MAX_BATCH_BYTES),
          (1000, 40), (1000, 1), (stream.MAX_BATCH_ROWS, stream.MAX_BATCH_BYTES)]

JSONL_LINES = [
    "\ufeff" + json.dumps({"id": "a", "text": "first", "human_x": "high"}),   # BOM; rating nulled with a warning
    json.dumps({"id": "b", "text": "second", "human_x": float("nan")}),       # NaN rating nulled
    "{not json",                                                             # dropped near a boundary
    json.dumps({"id": "a", "text": "duplicate of row 1"}),                    # a duplicate in a later batch
    "",
    json.dumps({"id": "c", "text": "x" * 300, "references": ["r1", "r2"]}),  # a large row
    json.dumps({"id": "d"}),                                                 # no text
    json.dumps({"id": "e", "text": "last", "source": "only here", "notes": "left out"}),  # columns only at the end
]


def _whole_file(path, fmt, mapping=None, constants=None, prefix=""):
    """The conversion as it was before batches: every record read into one list, then
    converted and made one table."""
    report = convert.ConversionReport(inputs=[str(path)], format=fmt)
    read = {"jsonl": convert.read_jsonl, "csv": convert.read_csv, "parquet": convert.read_parquet}[fmt]
    rows = convert.canonical_rows(read(path, report), report, mapping, constants, prefix)
    table = convert.rows_to_table(rows)
    report.rows_written, report.columns = table.num_rows, table.column_names
    return table, report


def _same(report_a, report_b):
    """The batched report is the whole-file one's, but for what only the batched writer knows:
    the output and the fields left out for having no value (`columns_without_values`)."""
    a, b = dict(vars(report_a)), dict(vars(report_b))
    for key in ("output", "columns_without_values"):
        a.pop(key), b.pop(key)
    assert a == b


@pytest.mark.parametrize(("max_rows", "max_bytes"), LIMITS)
def test_jsonl_batches_give_the_whole_file_output(tmp_path, max_rows, max_bytes):
    src = tmp_path / "d.jsonl"
    src.write_text("\n".join(JSONL_LINES) + "\n", encoding="utf-8")
    expected, expected_report = _whole_file(src, "jsonl")
    # the whole-file result itself, so the comparison is not between two empty things
    assert expected.column("id").to_pylist() == ["a", "b", "c", "e"]
    assert expected.column_names == ["id", "source", "text", "references"]  # human_x: null in every row, left out
    assert expected_report.dropped == {"line is not valid JSON": 1, "duplicate id (the first row with it is kept)": 1,
                                       "no text": 1}
    assert sum(expected_report.warnings.values()) == 2 and expected_report.ignored_fields == ["notes"]

    table, report = convert.convert_file(str(src), max_rows=max_rows, max_bytes=max_bytes)
    assert table.equals(expected) and table.schema == expected.schema
    _same(report, expected_report)
    assert report.columns_without_values == ["human_x"]  # null in every row written: named as left out

    out = tmp_path / "out.parquet"
    written = convert.write_file(str(src), out, max_rows=max_rows, max_bytes=max_bytes)
    on_disk = pq.read_table(out)
    assert on_disk.equals(expected) and on_disk.schema == expected.schema
    _same(written, expected_report)
    left_out = "  columns left out, no row written has a value in them: human_x"
    assert [line for line in written.lines()[1:] if line != left_out] == expected_report.lines()[1:]  # less the output path
    assert left_out in written.lines()


CSV_TEXT = (
    "id,text,human_x,source,empty\r\n"
    "1,plain,2,,\r\n"
    '2,"a cell over\r\ntwo lines, with a comma",3,,\r\n'   # a row spanning lines (and a batch boundary)
    '3,"ab"c,1,,\r\n'                                       # a stray quote: dropped near a boundary
    "4,short,,s4,\r\n"
    "5,too,many,cells,here,x\r\n"                          # dropped: cell count
    "\r\n"
    '6,"quoted ""inner"" text",inf,,\r\n'                   # inf rating nulled
    "2,duplicate,1,,\r\n"
)


@pytest.mark.parametrize(("max_rows", "max_bytes"), LIMITS)
def test_csv_batches_give_the_whole_file_output(tmp_path, max_rows, max_bytes):
    src = tmp_path / "d.csv"
    src.write_bytes(b"\xef\xbb\xbf" + CSV_TEXT.encode())
    expected, expected_report = _whole_file(src, "csv", constants={"system": "s"})
    assert expected.column("id").to_pylist() == ["1", "2", "4", "6"]
    assert expected.column("text").to_pylist()[1] == "a cell over\r\ntwo lines, with a comma"
    assert "empty" not in expected.column_names and "human_x" in expected.column_names
    assert expected_report.rows_read == 7 and len(expected_report.dropped) == 3

    table, report = convert.convert_file(str(src), constants={"system": "s"}, max_rows=max_rows, max_bytes=max_bytes)
    assert table.equals(expected)
    _same(report, expected_report)
    out = tmp_path / "out.parquet"
    convert.write_file(str(src), out, constants={"system": "s"}, max_rows=max_rows, max_bytes=max_bytes)
    assert pq.read_table(out).equals(expected)


@pytest.mark.parametrize("max_rows", [1, 2, 1000])
def test_parquet_and_aligned_batches_give_the_whole_file_output(tmp_path, max_rows):
    src = tmp_path / "own.parquet"
    texts = pa.array([b"one", b"bad \xff", b"three", b"four", b"five"], type=pa.binary()).view(pa.string())
    pq.write_table(pa.table({"uid": [1, 2, 3, 3, 5], "hyp": texts}), src, row_group_size=2)
    mapping = {"id": ["uid"], "text": ["hyp"]}
    expected, expected_report = _whole_file(src, "parquet", mapping)
    assert expected.column("id").to_pylist() == ["1", "3", "5"] and len(expected_report.dropped) == 2
    table, report = convert.convert_file(str(src), mapping=mapping, max_rows=max_rows)
    assert table.equals(expected)
    _same(report, expected_report)

    cands, refs = tmp_path / "c.txt", tmp_path / "r.txt"
    cands.write_text("a\nb\n\nd\n")
    refs.write_text("ra\r\nrb\r\nrc\r\nrd\r\n")
    whole, _ = convert.convert_aligned(str(cands), [str(refs)], id_prefix="s:")
    assert whole.to_pylist() == [{"id": f"s:{i}", "doc_id": str(i), "text": t, "references": [f"r{c}"]}
                                 for i, (t, c) in enumerate(zip(["a", "b", "", "d"], "abcd"))]
    batched, _ = convert.convert_aligned(str(cands), [str(refs)], id_prefix="s:", max_rows=max_rows)
    assert batched.equals(whole)
    refs.write_text("ra\nrb\n")  # files of different lengths are refused before any row, naming both counts
    with pytest.raises(InputError, match=r"r.txt: 2 lines, but .*c.txt has 4; line-aligned files need the same"):
        convert.convert_aligned(str(cands), [str(refs)], max_rows=max_rows)


def test_reader_yields_bounded_batches(tmp_path):
    src = tmp_path / "d.jsonl"
    sizes = [10, 600, 20, 20, 20, 20, 3000, 10]  # lines of 34, 624, 44 x 4, 3024, 34 bytes
    src.write_text("".join(json.dumps({"id": str(i), "text": "x" * n}) + "\n" for i, n in enumerate(sizes)))
    report = convert.ConversionReport(inputs=[str(src)], format="jsonl")
    items = list(convert.iter_jsonl(src, report))
    assert sum(size for *_, size in items) == os.path.getsize(src)  # each row is charged its line's bytes
    batches = list(stream.batched(iter(items), max_rows=3, max_bytes=600))
    assert [number for batch in batches for number, _ in batch] == list(range(1, 9))  # every row, in order
    by_number = {number: size for number, _, size in items}
    for batch in batches:
        assert len(batch) <= 3
        # a batch stops at the first row that reaches the byte budget
        assert sum(by_number[n] for n, _ in batch[:-1]) < 600
    # 34 + 624 passes 600; three rows of 44; 44 + 3024 passes 600; the last row
    assert [len(b) for b in batches] == [2, 3, 2, 1]


def test_a_failure_leaves_the_output_as_it_was(tmp_path):
    out = tmp_path / "out.parquet"
    out.write_bytes(b"old")
    late_quote = tmp_path / "d.csv"
    late_quote.write_text("id,text\n" + "".join(f"{i},t{i}\n" for i in range(50)) + '99,"never closed\n')
    with pytest.raises(InputError, match="line 52 is never closed"):
        convert.write_file(str(late_quote), out, max_rows=5)
    nothing = tmp_path / "d.jsonl"
    nothing.write_text(json.dumps({"id": 1}) + "\n")
    proc = run_cli_in_process(["convert", "-i", nothing, "-o", out])
    assert proc.returncode == 1 and "no row could be converted (1 no text)" in proc.stderr
    assert out.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["d.csv", "d.jsonl", "out.parquet"]


def test_utf8_error_after_a_bom_names_the_file_offset(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_bytes(b'\xef\xbb\xbf{"id": "1", "text": "a"}\n{"id": "2", "text": "\xff"}\n')
    with pytest.raises(InputError, match=r"not UTF-8 text \(line 2, byte 49\)"):
        convert.convert_file(str(src))


def test_csv_line_numbers_after_a_large_row(tmp_path):
    """A row past 1 MB gets the csv reader replaced (its field buffer lets go of the row); the
    lines counted for messages carry on across the replacement."""
    src = tmp_path / "d.csv"
    src.write_text("id,text\n1," + "x" * 1_200_000 + '\n2,"multi\nline"\n3,"never closed\n4,x\n')
    with pytest.raises(InputError, match=r"line 5 is never closed \(lines 5-6 would be one cell\)"):
        convert.convert_file(str(src))
    src.write_text("id,text\n1," + "x" * 1_200_000 + '\n2,"multi\nline"\n3,"a"b\n4,x\n')
    table, report = convert.convert_file(str(src))
    assert table.column("id").to_pylist() == ["1", "2", "4"] and table.column("text")[1].as_py() == "multi\nline"
    assert report.examples == {"row is not valid CSV (',' expected after '\"')": [4]}

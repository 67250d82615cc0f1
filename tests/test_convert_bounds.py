"""What one hostile input file can make `ctgscore convert` hold: a line or CSV record past the
record cap fails the file naming where it starts, before the rest of it is read; lines that end
in a bare `\\r` are read one at a time (CSV) or refused by the cap with a hint (JSONL, aligned);
Parquet is read in batches bounded by bytes as well as rows, a huge row group in slices; a
line-aligned conversion reads each file twice, not four times."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore import convert
from ctgscore.convert import readers
from ctgscore.testing.cli import run_cli_in_process
from scoring import schema
from scoring.errors import InputError


def _peak_traced(consume) -> int:
    """Bytes of Python allocations at their peak while `consume()` runs."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        consume()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _report() -> convert.ConversionReport:
    return convert.ConversionReport(inputs=[], format="test")


def _drain(items) -> None:
    for _ in items:
        pass


# ----- the record cap ---------------------------------------------------------------------
def test_a_jsonl_line_past_the_cap_fails_naming_its_line_and_byte_before_it_is_read(tmp_path):
    src = tmp_path / "d.jsonl"
    first = json.dumps({"id": "1", "text": "ok"}) + "\n"
    src.write_text(first + json.dumps({"id": "2", "text": "x" * (8 << 20)}) + "\n" + first)
    report = _report()

    def read():
        with pytest.raises(InputError, match=rf"d.jsonl: line 2 \(from byte {len(first)}\) is longer than "
                                             r"1,000,000 bytes \(the record cap, --max-record-bytes\)$"):
            _drain(convert.iter_jsonl(src, report, max_record_bytes=1_000_000))

    # the 8 MB line is never held: about the cap and one read
    assert _peak_traced(read) < 2_500_000
    # under the default cap the same file converts
    assert [n for n, *_ in convert.iter_jsonl(src, _report())] == [1, 2, 3]


def test_the_cap_counts_the_line_end(tmp_path):
    src = tmp_path / "d.jsonl"
    line = json.dumps({"id": "1", "text": "abc"}) + "\n"
    src.write_text(line)
    assert len(list(convert.iter_jsonl(src, _report(), max_record_bytes=len(line)))) == 1
    with pytest.raises(InputError, match="line 1 .* is longer than"):
        list(convert.iter_jsonl(src, _report(), max_record_bytes=len(line) - 1))


def test_jsonl_of_bare_carriage_returns_is_refused_with_a_hint(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_bytes(b"".join(json.dumps({"id": str(i), "text": "t" * 50}).encode() + b"\r" for i in range(2000)))
    proc = run_cli_in_process(["convert", "-i", src, "-o", tmp_path / "o.parquet", "--max-record-bytes", "10000"])
    assert proc.returncode == 1
    assert "d.jsonl: line 1 (from byte 0) is longer than 10,000 bytes" in proc.stderr
    assert "bare carriage return (\\r, old Mac line ends)" in proc.stderr and "Traceback" not in proc.stderr


def test_a_quote_never_closed_fails_at_the_cap_naming_the_row_start(tmp_path):
    src = tmp_path / "d.csv"
    head = "id,text\n1,fine\n"
    src.write_text(head + '2,"opened\n' + ("more text on a line\n" * 400_000))  # 8 MB after the quote

    def read():
        with pytest.raises(InputError, match=rf"d.csv: the row starting on line 3 \(byte {len(head)}\) runs past "
                                             r"1,000,000 bytes \(the record cap, --max-record-bytes\): a quote "
                                             r"opened in it is not closed within the cap$"):
            _drain(convert.iter_csv(src, _report(), max_record_bytes=1_000_000))

    assert _peak_traced(read) < 6 << 20  # the csv reader's field buffer: 4 bytes a character of the cap
    # under the cap, the quote is still found never closed at the end, as before
    with pytest.raises(InputError, match="the quote opened in the row starting on line 3 is never closed"):
        _drain(convert.iter_csv(src, _report()))


def test_a_csv_header_past_the_cap_names_line_1(tmp_path):
    src = tmp_path / "d.csv"
    src.write_text('id,"text\n' + "x\n" * 1000)
    with pytest.raises(InputError, match=r"the row starting on line 1 \(byte 0\) runs past 100 bytes"):
        _drain(convert.iter_csv(src, _report(), max_record_bytes=100))


def test_aligned_line_past_the_cap_fails_by_name(tmp_path):
    cands, refs = tmp_path / "c.txt", tmp_path / "r.txt"
    cands.write_text("a\nb\n")
    refs.write_text("ra\n" + "r" * 500 + "\n")
    with pytest.raises(InputError, match=r"r.txt: line 2 \(from byte 3\) is longer than 100 bytes"):
        convert.convert_aligned(str(cands), [str(refs)], max_record_bytes=100)
    proc = run_cli_in_process(["convert", "-c", cands, "-r", refs, "-o", tmp_path / "o.parquet",
                               "--max-record-bytes", "0"])
    assert proc.returncode == 2 and "--max-record-bytes 0: expected a positive number" in proc.stderr


# ----- bare carriage returns in CSV -------------------------------------------------------
def _csv_module_rows(text: str) -> list[list[str]]:
    """The rows the csv module reads from the whole text (the independent expectation)."""
    previous = csv.field_size_limit(len(text) + 1)
    try:
        return [row for row in csv.reader(io.StringIO(text, newline=""), strict=True) if row]
    finally:
        csv.field_size_limit(previous)


def test_csv_of_bare_carriage_returns_is_read_a_line_at_a_time(tmp_path):
    rows = [[str(i), f"text {i} " + "w" * 60] for i in range(20_000)]  # about 1.5 MB
    text = "id,text\r" + "".join(f"{i},{t}\r" for i, t in rows)
    src = tmp_path / "d.csv"
    src.write_text(text, newline="")
    report = _report()
    got = [(n, r) for n, r, _ in convert.iter_csv(src, report)]
    assert [[r["id"], r["text"]] for _, r in got] == _csv_module_rows(text)[1:]
    assert [n for n, _ in got] == list(range(2, 20_002))
    # no line holds the file: what is held while records stream by is below its 1.5 MB (reading
    # it as one line held its bytes and its text, 3 MB)
    assert _peak_traced(lambda: _drain(convert.iter_csv(src, _report()))) < 1_000_000
    # and a line is a record: a small cap is no obstacle
    assert len(list(convert.iter_csv(src, _report(), max_record_bytes=200))) == 20_000


@pytest.mark.parametrize("end", ["\r\n", "\r", "\n"])
def test_csv_line_ends_cut_by_a_read_are_one_line_end(tmp_path, end):
    """A `\\r\\n` whose two bytes fall in two reads of the file is still one line end (not an
    empty line, which would shift every later row number), and a bare `\\r` at the end of a read
    still ends its line; quoted cells keep their line ends."""
    cut = readers._CHUNK
    first = "id,text" + end
    filler = "1," + "f" * (cut - len(first) - 2 - 1) + end[0]  # the read of `cut` bytes ends after `end[0]`
    text = first + filler + end[1:] + '2,"quoted' + end + 'cell"' + end + "3,last" + end
    assert len((first + filler).encode()) == cut
    src = tmp_path / "d.csv"
    src.write_text(text, newline="")
    got = [(n, r) for n, r, _ in convert.iter_csv(src, _report())]
    assert [[r["id"], r["text"]] for _, r in got] == _csv_module_rows(text)[1:]
    assert [n for n, _ in got] == [2, 3, 4] and got[1][1]["text"] == f"quoted{end}cell"


def test_csv_utf8_error_after_bare_carriage_returns_names_its_byte(tmp_path):
    src = tmp_path / "d.csv"
    src.write_bytes(b"id,text\r1,a\r2,\xff\r")
    with pytest.raises(InputError, match=r"not UTF-8 text \(line 3, byte 14\)"):
        _drain(convert.iter_csv(src, _report()))


# ----- Parquet batches bounded by bytes ----------------------------------------------------
def _read_tables(monkeypatch) -> list[tuple[int, int]]:
    """(rows, bytes) of every table the Parquet reader turns into rows."""
    seen: list[tuple[int, int]] = []
    real = schema.rows_from_table

    def spy(table):
        seen.append((table.num_rows, table.nbytes))
        return real(table)

    monkeypatch.setattr(readers.schema, "rows_from_table", spy)
    return seen


def test_parquet_batches_are_bounded_by_bytes_in_one_huge_row_group(tmp_path, monkeypatch):
    src = tmp_path / "big.parquet"
    texts = [f"{i:04d}" + chr(97 + i % 26) * 200_000 for i in range(60)]  # 60 rows of 200 kB, one row group
    pq.write_table(pa.table({"uid": list(range(60)), "hyp": texts}), src, use_dictionary=False)
    assert pq.ParquetFile(src).metadata.num_row_groups == 1
    seen = _read_tables(monkeypatch)
    table, report = convert.convert_file(str(src), mapping={"id": ["uid"], "text": ["hyp"]}, max_bytes=1 << 20)
    assert table.column("text").to_pylist() == texts and report.rows_written == 60
    assert sum(rows for rows, _ in seen) == 2 * 60  # the scan, then the conversion
    assert max(nbytes for _, nbytes in seen) <= (1 << 20) + 200_100  # the budget, and one row past it at most
    assert max(rows for rows, _ in seen) <= 6


def test_parquet_rows_stored_once_in_a_dictionary_are_still_read_in_slices(tmp_path, monkeypatch):
    """A repeated large value is stored once (dictionary encoding): the file's metadata says a
    few bytes a row, the decoded rows are large. The first batch of a row group is a probe of a
    few rows; the batches after it fit the budget."""
    src = tmp_path / "dict.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(400)], "text": ["y" * 100_000] * 400}), src)
    group = pq.ParquetFile(src).metadata.row_group(0)
    assert group.total_byte_size < 1 << 20  # 40 MB decoded, under 1 MB by the metadata
    seen = _read_tables(monkeypatch)
    table, _ = convert.convert_file(str(src), max_bytes=1 << 20)
    assert table.num_rows == 400 and table.column("id").to_pylist() == [str(i) for i in range(400)]
    # each pass (the scan, the conversion): a probe of 16 rows (1.6 MB), then batches of the budget
    probes = [i for i, (rows, _) in enumerate(seen) if rows == readers._PROBE_ROWS]
    assert probes == [0, len(seen) // 2] and sum(rows for rows, _ in seen) == 2 * 400
    assert max(nbytes for i, (_, nbytes) in enumerate(seen) if i not in probes) <= (1 << 20) + 100_100


def test_parquet_folder_batches_bounded_and_in_order(tmp_path, monkeypatch):
    folder = tmp_path / "dump"
    for system, start in (("a", 0), ("b", 30)):
        (folder / f"system={system}").mkdir(parents=True)
        ids = [str(i) for i in range(start, start + 30)]
        pq.write_table(pa.table({"id": ids, "text": [i + "z" * 50_000 for i in ids]}),
                       folder / f"system={system}" / "part.parquet", row_group_size=20)
    expected, expected_report = convert.convert_file(str(folder), fmt="parquet")
    assert expected.column("id").to_pylist() == [str(i) for i in range(60)]
    seen = _read_tables(monkeypatch)
    table, _ = convert.convert_file(str(folder), fmt="parquet", max_bytes=200_000)
    assert table.equals(expected) and table.column("system").to_pylist() == ["a"] * 30 + ["b"] * 30
    assert max(nbytes for _, nbytes in seen) <= 200_000 + 50_100


def test_normal_parquet_reads_are_not_cut_small(tmp_path, monkeypatch):
    src = tmp_path / "small.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(5000)], "text": ["short"] * 5000}), src)
    seen = _read_tables(monkeypatch)
    convert.convert_file(str(src))
    assert [rows for rows, _ in seen] == [readers._PROBE_ROWS, 5000 - readers._PROBE_ROWS] * 2  # scan, conversion


# ----- line-aligned files read twice --------------------------------------------------------
def test_aligned_files_are_read_twice(tmp_path, monkeypatch):
    files = {name: tmp_path / f"{name}.txt" for name in ("c", "r", "s")}
    for name, path in files.items():
        path.write_text("".join(f"{name}{i}\n" for i in range(5)))
    opened: list[str] = []
    real = readers._open

    def spy(path):
        opened.append(path.name)
        return real(path)

    monkeypatch.setattr(readers, "_open", spy)
    report = convert.write_aligned(tmp_path / "o.parquet", str(files["c"]), [str(files["r"])], str(files["s"]),
                                   id_prefix="x:")
    assert sorted(opened) == ["c.txt", "c.txt", "r.txt", "r.txt", "s.txt", "s.txt"]  # a count, then the rows
    assert report.rows_written == 5 and report.columns == ["id", "doc_id", "source", "text", "references"]
    assert pq.read_table(tmp_path / "o.parquet").to_pylist()[4] == {
        "id": "x:4", "doc_id": "4", "source": "s4", "text": "c4", "references": ["r4"]}


@pytest.mark.parametrize("text", ["id,t\r1,a\r2,b", "id,t\r\n1,a\r\r\n2,b\n", "id,t\n1,a\r2,b\r\n",
                                  'id,t\r1,"q\rq"\r2,b\r', "id,t\r\r\r1,a\r\n\r\n2,b"])
def test_csv_mixed_line_ends_read_as_the_csv_module_reads_them(tmp_path, text):
    src = tmp_path / "d.csv"
    src.write_text(text, newline="")
    got = [[r["id"], r["t"]] for _, r, _ in convert.iter_csv(src, _report())]
    assert got == _csv_module_rows(text)[1:] and len(got) == 2

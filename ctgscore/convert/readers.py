"""Readers: JSON Lines, CSV/TSV, Parquet and line-aligned text files -> (row number, record)
pairs; records that cannot be read at all are dropped into the report (docs/convert.md)."""

from __future__ import annotations

import contextlib
import contextvars
import csv
import itertools
import json
import os
import pathlib
import re
import shutil
import stat
import sys
import tempfile
from typing import Any, Iterator, Sequence

from ctgscore.convert.report import ConversionReport
from scoring import schema
from scoring.errors import InputError, UsageError
from scoring.local_files import refuse_device
from scoring.strict_json import DuplicateKey, unique_keys

FORMATS = ("jsonl", "csv", "tsv", "parquet")


# Every reader is a generator of (row number, record, bytes read): a file is read one line (or one
# Parquet batch) at a time, so a conversion holds one batch of rows, not the file
# (`ctgscore.convert.stream`); `read_*` keep the list form.
Item = tuple[int, dict[str, Any], int]


# named pipes among the inputs (stdin, a shell's `<(...)`) -> the temporary copies read in their
# place (`readable_twice`): a conversion reads its input twice, a scan and the batches
_SPOOLED: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("ctgscore_convert_spooled", default=None)


def _is_pipe(path) -> bool:
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.contextmanager
def readable_twice(paths: Sequence[str | os.PathLike | None]):
    """Inside this block, each named pipe among `paths` (`-i /dev/stdin` fed by a shell, a
    `<(...)`) is read from a temporary copy made once, so the scan and the batches both see
    its rows (a pipe can be read only once); errors still name the path given. Regular files
    are read in place. The copies are removed at the end of the block."""
    pipes = list(dict.fromkeys(str(p) for p in paths if p is not None and _is_pipe(p)))
    if not pipes:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="ctgscore-convert-") as folder:
        spooled = {}
        for index, path in enumerate(pipes):
            spooled[path] = os.path.join(folder, str(index))
            with open(path, "rb") as source, open(spooled[path], "wb") as copy:
                shutil.copyfileobj(source, copy, 1 << 20)
        token = _SPOOLED.set(spooled)
        try:
            yield
        finally:
            _SPOOLED.reset(token)


def _readable(path) -> str | pathlib.Path:
    """Where to read `path` from: its temporary copy inside `readable_twice`, else itself."""
    return (_SPOOLED.get() or {}).get(str(path), path)


def _open(path: pathlib.Path):
    refuse_device(path, error=InputError)
    try:
        return open(_readable(path), "rb")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, expected a file") from None


class _TextLines:
    """(line, its size in bytes) for each line of the file, split after each line feed and decoded
    one at a time, as `decode_utf8(data, path, "utf-8-sig")` reads the whole: a BOM at the start
    is dropped, and the first byte that is not UTF-8 raises naming its line and file offset.
    An iterator object rather than a generator: it keeps no reference to the line it returned
    (a generator's frame would hold a 200 MB line while the row is converted)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.handle = _open(path)
        self.number = 0
        self.offset = 0

    def __iter__(self):
        return self

    def __next__(self) -> tuple[str, int]:
        if self.handle is None:
            raise StopIteration
        raw = self.handle.readline()
        if not raw:
            self._close()
            raise StopIteration
        self.number += 1
        start = 3 if self.number == 1 and raw.startswith(b"\xef\xbb\xbf") else 0
        try:
            line = (raw[start:] if start else raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            self._close()
            raise InputError(f"{self.path}: not UTF-8 text (line {self.number}, byte {self.offset + start + exc.start})") from None
        size = len(raw)
        self.offset += size
        return line, size

    def _close(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None:
            handle.close()

    __del__ = _close


def _text_lines(path: pathlib.Path) -> Iterator[tuple[str, int]]:
    return _TextLines(path)


def iter_jsonl(path: str | pathlib.Path, report: ConversionReport) -> Iterator[Item]:
    """(line number, object, bytes) for every non-blank line; a line that is not a JSON object,
    or whose object names a key twice (two `text` values, one of which would vanish), is dropped
    with its reason."""
    number = 0
    for line, size in _text_lines(pathlib.Path(path)):  # no enumerate: its tuple would keep the line
        number += 1
        # the line end stays (JSON allows it); no copy of a long line is made to check it is blank
        line = line.removeprefix("\ufeff")  # files joined with `cat`: each may start with a BOM
        if not line or line.isspace():
            continue
        report.rows_read += 1
        try:
            # in a list, not a local: `yield slot.pop()` leaves this frame no reference to the
            # record while the batch it joins is converted and written
            slot = [json.loads(line, object_pairs_hook=unique_keys)]
            del line  # the text of a long line is not kept beside its object
        except DuplicateKey as exc:
            report.drop(f"line names the key {exc.args[0]!r} twice in one object", number)
            continue
        except json.JSONDecodeError:
            report.drop("line is not valid JSON", number)
            continue
        except ValueError:  # an integer of more than 4,300 digits
            report.drop("line holds a number too long to read", number)
            continue
        except RecursionError:
            report.drop("line nests arrays or objects too deep to read", number)
            continue
        if not isinstance(slot[0], dict):
            report.drop("line is not a JSON object", number)
            continue
        yield number, slot.pop(), size


def read_jsonl(path: str | pathlib.Path, report: ConversionReport) -> list[tuple[int, dict[str, Any]]]:
    """`iter_jsonl` as a list of (line number, object)."""
    return [(number, record) for number, record, _ in iter_jsonl(path, report)]


_CSV_LINE = re.compile("\r\n|\r|\n")  # universal newlines, as a file opened with newline="" reads lines


class _CsvLines:
    """The file's lines as `io.StringIO(text, newline="")` gives them (each keeps its line end),
    cut from one piece (up to a line feed) of the file at a time; the bytes of each piece are added
    to `sizes[0]` as it is read. No reference to a returned line is kept."""

    def __init__(self, path: pathlib.Path, sizes: list[int]):
        self.lines = _text_lines(path)
        self.sizes = sizes
        self.piece: str | None = None
        self.position = 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        if self.piece is None:
            self.piece, size = next(self.lines)
            self.sizes[0] += size
            self.position = 0
        piece, start = self.piece, self.position
        match = _CSV_LINE.search(piece, start)
        end = match.end() if match else len(piece)
        if end >= len(piece):
            self.piece = None
        else:
            self.position = end
        return piece[start:end]


def iter_csv(path: str | pathlib.Path, report: ConversionReport, delimiter: str = ",") -> Iterator[Item]:
    """(row number, {header: cell}, bytes) for every data row; empty cells are missing values.

    Parsed strictly: a row the csv module cannot read (`"a"b`, a quote in the middle of a
    field) is dropped with the module's reason rather than read as some other text, and a
    quote that is never closed, which would swallow every later line into one cell, fails the
    file with the line it opens on. A cell may be as long as the file (Python's default cap of
    131,072 characters is lifted while reading; the per-cell caps apply when scoring)."""
    path = pathlib.Path(path)
    sizes = [0]
    lines = _CsvLines(path, sizes)
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    with _field_limit(size + 1):
        yield from _csv_records(path, lines, sizes, report, delimiter)


def read_csv(path: str | pathlib.Path, report: ConversionReport, delimiter: str = ",") -> list[tuple[int, dict[str, Any]]]:
    """`iter_csv` as a list of (row number, {header: cell})."""
    return [(number, record) for number, record, _ in iter_csv(path, report, delimiter)]


_LARGE_ROW = 1 << 20  # bytes of a CSV row after which its reader is replaced


@contextlib.contextmanager
def _field_limit(size: int):
    previous = csv.field_size_limit()
    csv.field_size_limit(max(previous, min(size, sys.maxsize)))
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _csv_records(path, lines: Iterator[str], sizes: list[int], report: ConversionReport,
                 delimiter: str) -> Iterator[Item]:
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(f"{path}: empty file, expected a header row") from None
    except csv.Error as exc:
        raise InputError(f"{path}: the header row is not valid CSV ({exc})") from None
    if len(set(header)) != len(header):
        duplicate = next(h for h in header if header.count(h) > 1)
        raise InputError(f"{path}: header names column {duplicate!r} twice")
    number = 1
    lines_before = 0  # lines read by the readers replaced so far
    while True:
        number += 1
        first_line = lines_before + reader.line_num + 1
        before = sizes[0]
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            if str(exc) == "unexpected end of data":  # strict csv: the end of the text inside a quoted field
                raise InputError(f"{path}: the quote opened in the row starting on line {first_line} is never closed "
                                 f"(lines {first_line}-{lines_before + reader.line_num} would be one cell)") from None
            report.rows_read += 1
            report.drop(f"row is not valid CSV ({exc})", number)
            continue
        if not cells or all(not c or c.isspace() for c in cells):  # `c.strip()` would copy a long cell
            continue
        report.rows_read += 1
        if len(cells) != len(header):
            report.drop(f"row has {len(cells)} cells, header has {len(header)}", number)
            continue
        slot = [{h: (c if c != "" else None) for h, c in zip(header, cells)}]
        del cells  # as in `iter_jsonl`: this frame keeps no reference to the row it yields
        if sizes[0] - before > _LARGE_ROW:
            # the csv reader keeps a field buffer as large as the longest cell it has read, at 4
            # bytes a character, for its whole life: a fresh reader lets it go (rows start afresh)
            lines_before += reader.line_num
            reader = csv.reader(lines, delimiter=delimiter, strict=True)
        yield number, slot.pop(), max(sizes[0] - before, 1)


def iter_parquet(path: str | pathlib.Path, report: ConversionReport, batch_rows: int = 65_536) -> Iterator[Item]:
    """(row number, record, bytes) for every row of a Parquet file or folder (e.g. a dump with
    its own column names or types, to be mapped onto the canonical ones), read `batch_rows`
    rows at a time (a folder as `pq.read_table` reads it: hive partitions, hidden files left
    out). Of a folder, rows are numbered across its shards in order, and `report.files` says
    where each shard's rows start."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    if not pathlib.Path(path).exists():
        raise UsageError(f"{path}: no such file or folder")
    failures = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError)
    try:
        if pathlib.Path(_readable(path)).is_file():
            batches = ((batch, None) for batch in pq.ParquetFile(_readable(path)).iter_batches(batch_size=batch_rows))
        else:  # each batch with its shard, so that a row number names its file (`ConversionReport.files`)
            scanner = ds.dataset(str(path), format="parquet", partitioning="hive").scanner(batch_size=batch_rows)
            batches = ((tagged.record_batch, tagged.fragment.path) for tagged in scanner.scan_batches())
    except failures as exc:
        raise InputError(f"{path}: cannot read it as Parquet ({exc})") from None
    number = 0
    while True:
        try:
            batch, shard = next(batches)
        except StopIteration:
            break
        except failures as exc:
            raise InputError(f"{path}: cannot read it as Parquet ({exc})") from None
        if shard is not None and (not report.files or report.files[-1]["file"] != shard):
            report.files.append({"file": shard, "first_row": number + 1})
        table = pa.Table.from_batches([batch])
        size = max(table.nbytes // max(table.num_rows, 1), 1)
        rows, errors = schema.rows_from_table(table)
        del table, batch
        for row, error in zip(rows, errors):
            number += 1
            report.rows_read += 1
            if error is not None:
                report.drop(error, number)
                continue
            for key, value in row.items():
                if isinstance(value, list) and value and all(isinstance(i, tuple) and len(i) == 2 for i in value):
                    row[key] = dict(value)  # a map column
            yield number, row, size


def read_parquet(path: str | pathlib.Path, report: ConversionReport) -> list[tuple[int, dict[str, Any]]]:
    """`iter_parquet` as a list of (row number, record)."""
    return [(number, record) for number, record, _ in iter_parquet(path, report)]


def _aligned_lines(path: str | pathlib.Path) -> Iterator[tuple[str, int]]:
    """(line, bytes) of a line-aligned text file, as splitting the text at line feeds gives them less one
    final line end, each with its trailing carriage returns removed (a file of one line feed has no line)."""
    lines = _text_lines(pathlib.Path(path))
    first = next(lines, None)
    if first is None:
        return
    second = next(lines, None)
    if second is None and first[0] == "\n":
        return
    # the frame keeps only the line it yields (a raw line kept beside it would double a long one)
    lines = itertools.chain([first, *([second] if second is not None else [])], lines)
    del first, second
    while (out := _aligned_line(next(lines, None))) is not None:
        yield out


def _aligned_line(item: tuple[str, int] | None) -> tuple[str, int] | None:
    return None if item is None else (item[0].removesuffix("\n").rstrip("\r"), item[1])


def _count_lines(path: str | pathlib.Path) -> int:
    return sum(1 for _ in _aligned_lines(path))


def iter_aligned(candidates: str, references: Sequence[str] = (), sources: str | None = None,
                 report: ConversionReport | None = None) -> Iterator[Item]:
    """Line-aligned text files: line i of `candidates` is the text, line i of each references
    file one of its references, line i of `sources` its source. All files need the same
    number of lines (counted, and every file checked to be UTF-8, before the first row)."""
    counts = [_count_lines(candidates), *(_count_lines(path) for path in references)]
    if sources:
        counts.append(_count_lines(sources))
    for path, count in zip([*references, *([sources] if sources else [])], counts[1:]):
        if count != counts[0]:
            raise InputError(f"{path}: {count} lines, but {candidates} has {counts[0]}; "
                             "line-aligned files need the same number of lines")
    refs = [_aligned_lines(path) for path in references]
    srcs = _aligned_lines(sources) if sources else None
    index = -1
    for text, size in _aligned_lines(candidates):  # no enumerate: its tuple would keep the line
        index += 1
        slot: list[dict[str, Any]] = [{"doc_id": str(index), "text": text}]
        del text  # as in `iter_jsonl`: this frame keeps no reference to the row it yields
        if refs:
            pairs = [next(lines) for lines in refs]
            slot[0]["references"] = [line for line, _ in pairs]
            size += sum(n for _, n in pairs)
            del pairs
        if srcs is not None:
            slot[0]["source"], extra = next(srcs)
            size += extra
        if report is not None:
            report.rows_read += 1
        yield index + 1, slot.pop(), size


def read_aligned(candidates: str, references: Sequence[str] = (), sources: str | None = None,
                 report: ConversionReport | None = None) -> list[tuple[int, dict[str, Any]]]:
    """`iter_aligned` as a list of (line number, record)."""
    return [(number, record) for number, record, _ in iter_aligned(candidates, references, sources, report)]


def detect_format(path: str) -> str:
    suffix = pathlib.Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return suffix[1:]
    if suffix == ".parquet" or pathlib.Path(path).is_dir():
        return "parquet"
    raise UsageError(f"{path}: cannot tell the format from the name; pass --format {'|'.join(FORMATS)}")

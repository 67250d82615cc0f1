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
import shutil
import stat
import sys
import tempfile
from typing import Any, Iterator, Sequence

from ctgscore.convert.report import ConversionReport
from scoring import schema
from scoring.display_names import quoted
from scoring.errors import InputError, UsageError
from scoring.limits import MAX_CELL_BYTES
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


_CHUNK = 1 << 18  # bytes read at a time while looking for a line end
MAX_RECORD_BYTES = 64 * MAX_CELL_BYTES  # bytes of one line (CSV: one record); room for 64 cells at the scoring cap


class _TextLines:
    """(line, its size in bytes) for each line of the file, decoded one at a time, as
    `decode_utf8(data, path, "utf-8-sig")` reads the whole: a BOM at the start is dropped, and
    the first byte that is not UTF-8 raises naming its line and file offset. A line ends after a
    line feed; with `carriage_returns`, also after a carriage return that no line feed follows
    (CSV reads `\\r`, `\\n` and `\\r\\n` alike). The file is read at most `_CHUNK` bytes at a time
    while a line end is looked for, and a line longer than `max_bytes` raises naming the line and
    byte it starts at, before more of it is read: no line, however long, is held past the cap.
    An iterator object rather than a generator: it keeps no reference to the line it returned
    (a generator's frame would hold a 200 MB line while the row is converted)."""

    def __init__(self, path: pathlib.Path, max_bytes: int = MAX_RECORD_BYTES, carriage_returns: bool = False):
        self.path = path
        self.max_bytes = max_bytes
        self.carriage_returns = carriage_returns
        self.handle = _open(path)
        self.number = 0
        self.offset = 0
        self.buffer = b""  # a read not yet returned in full (a line past one read; lines after a bare `\r`)
        self.position = 0

    def __iter__(self):
        return self

    def __next__(self) -> tuple[str, int]:
        if self.handle is None:
            raise StopIteration
        raw = self._raw_line()
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

    def _read(self) -> bytes:
        if self.position < len(self.buffer):
            data = self.buffer[self.position:] if self.position else self.buffer
            self.buffer, self.position = b"", 0
            return data
        return self.handle.readline(_CHUNK)

    def _raw_line(self) -> bytes:
        """The next line's bytes with its line end (b"" at the end of the file)."""
        if self.position >= len(self.buffer):  # the common case: one read is the whole line
            raw = self.handle.readline(_CHUNK)
            whole = raw.endswith(b"\n") or len(raw) < _CHUNK  # a line feed, or the end of the file
            if whole and len(raw) <= self.max_bytes and not (self.carriage_returns and self._bare_cr(raw)):
                return raw
            self.buffer, self.position = raw, 0  # read on from it below
        if self.carriage_returns and self.position < len(self.buffer):
            end = self._line_end(self.buffer, self.position)
            if end:  # the common case of a file of bare `\r`: the next line is in the buffer
                if end - self.position > self.max_bytes:
                    self._too_long(True)
                line = self.buffer[self.position:end]
                self.position = end
                return line
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = self._read()
            if not chunk:
                break
            end = self._line_end(chunk, 0)
            if size + (end or len(chunk)) > self.max_bytes:
                self._too_long(b"\r" in chunk or any(b"\r" in part for part in parts))
            if end and end < len(chunk):
                self.buffer, self.position = chunk, end
                chunk = chunk[:end]
            parts.append(chunk)
            size += len(chunk)
            if end:
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)

    @staticmethod
    def _bare_cr(raw: bytes) -> bool:
        """Whether a read holds a `\\r` that is not its own line end (`\\r\\n`, or a last `\\r`)."""
        cr = raw.find(b"\r")
        return cr != -1 and cr < len(raw) - (2 if raw.endswith(b"\n") else 1)

    def _line_end(self, data: bytes, start: int) -> int:
        """The index just past the first line end in `data` from `start`, or 0 when it has none
        (a read ends at a line feed, so a line feed can only be its last byte)."""
        if self.carriage_returns:
            cr = data.find(b"\r", start)
            if cr != -1:
                if cr + 1 < len(data):
                    return cr + 2 if data[cr + 1] == 0x0A else cr + 1
                if self.handle.peek(1)[:1] == b"\n":
                    return 0  # `\r\n` cut between two reads: the next read ends the line
                return cr + 1
        return len(data) if data.endswith(b"\n") else 0

    def _too_long(self, bare_cr: bool) -> None:
        self._close()
        hint = ""
        if bare_cr and not self.carriage_returns:
            hint = ("; its lines seem to end in a bare carriage return (\\r, old Mac line ends), which this format "
                    "does not read as a line end: convert them to \\n")
        raise InputError(f"{self.path}: line {self.number + 1} (from byte {self.offset}) is longer than "
                         f"{self.max_bytes:,} bytes (the record cap, --max-record-bytes){hint}")

    def _close(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None:
            handle.close()

    __del__ = _close


def _text_lines(path: pathlib.Path, max_bytes: int = MAX_RECORD_BYTES) -> Iterator[tuple[str, int]]:
    return _TextLines(path, max_bytes)


def iter_jsonl(path: str | pathlib.Path, report: ConversionReport,
               max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[Item]:
    """(line number, object, bytes) for every non-blank line; a line that is not a JSON object,
    or whose object names a key twice (two `text` values, one of which would vanish), is dropped
    with its reason. A line longer than `max_record_bytes` fails the file (`_TextLines`)."""
    number = 0
    for line, size in _text_lines(pathlib.Path(path), max_record_bytes):  # no enumerate: its tuple would keep the line
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
        except DuplicateKey as exc:
            report.drop(f"line names the key {quoted(exc.args[0])} twice in one object", number)
            continue
        except json.JSONDecodeError:
            if "\r" in line.rstrip("\r\n"):  # lines ended by a bare \r read as one line of several records
                report.drop("line is not valid JSON (it holds carriage returns: are the file's lines ended by a bare "
                            "\\r? JSONL lines end with \\n)", number)
            else:
                report.drop("line is not valid JSON", number)
            continue
        except ValueError:  # an integer of more than 4,300 digits
            report.drop("line holds a number too long to read", number)
            continue
        except RecursionError:
            report.drop("line nests arrays or objects too deep to read", number)
            continue
        del line  # the text of a long line is not kept beside its object
        if not isinstance(slot[0], dict):
            report.drop("line is not a JSON object", number)
            continue
        yield number, slot.pop(), size


def read_jsonl(path: str | pathlib.Path, report: ConversionReport) -> list[tuple[int, dict[str, Any]]]:
    """`iter_jsonl` as a list of (line number, object)."""
    return [(number, record) for number, record, _ in iter_jsonl(path, report)]


class _LongRecord(Exception):
    """A CSV record (a quoted cell over several lines) past the record cap."""


class _CsvLines:
    """The file's lines as `io.StringIO(text, newline="")` gives them (each keeps its line end:
    `\r\n`, `\n` or a bare `\r`), one at a time; the bytes of each are added to `sizes[0]`.
    A record (from `record_start`, set by the reader before each record) that grows past
    `max_bytes` raises `_LongRecord` before another line of it is read. No reference to a
    returned line is kept."""

    def __init__(self, path: pathlib.Path, sizes: list[int], max_bytes: int):
        self.lines = _TextLines(path, max_bytes, carriage_returns=True)
        self.sizes = sizes
        self.max_bytes = max_bytes
        self.record_start = 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line, size = next(self.lines)
        self.sizes[0] += size
        if self.sizes[0] - self.record_start > self.max_bytes:
            raise _LongRecord
        return line


def iter_csv(path: str | pathlib.Path, report: ConversionReport, delimiter: str = ",",
             max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[Item]:
    """(row number, {header: cell}, bytes) for every data row; empty cells are missing values.

    Parsed strictly: a row the csv module cannot read (`"a"b`, a quote in the middle of a
    field) is dropped with the module's reason rather than read as some other text, and a
    quote that is never closed, which would swallow every later line into one cell, fails the
    file with the line it opens on. A cell may be as long as the record cap (Python's default cap
    of 131,072 characters is lifted while reading; the per-cell caps apply when scoring): a
    record longer than `max_record_bytes`, such as a quote never closed in a large file, fails
    the file naming the line and byte it starts at, before more of it is read."""
    path = pathlib.Path(path)
    sizes = [0]
    lines = _CsvLines(path, sizes, max_record_bytes)
    with _field_limit(max_record_bytes + 1):  # no cell is longer than its record (a pipe's size, 0, is no bound)
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


def _long_record(path, line: int, lines: _CsvLines) -> InputError:
    return InputError(f"{path}: the row starting on line {line} (byte {lines.record_start}) runs past "
                      f"{lines.max_bytes:,} bytes (the record cap, --max-record-bytes): a quote opened in it "
                      "is not closed within the cap")


def _csv_records(path, lines: _CsvLines, sizes: list[int], report: ConversionReport,
                 delimiter: str) -> Iterator[Item]:
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(f"{path}: empty file, expected a header row") from None
    except csv.Error as exc:
        raise InputError(f"{path}: the header row is not valid CSV ({exc})") from None
    except _LongRecord:
        raise _long_record(path, 1, lines) from None
    if len(set(header)) != len(header):
        duplicate = next(h for h in header if header.count(h) > 1)
        raise InputError(f"{path}: header names column {quoted(duplicate)} twice")
    number = 1
    lines_before = 0  # lines read by the readers replaced so far
    while True:
        number += 1
        first_line = lines_before + reader.line_num + 1
        before = lines.record_start = sizes[0]
        try:
            cells = next(reader)
        except StopIteration:
            break
        except _LongRecord:
            raise _long_record(path, first_line, lines) from None
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


_PARQUET_BATCH_BYTES = 32 << 20  # of decoded Arrow data per batch read (the conversion's batch, `stream`)
_PROBE_ROWS = 16  # rows of the first batch read from a row group, to see how large its rows are
_READ_BUFFER = 1 << 20  # a column chunk is read this much at a time, not whole


def _row_group_batches(open_group, num_rows: int, guess: float, batch_rows: int, max_bytes: int) -> Iterator[Any]:
    """The record batches of one row group, each of at most `batch_rows` rows and about
    `max_bytes` of Arrow data (one row larger than that is a batch of its own).

    `open_group(size)` reads the group from its start in batches of `size` rows; `guess` is
    its bytes per row by the file's metadata, which may understate them (a repeated value
    stored once in a dictionary). So the first batch is a few rows, and whenever a batch's
    rows turn out much larger than the size they were read at assumed, the group is opened
    again at a size that fits them, skipping the rows already given: a batch overshoots
    `max_bytes` by the rows of one batch at most before the size is corrected. Metadata that
    overstates the rows (a hostile file can say anything) is trusted half as much after each
    batch whose rows are less than half the size assumed, so batches grow by doubling to the size
    the rows fit (a file that said 10^15 bytes a row was read one row a batch, 10x slower), while
    honest metadata of rows that start small still keeps a batch from jumping past it at once."""
    per_row = max(guess, 1.0)

    def fit() -> int:
        return max(1, min(batch_rows, int(max_bytes // per_row)))

    size, done, first = min(fit(), _PROBE_ROWS), 0, True
    while done < num_rows:
        skip, resized = done, None
        for batch in open_group(size):
            if skip:  # given before the group was opened again
                if batch.num_rows <= skip:
                    skip -= batch.num_rows
                    continue
                batch, skip = batch.slice(skip), 0
            if not batch.num_rows:
                continue
            observed = batch.nbytes / batch.num_rows
            done += batch.num_rows
            yield batch
            del batch
            changed, first = first, False
            if observed > 2 * per_row or (changed and observed > per_row):
                per_row, changed = observed, True
            elif 2 * observed < per_row:  # rows smaller than assumed: trust the assumption half as much
                per_row, changed = max(observed, per_row / 2), True
            if changed and fit() != size and done < num_rows:
                resized = fit()
                break
        if resized is None:
            break
        size = resized


def iter_parquet(path: str | pathlib.Path, report: ConversionReport, batch_rows: int = 65_536,
                 max_bytes: int = _PARQUET_BATCH_BYTES) -> Iterator[Item]:
    """(row number, record, bytes) for every row of a Parquet file or folder (e.g. a dump with
    its own column names or types, to be mapped onto the canonical ones), read one row group at
    a time in batches of at most `batch_rows` rows and about `max_bytes` of data
    (`_row_group_batches`: a huge row group is read in slices, its column chunks streamed); a
    folder as `pq.read_table` reads it: hive partitions, hidden files left out. Of a folder,
    rows are numbered across its shards in order, and `report.files` says where each shard's
    rows start."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    if not pathlib.Path(path).exists():
        raise UsageError(f"{path}: no such file or folder")
    failures = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError)
    try:
        groups = _parquet_groups(path, pa, ds, pq, batch_rows, max_bytes)
    except failures as exc:
        raise InputError(f"{path}: cannot read it as Parquet ({exc})") from None
    number = 0
    while True:
        try:
            batch, shard = next(groups)
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


def _parquet_groups(path, pa, ds, pq, batch_rows: int, max_bytes: int) -> Iterator[Any]:
    """(record batch, its shard) of a Parquet file (shard None) or folder (the shard's path, so
    that a row number names its file), row group by row group (`_row_group_batches`)."""
    if pathlib.Path(_readable(path)).is_file():
        parquet = pq.ParquetFile(_readable(path), buffer_size=_READ_BUFFER, pre_buffer=False)
        metadata = parquet.metadata
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            for batch in _row_group_batches(
                    lambda size, index=index: parquet.iter_batches(batch_size=size, row_groups=[index], use_threads=False),
                    group.num_rows, _bytes_per_row(group), batch_rows, max_bytes):
                yield batch, None
        return
    dataset = ds.dataset(str(path), format="parquet", partitioning="hive")
    options = ds.ParquetFragmentScanOptions(buffer_size=_READ_BUFFER, pre_buffer=False)
    for fragment in dataset.get_fragments():
        metadata = fragment.metadata
        for piece in fragment.split_by_row_group():
            group = metadata.row_group(piece.row_groups[0].id)
            for batch in _row_group_batches(
                    lambda size, piece=piece: piece.to_batches(schema=dataset.schema, batch_size=size, batch_readahead=0,
                                                               fragment_readahead=0, use_threads=False,
                                                               fragment_scan_options=options),
                    group.num_rows, _bytes_per_row(group), batch_rows, max_bytes):
                yield batch, fragment.path


def _bytes_per_row(group) -> float:
    """Uncompressed bytes per row of a row group by its metadata."""
    return group.total_byte_size / max(group.num_rows, 1)


def read_parquet(path: str | pathlib.Path, report: ConversionReport) -> list[tuple[int, dict[str, Any]]]:
    """`iter_parquet` as a list of (row number, record)."""
    return [(number, record) for number, record, _ in iter_parquet(path, report)]


def _aligned_lines(path: str | pathlib.Path, max_bytes: int = MAX_RECORD_BYTES) -> Iterator[tuple[str, int]]:
    """(line, bytes) of a line-aligned text file, as splitting the text at line feeds gives them less one
    final line end, each with its trailing carriage returns removed (a file of one line feed has no line).
    A line longer than `max_bytes` fails the file (`_TextLines`)."""
    lines = _text_lines(pathlib.Path(path), max_bytes)
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


def _count_lines(path: str | pathlib.Path, max_bytes: int = MAX_RECORD_BYTES) -> int:
    return sum(1 for _ in _aligned_lines(path, max_bytes))


def count_aligned(candidates: str, references: Sequence[str] = (), sources: str | None = None,
                  max_record_bytes: int = MAX_RECORD_BYTES) -> int:
    """The number of lines of line-aligned files, each file read once: every line checked to be
    UTF-8 and within `max_record_bytes`, and files of different lengths refused by name."""
    counts = [_count_lines(candidates, max_record_bytes), *(_count_lines(path, max_record_bytes) for path in references)]
    if sources:
        counts.append(_count_lines(sources, max_record_bytes))
    for path, count in zip([*references, *([sources] if sources else [])], counts[1:]):
        if count != counts[0]:
            raise InputError(f"{path}: {count} lines, but {candidates} has {counts[0]}; "
                             "line-aligned files need the same number of lines")
    return counts[0]


def iter_aligned(candidates: str, references: Sequence[str] = (), sources: str | None = None,
                 report: ConversionReport | None = None, *, max_record_bytes: int = MAX_RECORD_BYTES,
                 counted: bool = False) -> Iterator[Item]:
    """Line-aligned text files: line i of `candidates` is the text, line i of each references
    file one of its references, line i of `sources` its source. All files need the same
    number of lines (`count_aligned`, before the first row, unless `counted` says a scan has
    just done it; a file that ran short since is then an error naming it)."""
    if not counted:
        count_aligned(candidates, references, sources, max_record_bytes)
    refs = [_aligned_lines(path, max_record_bytes) for path in references]
    srcs = _aligned_lines(sources, max_record_bytes) if sources else None
    index = -1
    for text, size in _aligned_lines(candidates, max_record_bytes):  # no enumerate: its tuple would keep the line
        index += 1
        slot: list[dict[str, Any]] = [{"doc_id": str(index), "text": text}]
        del text  # as in `iter_jsonl`: this frame keeps no reference to the row it yields
        if refs:
            pairs = [_next_aligned(lines, path, index) for lines, path in zip(refs, references)]
            slot[0]["references"] = [line for line, _ in pairs]
            size += sum(n for _, n in pairs)
            del pairs
        if srcs is not None:
            slot[0]["source"], extra = _next_aligned(srcs, sources, index)
            size += extra
        if report is not None:
            report.rows_read += 1
        yield index + 1, slot.pop(), size


def _next_aligned(lines: Iterator[tuple[str, int]], path, index: int) -> tuple[str, int]:
    item = next(lines, None)
    if item is None:
        raise InputError(f"{path}: ended at line {index} while it was read, but had as many lines as the candidates "
                         "when they were counted (was it changed during the conversion?)")
    return item


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

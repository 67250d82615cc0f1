"""Reading a Parquet file through a Python file object (an fsspec handle) on the calling thread.

`pq.read_table(handle, use_threads=False, pre_buffer=False)` still goes through Arrow's
dataset scanner, which decodes each row group as a task on Arrow's CPU thread pool (measured
with pyarrow 26: one pool worker is started by every such read). That task reads through the
Python file, so it holds Arrow buffers that wrap Python bytes and a reference to the Python
file; whichever thread drops the last of them must take the GIL. When the task's leftovers are
dropped on the pool thread after the read returned, and the main thread is already finalising
the interpreter (a command that fails right after a read), CPython ends that thread with
`pthread_exit` inside a C++ destructor and the process aborts: `terminate called without an
active exception`, exit 134, after the command printed its correct error.

`pq.ParquetFile(...).read(use_threads=False)` with `pre_buffer=False` decodes synchronously on
the calling thread and starts no pool thread, so nothing that needs the GIL outlives the read.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq


def read_parquet_here(source: Any, columns: Sequence[str] | None = None,
                      read_dictionary: Sequence[str] | None = None) -> pa.Table:
    """The whole table (or `columns`, in that order) of the Parquet file `source` (a path or
    a Python file object), decoded on this thread; `read_dictionary` columns come back
    dictionary-encoded, as with `pq.read_table`."""
    parquet = pq.ParquetFile(source, pre_buffer=False, read_dictionary=read_dictionary)
    return parquet.read(columns=list(columns) if columns is not None else None, use_threads=False)


def row_places(path) -> Callable[[int], tuple[str, int]]:
    """For a local Parquet file or folder read whole as one table (`pq.read_table`): the file
    and the row in it (from 0) of the table's row `row`, so that a message names a row where it
    is stored; a file is itself. Only the folder's footers are read (row counts), once."""
    import bisect
    import pathlib

    if not pathlib.Path(path).is_dir():
        return lambda row: (str(path), int(row))
    files = pq.ParquetDataset(str(path)).files  # the order read_table joins them in
    starts, total = [], 0
    for name in files:
        starts.append(total)
        total += pq.ParquetFile(name).metadata.num_rows

    def place(row: int) -> tuple[str, int]:
        k = bisect.bisect_right(starts, int(row)) - 1
        return files[k], int(row) - starts[k]

    return place

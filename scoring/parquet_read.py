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

from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq


def read_parquet_here(source: Any, columns: Sequence[str] | None = None,
                      read_dictionary: Sequence[str] | None = None) -> pa.Table:
    """The whole table (or `columns`, in that order) of the Parquet file `source` (a path or
    a Python file object), decoded on this thread; `read_dictionary` columns come back
    dictionary-encoded, as with `pq.read_table`."""
    parquet = pq.ParquetFile(source, pre_buffer=False, read_dictionary=read_dictionary)
    return parquet.read(columns=list(columns) if columns is not None else None, use_threads=False)

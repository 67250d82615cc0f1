"""The ids a conversion has written so far, kept compact: what finds a duplicate id across
batches (docs/convert.md, "Memory").

A Python set of the id strings grows by the strings themselves and about 60 bytes each besides.
`SeenIds` keeps, per id, a 64-bit digest and where the id lies in a spill file (its length and
UTF-8 bytes, on disk, in the system's temp folder): 16 bytes of memory per id, whatever its
length (32 while the two largest runs are merged). Digests are kept in sorted runs
(numpy arrays, merged as they grow, so a batch of ids is looked up with one binary search a run).
A digest found in a run only makes an id a candidate: the id is compared with the stored ids of
that digest, read back from the spill file, so a hash collision never makes a false duplicate
and never hides a real one.
"""

from __future__ import annotations

import tempfile
from typing import Callable, Iterable, Sequence

import numpy as np

_LENGTH = 8  # bytes of the length before each id in the spill file


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class SeenIds:
    """A set of ids, added and looked up a batch at a time. `digest` is a 64-bit digest of an id:
    Python's string hash by default (keyed per process, which is all one conversion needs);
    tests give one that collides often."""

    def __init__(self, digest: Callable[[str], int] = hash):
        self.digest = digest
        self.runs: list[tuple[np.ndarray, np.ndarray]] = []  # (digests sorted, their ids' offsets in the spill file)
        self.count = 0
        self.end = 0  # of the spill file
        self.spill = None  # opened with the first id

    def __len__(self) -> int:
        return self.count

    def _digests(self, ids: Sequence[str]) -> np.ndarray:
        return np.fromiter(map(self.digest, ids), dtype=np.int64, count=len(ids))

    def seen(self, ids: Sequence[str]) -> set[str]:
        """The ids among `ids` that were added before."""
        if not ids or not self.count:
            return set()
        digests = self._digests(ids)
        order = np.argsort(digests)
        digests = digests[order]  # sorted keys: a binary search starts where the last one ended
        found: set[str] = set()
        for run, offsets in self.runs:
            low = np.searchsorted(run, digests, side="left")
            high = np.searchsorted(run, digests, side="right")
            for index in np.flatnonzero(high > low):
                text = ids[order[index]]
                if text not in found and self._stored(text, offsets[low[index]:high[index]]):
                    found.add(text)
        return found

    def _stored(self, text: str, offsets: np.ndarray) -> bool:
        """Whether one of the ids at `offsets` (all of `text`'s digest) is `text` itself."""
        wanted = _encoded(text)
        for offset in offsets:
            self.spill.seek(int(offset))
            size = int.from_bytes(self.spill.read(_LENGTH), "little")
            if size == len(wanted) and self.spill.read(size) == wanted:
                return True
        return False

    def add(self, ids: Iterable[str]) -> None:
        """Adds ids not added before (the caller has checked with `seen`)."""
        ids = list(ids)
        if not ids:
            return
        if self.spill is None:
            self.spill = tempfile.TemporaryFile()
        data = [_encoded(text) for text in ids]
        sizes = np.fromiter((len(d) for d in data), dtype=np.int64, count=len(data))
        ends = self.end + np.cumsum(sizes + _LENGTH)
        offsets = ends - sizes - _LENGTH
        self.spill.seek(self.end)
        self.spill.write(b"".join(size.to_bytes(_LENGTH, "little") + d for size, d in zip(sizes.tolist(), data)))
        self.end = int(ends[-1])
        del data
        digests = self._digests(ids)
        order = np.argsort(digests, kind="stable")
        self.runs.append((digests[order], offsets[order]))
        self.count += len(ids)
        # merge while the last run is at least half its neighbour: about log2(ids / batch) runs
        while len(self.runs) > 1 and 2 * len(self.runs[-1][0]) >= len(self.runs[-2][0]):
            (a, a_at), (b, b_at) = self.runs.pop(-2), self.runs.pop()
            both = np.concatenate([a, b])
            order = np.argsort(both, kind="stable")
            self.runs.append((both[order], np.concatenate([a_at, b_at])[order]))
            del both, order

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()
            self.spill = None

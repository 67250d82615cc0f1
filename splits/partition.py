"""Corpus → Parquet partitions per split: train, in-distribution test, compositional test.

Rows whose attribute combination is unseen form the compositional test; rows of seen
combinations are train, except a stable hash-chosen `iid_fraction` of them (keyed by the
row's `id`, else its position, and the seed) that forms the in-distribution test. The row
order of the corpus is kept inside each partition.

Layout: `DIR/<protocol>_<NN>/{train,test_iid,test_comp}.parquet` and `DIR/manifest.json`
(row counts, the splits' signature, the partition parameters). The folder name is made safe
(`scoring.file_names`: a protocol such as `../x` from a splits file stays inside DIR), and every
file is written by temp file and rename (`scoring.atomic_files`: a symlink there is replaced).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

from scoring import atomic_files
from scoring.display_names import quoted_list
from scoring.file_names import FileNames, safe_name
from splits.aspects import SplitsInputError, corpus_rows, read_corpus_table

PARTS = ("train", "test_iid", "test_comp")


def _iid_mask(keys: Sequence[str | bytes], fraction: float, seed: int) -> np.ndarray:
    """Which rows go to the in-distribution test: sha256 of "<seed>:<key>" in UTF-8; a key given
    as bytes (an id that is not valid UTF-8) is hashed as those bytes, never decoded."""
    if fraction <= 0:
        return np.zeros(len(keys), dtype=bool)
    out = np.empty(len(keys), dtype=bool)
    for i, key in enumerate(keys):
        raw = key if isinstance(key, bytes) else str(key).encode("utf-8")
        h = hashlib.sha256(f"{seed}:".encode("utf-8") + raw).digest()
        out[i] = int.from_bytes(h[:8], "big") / 2.0**64 < fraction
    return out


def _row_ids(table, rows: np.ndarray) -> list[str | bytes]:
    """The `id` of each of `rows` (their position where the corpus has no `id` column): a string
    id as its bytes (valid UTF-8 or not: it only seeds a hash), any other as its text."""
    import pyarrow as pa

    from scoring.utf8_text import binary_as_text

    if "id" not in table.column_names:
        return [str(int(r)) for r in rows]
    ids = binary_as_text(table.column("id").take(pa.array(rows, pa.int64())))
    if pa.types.is_dictionary(ids.type):
        ids = ids.cast(ids.type.value_type)
    if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type):
        binary = pa.large_binary() if pa.types.is_large_string(ids.type) else pa.binary()
        return ids.cast(binary).to_pylist()  # raw bytes: nothing decoded
    return [str(v) for v in ids.to_pylist()]


def row_keys_of(table, aspects: Sequence[str], rows: Sequence[Mapping[str, str]], source: str) -> list[tuple[str, ...]]:
    keys = []
    for r, d in enumerate(rows):
        missing = [a for a in aspects if a not in d]
        if missing:
            raise SplitsInputError(f"{source}: row {r}: no value for aspect(s) {quoted_list(missing)}")
        keys.append(tuple(d[a] for a in aspects))
    return keys


def partition_corpus(corpus: str | pathlib.Path, splits_json: Mapping[str, Any], out_dir: str | pathlib.Path,
                     iid_fraction: float = 0.1, seed: int = 0, aspect_columns: Sequence[str] | None = None) -> dict[str, Any]:
    """Write the partitions of `corpus` for every split in `splits_json` (the `to_json()` form)."""
    import pyarrow.parquet as pq

    if not 0 <= iid_fraction < 1:
        raise SplitsInputError(f"iid_fraction must be in [0, 1), got {iid_fraction}")
    table = read_corpus_table(corpus)
    splits = splits_json.get("splits")
    if not isinstance(splits, list):
        raise SplitsInputError("splits JSON has no top-level 'splits' list")
    aspects = list(splits_json.get("aspects") or (splits[0]["seen"][0].keys() if splits and splits[0]["seen"] else []))
    if aspect_columns is None and "attributes" not in table.column_names:
        aspect_columns = aspects
    found = corpus_rows(table, aspect_columns, source=str(corpus))  # rows whose aspect is not UTF-8: in no part
    keys = row_keys_of(table, aspects, found.rows, str(corpus))
    iid = _iid_mask(_row_ids(table, found.kept), iid_fraction, seed)
    protocol = (splits_json.get("signature") or {}).get("protocol", "split")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"corpus": str(corpus), "iid_fraction": iid_fraction, "seed": seed,
                                "signature": splits_json.get("signature"), "rows": found.account, "splits": []}
    all_combos = set(keys)
    folders = FileNames(["manifest.json"])  # the protocol comes from the splits file: a name, never a path
    for n, split in enumerate(splits):
        seen = {tuple(c[a] for a in aspects) for c in split["seen"]}
        unseen = {tuple(c[a] for a in aspects) for c in split["unseen"]}
        unknown = all_combos - seen - unseen
        if unknown:
            raise SplitsInputError(f"{corpus}: combination(s) {', '.join('(' + quoted_list(c) + ')' for c in sorted(unknown)[:3])} are in neither side of split {n}")
        is_seen = np.fromiter((k in seen for k in keys), dtype=bool, count=len(keys))
        masks = {"train": is_seen & ~iid, "test_iid": is_seen & iid, "test_comp": ~is_seen}
        folder = out / folders.claim(safe_name(f"{protocol}_{n:02d}"))
        if folder.is_symlink():  # replaced, never followed
            folder.unlink()
        folder.mkdir(exist_ok=True)
        counts = {}
        for part in PARTS:
            idx = found.kept[masks[part]]
            rows = table.take(idx)
            atomic_files.write_with(folder / f"{part}.parquet", lambda handle, rows=rows: pq.write_table(rows, handle))
            counts[part] = int(idx.size)
        manifest["splits"].append({"folder": folder.name, "divergence": split.get("divergence"), "rows": counts})
    atomic_files.write_text(out / "manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False, default=str))
    return manifest

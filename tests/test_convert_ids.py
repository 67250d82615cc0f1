"""The ids a conversion has written, kept compact (`ctgscore.convert.seen_ids`): exact whatever
the digests (a collision never makes a false duplicate or hides a real one), the same drops as a
set of strings, and a fraction of a set's memory."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from ctgscore import convert
from ctgscore.convert import rows as rows_module
from ctgscore.convert.seen_ids import SeenIds


def _colliding(text: str) -> int:
    """A digest that gives most ids the digest of another: three values in all."""
    return len(text) % 3


@pytest.mark.parametrize("digest", [hash, _colliding, lambda text: 7])
def test_seen_ids_match_a_set_of_strings(digest):
    rng = random.Random(1)
    pool = [f"id{i}" for i in range(300)] + ["", "é", "\U0001f600", "id1\x00", "ID1"]
    seen, model = SeenIds(digest=digest), set()
    for _ in range(40):
        batch = list(dict.fromkeys(rng.choices(pool, k=rng.randint(0, 25))))  # no id twice in one batch
        assert seen.seen(batch) == model & set(batch)
        new = [i for i in batch if i not in model]
        seen.add(new)
        model.update(new)
        assert len(seen) == len(model)
    assert seen.seen(pool) == model
    assert len(seen.runs) <= 8  # runs merge as they grow
    seen.close()


def test_seen_ids_take_a_fraction_of_a_sets_memory():
    def grow(container, add):
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for batch in range(10):
                add(container, [f"system-a:document-{batch:03d}-{i:06d}" for i in range(10_000)])
            return tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()

    compact = grow(SeenIds(), SeenIds.add)
    strings = grow(set(), set.update)
    assert compact < 24 * 100_000  # 16 bytes an id (a digest and an offset), and a little
    assert strings > 4 * compact


def _jsonl(tmp_path, ids):
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"t{n}"}) + "\n" for n, i in enumerate(ids)), encoding="utf-8")
    return src


@pytest.mark.parametrize("max_rows", [1, 3, 1000])
def test_duplicates_are_the_same_whatever_the_digests_collide(tmp_path, monkeypatch, max_rows):
    rng = random.Random(2)
    ids = [f"r{rng.randint(0, 60)}" for _ in range(200)]
    src = _jsonl(tmp_path, ids)
    first = {}
    for number, i in enumerate(ids, 1):
        first.setdefault(i, number)
    duplicates = [n for n, i in enumerate(ids, 1) if first[i] != n]
    assert duplicates  # the file does hold duplicates

    table, report = convert.convert_file(str(src), max_rows=max_rows)
    monkeypatch.setattr(rows_module, "SeenIds", lambda: SeenIds(digest=_colliding))
    colliding, colliding_report = convert.convert_file(str(src), max_rows=max_rows)

    assert table.column("id").to_pylist() == list(first)  # the first row of each id, in order
    assert colliding.equals(table)
    assert report.dropped == colliding_report.dropped == {"duplicate id (the first row with it is kept)": len(duplicates)}
    assert report.examples == colliding_report.examples
    assert report.examples["duplicate id (the first row with it is kept)"] == duplicates[:len(
        report.examples["duplicate id (the first row with it is kept)"])]


def test_drops_and_warnings_keep_their_order_in_a_batch(tmp_path):
    """Ids are looked up for the whole batch at once; the report still gives each row's drop or
    warnings in row order, as when each row was checked in turn."""
    lines = [{"id": "a", "text": "x", "human_q": "bad"}, {"id": "a", "text": "y"}, {"id": "b"},
             {"id": "b", "text": "z", "human_q": "worse"}, {"id": "a", "text": "w", "human_q": "NaN"}]
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(line) + "\n" for line in lines))
    table, report = convert.convert_file(str(src))
    assert table.column("id").to_pylist() == ["a", "b"]
    assert list(report.dropped) == ["duplicate id (the first row with it is kept)", "no text"]
    assert report.examples == {"duplicate id (the first row with it is kept)": [2, 5], "no text": [3]}
    assert list(report.warnings) == ["human_q: 'bad' is not a number (kept as null)",
                                     "human_q: 'worse' is not a number (kept as null)",
                                     "human_q: 'NaN' is not a finite number (kept as null)"]

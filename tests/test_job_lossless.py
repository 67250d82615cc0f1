"""Nothing lost without a word (`docs/job.md`, "Guarantees"), attacked with dumps a stranger
could send. One job run over many hostile shards at once, then every input row is looked up
by (file, row index) and by id: each good shard's rows come out once, in order, under its own
folder, scored or with an error or skip reason; each bad shard is named with its reason; the
manifest's counts add up. Then the nightly path: shards edited, renamed, renamed and edited,
copied, shrunk, deleted and added between two runs; every row of the second run equals a run
from scratch, the reuse report names the folders that actually supplied rows, and no row of a
deleted shard is left behind."""

from __future__ import annotations

import json
import pathlib
import unicodedata

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.registry import build_metric
from tests.job_support import equal_size_bytes

LABELS = ("text_stats", "codi", "chrf")
SCORE_COLUMNS = {"text_stats": "text_stats_words", "codi": "codi_success", "chrf": "chrf"}
LENGTH = json.dumps({"task": "length", "label": [1, 8]})


def _write(folder: pathlib.Path, rel: str, table: pa.Table, **options) -> pathlib.Path:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **options)
    return path


def _texts(prefix: str, n: int) -> pa.Table:
    return pa.table({"id": [f"{prefix}{i}" for i in range(n)], "text": [f"the {prefix} cat sat {i}" for i in range(n)]})


def _empty_groups_shard(path: pathlib.Path) -> None:
    """Rows in row groups with empty ones between them."""
    schema = pa.schema([("id", pa.string()), ("text", pa.string())])
    empty = schema.empty_table()
    with pq.ParquetWriter(path, schema) as writer:
        for table in (empty, _texts("z", 3), empty, empty, _texts("y", 2), empty):
            writer.write_table(table)


def _corrupt_last_group(path: pathlib.Path, column: int = 1) -> None:
    """Overwrite the data pages of the last row group's `text` (or another column): the footer
    stays readable, the rows of that group do not."""
    chunk = pq.read_metadata(path).row_group(pq.read_metadata(path).num_row_groups - 1).column(column)
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset:chunk.data_page_offset + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))


def _hostile_dump(folder: pathlib.Path) -> dict[str, str]:
    """Writes the dump; returns {rel: what its bad-shard reason says} for the shards to refuse."""
    nfc, nfd = unicodedata.normalize("NFC", "é"), unicodedata.normalize("NFD", "é")
    _write(folder, "plain.parquet", _texts("p", 5))
    # the same ids in two shards (noted, both scored); names with a space, '#', '?', '%', unicode
    _write(folder, "cross a.parquet", _texts("x", 3))
    _write(folder, "sub dir/cross#b?.parquet", _texts("x", 4))
    # ids that differ only after normalisation or trimming, and an empty id: all distinct, all kept
    _write(folder, "ünï 100%.parquet", pa.table({"id": ["", nfc, nfd, "k", " k", "k "],
                                                 "text": ["a b", "c d", "e f", "g h", "i j", "k l"]}))
    # schema drift that is still the canonical types: dictionary-encoded strings (a pandas category),
    # large_string, an int human judgment, an extra column, nulls inside references, no optional columns
    _write(folder, "dict.parquet", pa.table({"id": pa.array(["d0", "d1", "d2"]).dictionary_encode(),
                                             "text": pa.array(["one two", "one two", "three"]).dictionary_encode(),
                                             "system": pa.array(["s", "s", "t"]).dictionary_encode()}))
    _write(folder, "large.parquet", pa.table({"id": pa.array(["l0"], pa.large_string()),
                                              "text": pa.array(["x y z"], pa.large_string()),
                                              "references": pa.array([["x y"]], pa.large_list(pa.large_string()))}))
    _write(folder, "human.parquet", pa.table({"id": ["h0", "h1"], "text": ["a", "b"],
                                              "human_quality": pa.array([3, None], pa.int64()),
                                              "extra": pa.array([[1], None], pa.list_(pa.int64()))}))
    _write(folder, "refs.parquet", pa.table({"id": ["r0", "r1", "r2"], "text": ["a b", "c", "d e"],
                                             "references": pa.array([["a b", None], None, ["d e"]], pa.list_(pa.string()))}))
    # rows a metric refuses: null and empty text, an over-long cell, constraints that are not JSON
    _write(folder, "cells.parquet", pa.table({
        "id": ["c0", "c1", "c2", "c3", "c4", "c5", "c6"],
        "text": ["one two three", None, "", "w " * 3000, "a b", "c d", "e f"],
        "constraint": [LENGTH, LENGTH, LENGTH, LENGTH, "{not json", "[" * 100 + "]" * 100, None]}))
    _empty_groups_shard(folder / "groups.parquet")
    with pq.ParquetWriter(folder / "footer only.parquet", pa.schema([("id", pa.string()), ("text", pa.string())])):
        pass  # no row group at all
    _write(folder, "part rows.parquet", _texts("q", 6), row_group_size=2, compression="NONE", use_dictionary=False)
    # shards to refuse, each with a reason
    _write(folder, "dup.parquet", pa.table({"id": ["a", "b", "a"], "text": ["x", "y", "z"]}))
    _write(folder, "null id.parquet", pa.table({"id": ["a", None], "text": ["x", "y"]}))
    _write(folder, "int id.parquet", pa.table({"id": pa.array([1, 2], pa.int64()), "text": ["x", "y"]}))
    _write(folder, "int dataset.parquet", pa.table({"id": ["i0"], "text": ["x"], "dataset": pa.array([3], pa.int64())}))
    _write(folder, "string human.parquet", pa.table({"id": ["s0"], "text": ["x"], "human_quality": ["3"]}))
    _write(folder, "string refs.parquet", pa.table({"id": ["t0"], "text": ["x"], "references": ["a reference"]}))
    (folder / "empty.parquet").write_bytes(b"")
    (folder / "csv.parquet").write_text("id,text\n1,a\n")
    truncated = _write(folder, "truncated.parquet", _texts("t", 4))
    truncated.write_bytes(truncated.read_bytes()[:-30])
    corrupt = _write(folder, "mid corrupt.parquet", pa.table({"id": [f"m{i}" for i in range(6)],
                                                             "text": [f"text number {i} " * 20 for i in range(6)]}),
                     row_group_size=2, compression="NONE", use_dictionary=False)
    _corrupt_last_group(corrupt)
    (folder / "notes.txt").write_text("not a shard")  # not *.parquet: not an input
    for name in ("upper.PARQUET", "_hidden.parquet", ".dot.parquet", "sub dir/short.parq"):  # named like shards: noted
        _write(folder, name, _texts("n", 2))
    return {"dup.parquet": "duplicate id 'a'", "null id.parquet": "null field 'id'",
            "int id.parquet": "column 'id' has type int64", "int dataset.parquet": "column 'dataset' has type int64",
            "string human.parquet": "column 'human_quality' has type string",
            "string refs.parquet": "column 'references' has type string", "empty.parquet": "unreadable Parquet",
            "csv.parquet": "unreadable Parquet", "truncated.parquet": "unreadable Parquet",
            "mid corrupt.parquet": "(while scoring)"}


def _parts(folder: pathlib.Path) -> list[tuple[dict[str, str], pa.Table]]:
    """A shard folder's parts in row order: (their ctgscore footer entries, rows)."""
    found = []
    for path in sorted(folder.glob("part-*.parquet")):
        meta = {k.decode(): v.decode() for k, v in (pq.read_metadata(path).metadata or {}).items()}
        found.append(({k: v for k, v in meta.items() if k.startswith("ctgscore.")}, pq.read_table(path)))
    return found


def _shard_output(out: pathlib.Path, label: str, rel: str, scored_from: str | None = None) -> list[dict]:
    """One shard's output rows, checked to tile its rows from 0 and to name it in every footer
    (or `scored_from`: parts copied from a shard of the same bytes keep their footers)."""
    rows: list[dict] = []
    for meta, table in _parts(out / label / rel[: -len(".parquet")]):
        assert meta["ctgscore.input"] in (rel, scored_from) and int(meta["ctgscore.start"]) == len(rows), (label, rel, meta)
        assert int(meta["ctgscore.stop"]) - int(meta["ctgscore.start"]) == table.num_rows, (label, rel, meta)
        rows.extend(table.to_pylist())
    return rows


def _assert_counts_add_up(report: dict, rows: list[dict], label: str) -> None:
    scores = [c for c in build_metric(label, {}).output_columns]
    errors = [row for row in rows if row["error"] is not None]
    skipped = [row for row in rows if row["skipped"] and all(row[c] is None for c in scores)]
    assert report["rows_in"] == report["rows_out"] == len(rows), (label, report)
    assert report["rows_scored"] + report["rows_cached"] == report["rows_out"], (label, report)
    assert report["rows_error"] == len(errors) == sum(report["error_reasons"].values()), (label, report)
    assert report.get("rows_skipped", 0) == len(skipped), (label, report)
    for row in rows:  # each row: a score, an error reason, or a skip reason
        assert any(row[c] is not None for c in scores) or row["error"] or row["skipped"], (label, row)


def _job(folder, out, labels, ray_address, **extra):
    from ray_jobs.config import parse_config

    return parse_config({"input": str(folder), "output": str(out), "progress": False, "part_rows": 2,
                         "metrics": [{"name": label} for label in labels], "skip_bad_shards": True,
                         "limits": {"max_cell_bytes": 4000}, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
                         "ray": {"address": ray_address}, **extra})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_row_of_a_hostile_dump_comes_out_scored_or_with_a_reason(ray_local, ray_address, tmp_path):
    from ray_jobs.job.manifest import summary_line
    from ray_jobs.job.report import KEPT_ERRORS
    from ray_jobs.score_corpus import run_job

    folder, out = tmp_path / "in dump#1", tmp_path / "out"
    refused = _hostile_dump(folder)
    manifest = run_job(_job(folder, out, LABELS, ray_address))

    bad = {item["file"][len(str(folder)) + 1:]: item["error"] for item in manifest["bad_shards"]}
    assert set(bad) == set(refused), bad
    for rel, reason in refused.items():
        assert reason in bad[rel], (rel, bad[rel])
    good = {f["file"][len(str(folder)) + 1:]: f["rows"] for f in manifest["input"]["files"]}
    not_read = [uri[len(str(folder)) + 1:] for uri in manifest["inputs_not_read"]]
    assert sorted(not_read) == sorted([".dot.parquet", "_hidden.parquet", "sub dir/short.parq", "upper.PARQUET"])
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != "notes.txt")
    assert sorted([*good, *bad, *not_read]) == files  # every file is an input, good or bad, or said not to be
    assert good["footer only.parquet"] == 0 and good["groups.parquet"] == 5
    assert manifest["duplicate_ids_across_shards"]["count"] == 3

    inputs = {rel: pq.read_table(folder / rel).to_pylist() for rel in good}
    by_id: dict[str, list[tuple[str, int]]] = {}
    for rel, rows in inputs.items():
        for index, row in enumerate(rows):
            by_id.setdefault(row["id"], []).append((rel, index))
    for label in LABELS:
        everything = []
        for rel, rows in inputs.items():
            got = _shard_output(out, label, rel)
            # by (file, row index): the same ids in input order, so no row lost, doubled or moved
            assert [row["id"] for row in got] == [row["id"] for row in rows], (label, rel)
            for index, row in enumerate(got):
                everything.append(((rel, index), row))
        ids = {}
        for where, row in everything:
            ids.setdefault(row["id"], []).append(where)
        assert ids == by_id, label  # by id: each id where the input has it, as often
        _assert_counts_add_up(manifest["metrics"][label], [row for _, row in everything], label)
        for sample in manifest["metrics"][label]["error_samples"]:  # an error names its file and row
            rel = sample["file"][len(str(folder)) + 1:]
            assert inputs[rel][sample["row"]]["id"] == sample["id"], (label, sample)
        assert {o["input"] for o in manifest["metrics"][label]["outputs"]} == {str(folder / rel) for rel in good}
        # no bad shard had output before: none is kept, and none of the half-scored one is left behind
        assert manifest["metrics"][label]["kept_for_bad_shards"] == [] and not list((out / label).glob("mid corrupt/*"))

    text_stats = build_metric("text_stats", {})  # the scores belong to the rows they sit beside
    for rel, rows in inputs.items():
        got = _shard_output(out, "text_stats", rel)
        for row, result in zip(rows, text_stats.score_rows(rows)):
            mine = next(r for r in got if r["id"] == row["id"])
            if result.get("error") is None and row["text"] and len(row["text"]) < 4000:
                assert mine["text_stats_words"] == pytest.approx(result["text_stats_words"]), (rel, row["id"])
    cells = {row["id"]: row for row in _shard_output(out, "codi", "cells.parquet")}
    assert "max_cell_bytes" in cells["c3"]["error"] and "not JSON" in cells["c4"]["error"]
    assert "max_json_depth" in cells["c5"]["error"] and cells["c6"]["skipped"] and cells["c0"]["codi_success"] == 1.0
    dictionary = _shard_output(out, "text_stats", "dict.parquet")
    assert [row["system"] for row in dictionary] == ["s", "s", "t"]
    assert [row["human_quality"] for row in _shard_output(out, "chrf", "human.parquet")] == [3.0, None]
    refs = {row["id"]: row for row in _shard_output(out, "chrf", "refs.parquet")}
    assert "null reference" in refs["r0"]["error"] and refs["r1"]["skipped"] and refs["r2"]["chrf"] is not None
    line = summary_line(manifest)
    assert f"{len(refused)} bad shard(s) skipped" in line and "3 id(s) in more than one shard" in line
    assert "4 file(s) named like Parquet not read" in line

    again = run_job(_job(folder, out, LABELS, ray_address))  # nothing changed: every count from the kept parts
    assert {item["file"]: item["error"] for item in again["bad_shards"]} == {
        item["file"]: item["error"] for item in manifest["bad_shards"]}
    for label in LABELS:
        report = again["metrics"][label]
        assert report["rows_scored"] == 0 and report["parts_written"] == 0, (label, report)
        rows = [row for rel in inputs for row in _shard_output(out, label, rel)]
        assert report["rows_error"] == manifest["metrics"][label]["rows_error"], label
        _assert_counts_add_up(report, rows, label)
        assert report["error_reasons"] == ({KEPT_ERRORS: report["rows_error"]} if report["rows_error"] else {}), label
        assert not list((out / label).glob("mid corrupt/*"))


def _sized(texts: list[str], prefix: str) -> bytes:
    return equal_size_bytes(pa.table({"id": [f"{prefix}{i}" for i in range(len(texts))], "text": texts}))


def _rotate(text: str) -> str:
    return text[1:] + text[:1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_nightly_rerun_after_edits_renames_copies_and_deletes_equals_a_run_from_scratch(ray_local, ray_address,
                                                                                      tmp_path):
    """Between two runs: one shard unchanged, one copied under a second name, one renamed, one
    edited (a row changed, two added), one shrunk, one deleted, one added, one given a duplicate
    id (bad: its earlier output kept as it was and listed), and two shards of
    one size both renamed AND edited (one row each, the same size: another version, so no copy;
    both old folders are lent to each as its row cache). The second run (with prune) scores only
    the changed rows, names as lenders only the folders rows came from, leaves no part of a
    deleted or renamed shard, and every row equals a run from scratch."""
    from ray_jobs.job.manifest import summary_line
    from ray_jobs.score_corpus import run_job

    folder, out, scratch = tmp_path / "in", tmp_path / "out", tmp_path / "scratch"
    folder.mkdir()
    words = "red blue green tree house river cat dog mat sun".split()
    base = [f"{words[i]} {words[(3 * i + 1) % 10]} number {i}" for i in range(10)]
    _write(folder, "keep.parquet", _texts("k", 10))
    _write(folder, "edit.parquet", pa.table({"id": [f"e{i}" for i in range(10)], "text": base}))
    _write(folder, "shrink.parquet", _texts("s", 10))
    _write(folder, "gone.parquet", _texts("g", 4))
    _write(folder, "moved.parquet", _texts("m", 5))
    _write(folder, "dup later.parquet", _texts("d", 4))
    twins = {"a": base[:8], "b": [text[::-1] for text in base[:8]]}
    for name, texts in twins.items():
        (folder / f"old-{name}.parquet").write_bytes(_sized(texts, name))
    first = run_job(_job(folder, out, ("text_stats",), ray_address))
    assert first["metrics"]["text_stats"]["rows_scored"] == 59
    dup_folder = out / "text_stats" / "dup later"
    dup_parts = {p.name: p.stat().st_mtime_ns for p in dup_folder.iterdir()}

    edited = pa.table({"id": [f"e{i}" for i in range(12)],
                       "text": [*base[:3], "an edited row", *base[4:], "added one", "added two"]})
    _write(folder, "edit.parquet", edited)
    _write(folder, "shrink.parquet", _texts("s", 10).slice(0, 6))
    (folder / "gone.parquet").unlink()
    (folder / "moved.parquet").rename(folder / "moved here.parquet")
    (folder / "keep copy.parquet").write_bytes((folder / "keep.parquet").read_bytes())
    _write(folder, "added.parquet", _texts("n", 5))
    _write(folder, "dup later.parquet", pa.table({"id": ["d0", "d1", "d0"], "text": ["a", "b", "c"]}))  # now bad
    for name, texts in twins.items():
        (folder / f"old-{name}.parquet").unlink()
        changed = [*texts[:5], _rotate(texts[5]), *texts[6:]]
        (folder / f"new-{name}.parquet").write_bytes(_sized(changed, name))
        assert (folder / f"new-{name}.parquet").stat().st_size == len(_sized(texts, name))
    again = run_job(_job(folder, out, ("text_stats",), ray_address, prune=True))
    fresh = run_job(_job(folder, scratch, ("text_stats",), ray_address))

    report = again["metrics"]["text_stats"]
    # scored: the edited row and two added (edit), one row each (new-a, new-b), the added shard
    assert (report["rows_in"], report["rows_scored"], report["rows_cached"]) == (64, 3 + 1 + 1 + 5, 54), report
    root = out / "text_stats"
    assert report["reused_by_content"] == {
        "keep copy.parquet": [str(root / "keep")], "moved here.parquet": [str(root / "moved")],
        "new-a.parquet": [str(root / "old-a")], "new-b.parquet": [str(root / "old-b")]}, report["reused_by_content"]
    line = summary_line(again)
    assert f"new-a.parquet from {root / 'old-a'}," in line and f" or {root}" not in line
    rels = [f["file"][len(str(folder)) + 1:] for f in again["input"]["files"]]
    [bad] = again["bad_shards"]
    assert bad["file"] == str(folder / "dup later.parquet") and "duplicate id 'd0'" in bad["error"]
    assert report["kept_for_bad_shards"] == [str(dup_folder)]  # its earlier output, listed for readers
    assert {p.name: p.stat().st_mtime_ns for p in dup_folder.iterdir()} == dup_parts  # as it was
    parts = [p for p in root.rglob("*.parquet") if p.parent != dup_folder]
    assert {str(p.parent.relative_to(root)) for p in parts} == {rel[: -len(".parquet")] for rel in rels}
    assert sum(pq.read_metadata(p).num_rows for p in parts) == 64  # no stale row of a deleted or renamed shard
    assert {pathlib.Path(uri).parent.name for uri in report["pruned_outputs"]} == {"gone", "moved", "old-a", "old-b"}
    copied = {"keep copy.parquet": "keep.parquet", "moved here.parquet": "moved.parquet"}
    for rel in rels:
        mine, theirs = _shard_output(out, "text_stats", rel, copied.get(rel)), _shard_output(scratch, "text_stats", rel)
        assert mine == theirs, rel  # ids, scores, errors, row keys, signature: as a run from scratch
        assert [row["id"] for row in mine] == pq.read_table(folder / rel, columns=["id"]).column("id").to_pylist()
    assert fresh["metrics"]["text_stats"]["rows_scored"] == 64


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_unchanged_shard_failing_half_way_under_a_new_signature_keeps_its_old_parts_as_they_were(
        ray_local, ray_address, tmp_path):
    """An unchanged shard scored again under a new signature writes parts of the names its
    folder holds. When it fails half way (its last row group's `constraint` is corrupt, and only
    the second run reads `constraint`, for codi), its folder keeps the first run's parts byte for
    byte, not half of them replaced; the good shard's parts are replaced under the same names."""
    from ray_jobs.score_corpus import run_job

    folder, out = tmp_path / "in", tmp_path / "out"
    for rel, prefix in (("good.parquet", "g"), ("mid.parquet", "m")):
        table = _texts(prefix, 6).append_column("constraint", pa.array([LENGTH] * 6))
        _write(folder, rel, table, row_group_size=2, compression="NONE", use_dictionary=False)
    _corrupt_last_group(folder / "mid.parquet", column=2)
    metrics = [{"name": "slow_length", "label": "len"}]
    first = run_job(_job(folder, out, (), ray_address, metrics=metrics))
    assert first["bad_shards"] == [] and first["metrics"]["len"]["rows_out"] == 12
    before = {label: {p.name: p.read_bytes() for p in (out / "len" / label).iterdir()} for label in ("good", "mid")}

    metrics = [{"name": "slow_length", "label": "len", "params": {"salt": 1}}, {"name": "codi"}]  # a new revision
    again = run_job(_job(folder, out, (), ray_address, metrics=metrics))
    [bad] = again["bad_shards"]
    assert bad["file"] == str(folder / "mid.parquet") and "(while scoring)" in bad["error"], bad
    report = again["metrics"]["len"]
    assert report["kept_for_bad_shards"] == [str(out / "len" / "mid")]
    assert {p.name: p.read_bytes() for p in (out / "len" / "mid").iterdir()} == before["mid"]  # as it was
    digests = {first["metrics"]["len"]["parts"]["good.parquet"]["digest"], report["parts"]["good.parquet"]["digest"]}
    assert len(digests) == 2  # the signature did change
    good = sorted((out / "len" / "good").iterdir())
    assert [p.name for p in good] == sorted(before["good"])  # the same names, nothing staged left
    assert {pq.read_metadata(p).metadata[b"ctgscore.signature_digest"].decode() for p in good} == {
        report["parts"]["good.parquet"]["digest"]}
    assert report["rows_out"] == 6 and report["parts_replaced"] == 0
    assert not list((out / "codi").glob("mid/*")) and again["metrics"]["codi"]["rows_out"] == 6


def test_rows_from_lent_folders_are_counted_per_folder_through_the_cpu_stage():
    """What the reuse report names comes from the workers: each row found in the row cache is
    counted for the folder of the part it came from (a later part's row replaces an earlier
    one's, and its folder with it), and the count crosses the CPU stage's payload intact."""
    from ray_jobs.incremental import RowCache
    from ray_jobs.job.rows import prepare_table, prepared_payload, read_prepared
    from scoring.text_stats import TextStatsMetric

    class Prepared(TextStatsMetric):  # a two-stage metric: its rows go through the CPU stage
        def prepare(self, rows):
            return pa.table({"n": pa.array([len(row["text"]) for row in rows], pa.int32())})

    metric = Prepared()
    table = pa.table({"id": ["a", "b", "c", "d", "e"], "text": ["one", "two", "three", "four", "five"]})
    rows = table.to_pylist()

    def part(picked):
        return pa.table({"row_key": [metric.row_key(row) for row in picked], "warning": pa.nulls(len(picked), pa.string()),
                         **{c: [1.0] * len(picked) for c in metric.output_columns}})

    cache = RowCache(None, metric.output_columns)
    cache.add(part(rows[:3]), source="/out/m/old-a")
    cache.add(part(rows[2:3]), source="/out/m/old-b")  # the same row in a later lender
    cache.add(part(rows[3:4]))  # a part of unknown folder
    ids, meta = read_prepared(prepared_payload(*prepare_table(metric, table, {"text"}, [], cache)))
    assert meta["cached"] == 4 and meta["lent"] == {"/out/m/old-a": 2, "/out/m/old-b": 1}
    assert meta["rows"] == [4] and ids.num_rows == 1  # only "five" is left to score


def test_a_dump_of_shards_named_otherwise_is_refused_naming_them(tmp_path):
    """No `*.parquet` shard, but files a person meant as shards: the error names them."""
    import fsspec

    from ray_jobs.config import parse_config
    from ray_jobs.job.errors import JobError
    from ray_jobs.job.plan import read_shards

    for name in ("PART-0.PARQUET", "part-1.pq"):
        _write(tmp_path / "in", name, _texts("a", 1))
    (tmp_path / "in" / "README.md").write_text("a dump")
    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"),
                           "metrics": [{"name": "text_stats"}]})
    with pytest.raises(JobError) as excinfo:
        read_shards(config, fsspec.filesystem("file"), ("text",))
    message = str(excinfo.value)
    assert message.startswith(f"no *.parquet shards under {tmp_path / 'in'} (2 file(s) named like Parquet not read")
    assert str(tmp_path / "in" / "PART-0.PARQUET") in message and "README" not in message and "\n" not in message

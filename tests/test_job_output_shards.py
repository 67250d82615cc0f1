"""The readers take every output the job writes: an id in two input shards is two rows, told
apart by their shard (`scoring.job_output`, docs/load_scores.md), in `load_scores`, `ctgscore
meta`, compare's partial sums and the CompMCTG join; and the job refuses input shards whose
output folders would be one folder on a case-insensitive disk (`ray_jobs.job.layout`)."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ctgscore
from ctgscore.cli.compare import plan_columns
from meta_eval.io import read_scores
from meta_eval.partials import PartialSpec, accumulate
from ray_jobs.config import parse_config
from ray_jobs.job import layout
from ray_jobs.storage import listing
from ray_jobs.storage.listing import ShardInfo, Shards
from scoring.errors import InputError, UsageError
from scoring.job_output import read_runs
from scoring.schema import output_table

# (shard, id, system, doc_id): r1 is in both shards, as the job allows
ROWS = {"a": [("r0", "A", "d0"), ("r1", "B", "d0"), ("r2", "A", "d1")],
        "sub/b": [("r1", "A", "d1"), ("r3", "B", "d1")]}
KEYS = [("r0", "a"), ("r1", "a"), ("r1", "sub/b"), ("r2", "a"), ("r3", "sub/b")]  # sorted by id, then shard


def _value(label: str, shard: str, row_id: str) -> float:
    """A distinct score per (run, shard, id), so a crossed join shows."""
    return {"ppl": 10.0, "words": 100.0, "only_a": 1000.0}[label] + 10 * (shard != "a") + int(row_id[1])


def _part(folder, label, shard, rows, column, errors=None, name="part-0000000000-0000000009-abc.parquet"):
    folder.mkdir(parents=True, exist_ok=True)
    ids = [r[0] for r in rows]
    errors = errors or {}
    results = [{column: _value(label, shard, i), "error": errors.get(i), "warning": None} for i in ids]
    table = output_table(ids, results, [column], f"metric:{label}|v:1", [f"k{i}" for i in ids],
                         {"system": [r[1] for r in rows], "doc_id": [r[2] for r in rows],
                          "human_q": [float(int(i[1]) + (shard != "a")) for i in ids]})
    pq.write_table(table, folder / name)


def _job_output(tmp_path, manifest=True):
    """Runs `ppl` and `words` over shards `a` and `sub/b`; `only_a` kept only shard a's output
    (as for a shard it could not read); one error row, in shard sub/b's r1 of `ppl`."""
    out = tmp_path / "out"
    runs = {"ppl": ("perplexity", ROWS), "words": ("words", ROWS), "only_a": ("extra", {"a": ROWS["a"]})}
    for label, (column, shards) in runs.items():
        for shard, rows in shards.items():
            errors = {"r1": "too long"} if (label, shard) == ("ppl", "sub/b") else None
            _part(out / label / shard, label, shard, rows, column, errors)
    if manifest:
        metrics = {label: {"outputs": [{"folder": f"/w/out/{label}/{shard}"} for shard in shards]}
                   for label, (_, shards) in runs.items()}
        (out / "manifest.json").write_text(json.dumps({"config": {"output": "/w/out"}, "metrics": metrics}))
    return out


def test_load_scores_keeps_both_rows_of_a_repeated_id_by_shard(tmp_path):
    out = _job_output(tmp_path)
    frame = ctgscore.load_scores(str(out))
    assert list(frame.columns) == ["id", "shard", "system", "doc_id", "human_q", "perplexity", "words", "extra",
                                   "error", "skipped"]
    assert list(zip(frame["id"], frame["shard"])) == KEYS
    for label, column in (("words", "words"), ("only_a", "extra")):
        want = [_value(label, s, i) if label != "only_a" or s == "a" else np.nan for i, s in KEYS]
        assert np.allclose(frame[column], want, equal_nan=True), column
    # the error blanks its own row's score only, and names its run
    assert frame["error"].tolist() == [None, None, "ppl: too long", None, None]
    assert frame["perplexity"].isna().tolist() == [False, False, True, False, False]
    assert frame["system"].tolist() == ["A", "B", "A", "A", "B"]  # each row's carried columns are its own
    # without a manifest (a run in progress, folders by hand) the same rows are read
    (out / "manifest.json").unlink()
    pd.testing.assert_frame_equal(ctgscore.load_scores(str(out)), frame, check_like=True)  # runs by name here
    # a subset of runs is keyed alike, and a run without repeats is keyed by id alone when read alone
    alone = ctgscore.load_scores(str(out), metrics=["only_a"])
    assert "shard" not in alone and alone["id"].tolist() == ["r0", "r1", "r2"]


def test_meta_and_compare_read_them_as_separate_rows(tmp_path, cli):
    out = _job_output(tmp_path)
    loaded = ctgscore.load_scores(str(out))
    table = read_scores(str(out))
    meta = table.frame
    assert list(zip(meta["id"], meta["shard"])) == KEYS and table.n_input_rows == 5 and table.n_error_rows == 1
    assert table.runs["perplexity"]["rows"] == 5 and table.runs["extra"]["rows"] == 3
    for column in ("perplexity", "words", "extra", "human_q"):
        assert np.allclose(meta[column], loaded[column], equal_nan=True), column

    # compare's partial sums (file by file) count both rows, as load_scores' rows give them
    columns, runs, items = plan_columns(str(out), ["perplexity", "words"])
    acc = accumulate(PartialSpec(runs=runs), items)
    assert acc.input_rows == 5 and acc.error_rows == 1
    for grid in acc.grids():
        for u, unit in enumerate(grid.units):
            for s, system in enumerate(grid.systems):
                rows = loaded[(loaded["doc_id"] == unit) & (loaded["system"] == system)][grid.column]
                assert np.isclose(grid.means[u, s], rows.mean() if len(rows) else np.nan, equal_nan=True)

    # `ctgscore meta` reads the job's output (it failed on the repeated id before): the sample-level
    # Pearson correlation is that of all five rows
    proc = cli(["--json", "meta", "-s", str(out), "-o", str(tmp_path / "report"), "--tasks", "0", "--resamples", "20",
                "--no-checklist", "--no-compare-systems", "--methods", "pearson", "--human-columns", "human_q",
                "--metrics", "words"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == 5
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    sample = next(c for c in results["groups"][0]["correlations"] if c["level"] == "sample")
    assert sample["n"] == 5
    assert sample["value"] == pytest.approx(np.corrcoef(loaded["words"], loaded["human_q"])[0, 1])


def test_the_same_id_twice_in_one_shard_or_without_shards_is_an_error(tmp_path):
    out = tmp_path / "out"
    _part(out / "ppl" / "a", "ppl", "a", ROWS["a"], "perplexity")
    _part(out / "ppl" / "a", "ppl", "a", ROWS["a"][1:2], "perplexity", name="part-0000000009-0000000010-abc.parquet")
    _part(out / "ppl" / "b", "ppl", "b", ROWS["sub/b"], "perplexity")
    with pytest.raises(InputError, match=r"metric run 'ppl': id 'r1' appears twice in shard 'a'$"):
        ctgscore.load_scores(str(out))
    # a flat folder of files and a single file have no shards: ids are unique there, as before
    flat = tmp_path / "flat"
    _part(flat, "ppl", "a", ROWS["a"], "perplexity", name="x.parquet")
    _part(flat, "ppl", "b", ROWS["sub/b"], "perplexity", name="y.parquet")
    with pytest.raises(InputError, match=r"metric run 'flat': id 'r1' appears twice \(\S+/x\.parquet row \d, \S+/y\.parquet row \d\)$"):
        ctgscore.load_scores(str(flat))
    single = tmp_path / "single.parquet"
    pq.write_table(pa.concat_tables([pq.read_table(flat / "x.parquet"), pq.read_table(flat / "y.parquet")]), single)
    with pytest.raises(InputError, match=r"id 'r1' appears twice \(\S+/single\.parquet row \d, \S+/single\.parquet row \d\)$"):
        read_scores(str(single))


def test_unique_ids_read_by_id_alone(tmp_path):
    out = tmp_path / "out"
    _part(out / "ppl" / "a", "ppl", "a", ROWS["a"], "perplexity")
    _part(out / "ppl" / "sub" / "b", "ppl", "sub/b", ROWS["sub/b"][1:], "perplexity")
    runs = read_runs(str(out))
    assert [run.frame.index.names for run in runs] == [["id"]]
    frame = ctgscore.load_scores(str(out))
    assert list(frame.columns) == ["id", "system", "doc_id", "human_q", "perplexity", "error", "skipped"]
    assert "shard" not in read_scores(str(out)).frame


def test_compmctg_joins_the_dump_on_id_and_shard(tmp_path):
    from meta_eval.compmctg import scored_frame

    dump = tmp_path / "dump"
    for shard, rows in ROWS.items():
        (dump / shard).parent.mkdir(parents=True, exist_ok=True)
        attributes = [[("sentiment", f"{shard}-{r[0]}")] for r in rows]
        pq.write_table(pa.table({"id": [r[0] for r in rows],
                                 "attributes": pa.array(attributes, type=pa.map_(pa.string(), pa.string()))}),
                       dump / f"{shard}.parquet")
    scores = ctgscore.load_scores(str(_job_output(tmp_path)))
    frame = scored_frame(str(dump), scores)
    assert list(zip(frame["id"], frame["shard"])) == KEYS  # one row each: no id crossed with another shard's
    assert frame["attr:sentiment"].tolist() == [f"{s}-{i}" for i, s in KEYS]
    with pytest.raises(InputError, match="no shard 'sub/b'"):
        scored_frame(str(dump / "a.parquet"), scores)


def test_compmctg_refuses_a_dump_id_it_cannot_place(tmp_path):
    """Scores keyed by id alone (a run over shard a only) and a dump holding r1 in two shards:
    the join would count r1's scores twice (once per dump row); a shard's id twice likewise."""
    from meta_eval.compmctg import scored_frame

    dump = tmp_path / "dump"
    for shard, rows in ROWS.items():
        (dump / shard).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": [r[0] for r in rows],
                                 "attributes": pa.array([[("sentiment", shard)]] * len(rows),
                                                        type=pa.map_(pa.string(), pa.string()))}),
                       dump / f"{shard}.parquet")
    out = _job_output(tmp_path)
    only_a = ctgscore.load_scores(str(out), metrics=["only_a"])
    assert "shard" not in only_a and len(only_a) == 3
    with pytest.raises(InputError, match=r"id 'r1' is in more than one of its rows.*no 'shard' column"):
        scored_frame(str(dump), only_a)
    assert len(scored_frame(str(dump / "a.parquet"), only_a)) == 3  # one shard: each id once
    pq.write_table(pq.read_table(dump / "a.parquet").take([0, 1, 1]), dump / "a.parquet")
    with pytest.raises(InputError, match=r"id 'r1' is twice in shard 'a' of it"):
        scored_frame(str(dump), ctgscore.load_scores(str(out)))


# ----- output folders that clash on case-insensitive disks --------------------------------------
def test_clashing_rels_by_the_way_macos_and_windows_compare_names():
    nfc, nfd = unicodedata.normalize("NFC", "Å.parquet"), unicodedata.normalize("NFD", "Å.parquet")
    assert nfc != nfd
    assert layout.clashing_rels(["a.parquet", "A.parquet", "c.parquet"]) == {"A.parquet": "a.parquet", "a.parquet": "A.parquet"}
    assert set(layout.clashing_rels([nfc, nfd])) == {nfc, nfd}
    assert layout.clashing_rels(["x..parquet", "x.parquet"]) == {"x..parquet": "x.parquet", "x.parquet": "x..parquet"}  # Windows drops the dot
    assert layout.clashing_rels(["Dump/a.parquet", "dump/b.parquet"]) == {"Dump/a.parquet": "dump/b.parquet", "dump/b.parquet": "Dump/a.parquet"}
    assert layout.clashing_rels(["A.parquet", "a/b.parquet"]) == {"A.parquet": "a/b.parquet", "a/b.parquet": "A.parquet"}  # a folder above
    # distinct names, and a shard beside a folder of its own name (`a/` holds a's parts and `b/`), are fine
    assert layout.clashing_rels(["a.parquet", "b.parquet", "a/b.parquet", "dump/a.parquet"]) == {}
    assert layout.clashing_labels(["ppl", "bleu"]) is None
    assert layout.clashing_labels(["ppl", "PPL"]) == ("ppl", "PPL")
    assert layout.clashing_labels(["Manifest.JSON"]) == ("manifest.json", "Manifest.JSON")


def _config(output, labels=("text_stats",)):
    return parse_config({"input": "/data/in", "output": output, "progress": False,
                         "metrics": [{"name": "text_stats", "label": label} for label in labels]})


def test_a_local_output_sets_clashing_shards_aside_and_refuses_clashing_labels():
    """Input names are a stranger's: two that are one folder on macOS or Windows make two bad
    shards, each naming the other, and the job goes on; labels come from the config: refused."""
    rels = ("A.parquet", "a.parquet", "Å.parquet", unicodedata.normalize("NFD", "Å.parquet"), "c.parquet",
            "C/d.parquet", "C/e.parquet", "x.parquet")
    infos = Shards([ShardInfo(uri=f"/data/in/{rel}", rel=rel, size=1, etag="e") for rel in rels],
                   not_read=["/data/in/y.PARQUET"], unusable=[("/data/in/f.parquet", "f.parquet", "a FIFO")])
    kept = layout.refuse_clashing_folders(_config("/data/out"), infos)
    assert [info.rel for info in kept] == ["x.parquet"] and kept.not_read == ["/data/in/y.PARQUET"]
    why = {rel: reason for _, rel, reason in kept.unusable}
    assert why.pop("f.parquet") == "a FIFO" and set(why) == set(rels) - {"x.parquet"}
    assert "'/data/in/a.parquet'" in why["A.parquet"] and "'/data/in/A.parquet'" in why["a.parquet"]
    assert "'/data/in/c.parquet'" in why["C/e.parquet"] and "'/data/in/C/d.parquet'" in why["c.parquet"]
    assert all("case-insensitive disk" in reason and "\n" not in reason for reason in why.values())
    with pytest.raises(UsageError, match="labels 'ppl' and 'PPL'"):
        layout.refuse_clashing_folders(_config("/data/out", ("ppl", "PPL")), infos[:1])
    with pytest.raises(UsageError, match="labels '_id_index.parquet' and '_ID_INDEX.parquet'"):
        layout.refuse_clashing_folders(_config("/data/out", ("_ID_INDEX.parquet",)), infos[:1])
    assert layout.refuse_clashing_folders(_config("/data/out"), infos[:1]) == infos[:1]
    s3 = _config("s3://bucket/out", ("ppl", "PPL"))
    assert layout.refuse_clashing_folders(s3, infos) == infos  # S3 keys are exact: nothing clashes


def test_s3_keys_a_reader_resolves_elsewhere_are_no_shards():
    """S3 keys may hold `..`, `.` and empty names and end in `/` (moto and S3 list them as
    written): Arrow's reader takes `in/../x` for `x` and `in/./a` for `in/a`, refuses `in//a`,
    and a key ending in `/` is a folder to both readers."""
    for rel in ("../evil.parquet", "sub/../../up.parquet", "./c.parquet", "a//b.parquet", "a/./b.parquet",
                "/lead.parquet", "marker.parquet/"):
        assert "not read; rename it" in listing.unsafe_key(rel), rel
    assert "ends in '/'" in listing.unsafe_key("marker.parquet/")
    for rel in ("..a.parquet", "a../b.parquet", "a.parquet/b.parquet", "%2F.parquet", "sp ace/q?x#y+z.parquet"):
        assert listing.unsafe_key(rel) is None, rel


def test_a_shard_whose_output_name_is_too_long_is_set_aside():
    long_name = "L" * 990 + ".parquet"
    assert "name of 990 bytes, over a disk's 255" in layout.too_long("/data/out", "m", long_name)
    assert "name of 256 bytes" in layout.too_long("/data/out", "m", "é" * 128 + ".parquet")  # bytes, not letters
    assert layout.too_long("/data/out", "m", "L" * 255 + ".parquet") is None
    assert "over 4095" in layout.too_long("/data/out", "m", "/".join(["d" * 200] * 21) + ".parquet")
    assert "key would be 1062 bytes long, over S3's 1024" in layout.too_long("s3://bucket/scores", "text_stats", long_name)
    assert layout.too_long("s3://bucket/scores", "text_stats", "L" * 900 + ".parquet") is None
    infos = Shards([ShardInfo(uri=f"s3://bucket/in/{rel}", rel=rel, size=1, etag="e") for rel in (long_name, "a.parquet")])
    kept = layout.set_aside_unwritable_names(_config("/data/out"), infos)
    assert [info.rel for info in kept] == ["a.parquet"]
    assert [(rel, "not scored; rename it" in why) for _, rel, why in kept.unusable] == [(long_name, True)]
    assert layout.set_aside_unwritable_names(_config("/data/out"), infos[1:]) == infos[1:]


def test_a_shard_whose_folder_is_named_like_a_part_is_set_aside():
    """`s/part-0000000000-0000000003-<version of s>.parquet.parquet` (the version is computed
    from a listing) made the folder of a part file `s.parquet` writes: the job failed on every
    run ('cannot write ...: File exists'), whichever shard wrote first."""
    part = "part-0000000000-0000000003-b8f6775f2198.parquet"
    for rel in (f"s/{part}.parquet", f"s/{part}/x.parquet", f"s/_next-{part}/x.parquet",
                f"s/{part.upper()}.parquet", f"{part}.parquet"):
        assert "named like one of the job's part files" in (layout.named_like_a_part(rel) or ""), rel
    for rel in ("s.parquet", f"s/{part}", f"s/x-{part}.parquet", "part-1-2-abc.parquet.parquet"):
        assert layout.named_like_a_part(rel) is None, rel
    infos = Shards([ShardInfo(uri=f"/data/in/{rel}", rel=rel, size=1, etag="e") for rel in ("s.parquet", f"s/{part}.parquet")])
    for output in ("/data/out", "s3://bucket/out"):
        kept = layout.set_aside_unwritable_names(_config(output), infos)
        assert [info.rel for info in kept] == ["s.parquet"] and [rel for _, rel, _ in kept.unusable] == [f"s/{part}.parquet"]


def _macos(first, second):
    """`os.path.samefile` as a case-insensitive, Unicode-normalising disk answers it."""
    from scoring.file_names import collision_key

    return collision_key(first) == collision_key(second)


def test_a_folder_the_disk_takes_for_an_existing_one_is_refused(tmp_path):
    """A shard renamed by case only (`A.parquet` -> `a.parquet`): on macOS its folder is the old
    one, which the listing shows as `A`, so its parts would look orphaned (and be pruned)."""
    from ray_jobs.storage.listing import list_tree
    from scoring.s3_filesystem import url_to_fs

    out = tmp_path / "out"
    for folder in ("text_stats/A", "text_stats/Dump/x", "PPL/b"):
        (out / folder).mkdir(parents=True)
        (out / folder / "part-0000000000-0000000001-abcdefabcdef.parquet").write_bytes(b"x")
    tree = list_tree(url_to_fs(str(out))[0], str(out))

    def shards(*rels):
        return [ShardInfo(uri=f"/data/in/{rel}", rel=rel, size=1, etag="e") for rel in rels]

    config = _config(str(out))
    layout.refuse_folded_outputs(config, shards("a.parquet", "dump/y.parquet"), tree)  # Linux: other folders
    layout.refuse_folded_outputs(config, shards("A.parquet", "Dump/y.parquet"), tree, _macos)  # the same spelling
    with pytest.raises(UsageError) as caught:
        layout.refuse_folded_outputs(config, shards("a.parquet"), tree, _macos)
    assert "input shard '/data/in/a.parquet'" in str(caught.value) and f"{out}/text_stats/A'" in str(caught.value)
    with pytest.raises(UsageError, match=f"existing folder '{out}/text_stats/Dump'"):
        layout.refuse_folded_outputs(config, shards("dump/y.parquet"), tree, _macos)  # a folder above it
    with pytest.raises(UsageError, match="metric label 'ppl'"):
        layout.refuse_folded_outputs(_config(str(out), ("ppl",)), shards("b.parquet"), tree, _macos)
    s3_tree = {"bucket/out/text_stats/A/p": {}}
    layout.refuse_folded_outputs(_config("s3://bucket/out"), shards("a.parquet"), s3_tree, _macos)  # keys are exact


def test_run_refuses_them_before_any_work(tmp_path, cli, monkeypatch):
    from tests.job_support import make_rows, write_rows

    write_rows(tmp_path / "in" / "A.parquet", make_rows(0, 3))
    write_rows(tmp_path / "in" / "a.parquet", make_rows(1, 3))  # two files on Linux, one on macOS
    (tmp_path / "job.yaml").write_text(json.dumps({"input": "in", "output": "out", "progress": False,
                                                   "metrics": [{"name": "text_stats"}]}))
    proc = cli(["run", str(tmp_path / "job.yaml")])
    assert proc.returncode == 1, proc.stderr  # two bad shards, refused as any bad shard (skip_bad_shards: false)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "2 bad input shard(s)" in lines[0] and "case-insensitive" in lines[0]
    assert "A.parquet: its output folder is that of input shard" in lines[0] and "a.parquet: its output" in lines[0]
    assert not list((tmp_path / "out").rglob("*.parquet"))

    # the input renamed by case only, over the old output, on a disk that folds case: refused too
    (tmp_path / "in" / "A.parquet").unlink()
    old = tmp_path / "out" / "text_stats" / "A" / "part-0000000000-0000000003-abcdefabcdef.parquet"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"old part")
    monkeypatch.setattr(layout, "_same_folder", _macos)
    proc = cli(["run", str(tmp_path / "job.yaml")])
    assert proc.returncode == 2, proc.stderr
    assert "a.parquet" in proc.stderr and "text_stats/A'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert old.read_bytes() == b"old part"


# ----- a job's own output, read back ------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_jobs_output_with_an_id_in_two_shards_reads_back_whole(ray_local, tmp_path):
    """One job run over two shards sharing two ids: every reader gets all 25 rows, the shared
    ids once per shard, each with the scores of its own text."""
    import sacrebleu

    from meta_eval.corpus_bleu import read_corpus_scores
    from ray_jobs.score_corpus import run_job
    from tests.job_support import make_rows, write_rows

    a, b = make_rows(0, 15), make_rows(1, 10)
    b[3]["id"], b[7]["id"] = a[2]["id"], a[9]["id"]
    write_rows(tmp_path / "in" / "a.parquet", a)
    write_rows(tmp_path / "in" / "dump" / "b.parquet", b)
    manifest = run_job(parse_config({
        "input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "progress": False, "batch_size": 8,
        "part_rows": 10, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
        "metrics": [{"name": "text_stats"}, {"name": "bleu"}]}))
    assert manifest["duplicate_ids_across_shards"]["count"] == 2

    frame = ctgscore.load_scores(str(tmp_path / "out"))
    rows = {(row["id"], shard): row for shard, shard_rows in (("a", a), ("dump/b", b)) for row in shard_rows}
    assert len(frame) == 25 and set(zip(frame["id"], frame["shard"])) == set(rows)
    assert frame.groupby("id").size().max() == 2 and list(frame.columns[:2]) == ["id", "shard"]
    for _, row in frame.iterrows():
        source = rows[(row["id"], row["shard"])]
        assert row["text_stats_words"] == len(source["text"].split()) and row["system"] == source["system"]
        assert row["bleu"] == pytest.approx(sacrebleu.sentence_bleu(source["text"], source["references"]).score)
    table = read_scores(str(tmp_path / "out"))
    assert table.n_input_rows == 25 and sorted(zip(table.frame["id"], table.frame["shard"])) == sorted(rows)

    # corpus BLEU per system is sacreBLEU's over all 25 rows, both rows of a shared id included
    corpus = read_corpus_scores(str(tmp_path / "out"))
    assert sorted(found.system for found in corpus) == ["sys0", "sys1", "sys2"]
    for found in corpus:
        mine = [row for row in rows.values() if row["system"] == found.system]
        want = sacrebleu.corpus_bleu([r["text"] for r in mine], [[r["references"][0] for r in mine]]).score
        assert found.rows == len(mine) and found.score == pytest.approx(want)

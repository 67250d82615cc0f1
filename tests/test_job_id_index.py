"""The id index beside the output (`OUT/_id_index.parquet`): a re-run reads the `id` column
only of the shards that changed (and of an unchanged shard whose hash one of them newly
meets, to confirm it), its cross-shard duplicate note is the one the full check gives, and a
missing or corrupt index falls back to reading every shard's ids."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from ray_jobs.config import parse_config
from ray_jobs.job import id_index
from ray_jobs.score_corpus import JobError, run_job
from tests.job_support import (
    FAKE_AWS,
    child_env,
    make_rows,
    shard_rows,
    write_rows,
)


def job(input_dir, output_dir, **extra):
    return parse_config({
        "input": str(input_dir), "output": str(output_dir), "metrics": [{"name": "text_stats"}],
        "batch_size": 8, "part_rows": 10, "pool": {"min_size": 1, "max_size": 2, "num_cpus": 0.5},
        "progress": False, **extra,
    })


def _corpus(folder: pathlib.Path, shards: int = 4, rows: int = 15) -> dict[str, list[dict]]:
    data = {f"{chr(ord('a') + i)}.parquet": make_rows(i, rows) for i in range(shards)}
    for name, shard in data.items():
        write_rows(folder / name, shard)
    return data


def _index_header(out: pathlib.Path) -> dict:
    return json.loads(pq.read_metadata(out / id_index.INDEX_NAME).metadata[id_index.INDEX_KEY.encode()])


def _full_check_note(inp: pathlib.Path, out: pathlib.Path) -> dict:
    """The note of the full check: no index, no manifest to carry a note from."""
    (out / id_index.INDEX_NAME).unlink()
    (out / "manifest.json").unlink()
    manifest = run_job(job(inp, out))
    assert manifest["id_check"]["index"] == "built"
    assert manifest["id_check"]["id_columns_read"] == len(manifest["input"]["files"])
    return manifest["duplicate_ids_across_shards"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_index_reads_only_changed_shards_and_notes_duplicates_as_the_full_check(ray_local, tmp_path):
    inp, out = tmp_path / "in", tmp_path / "out"
    data = _corpus(inp)

    first = run_job(job(inp, out))
    assert first["id_check"] == {"index": "built", "id_columns_read": 4, "index_written": True}
    assert first["duplicate_ids_across_shards"]["count"] == 0
    assert [entry["file"] for entry in _index_header(out)["shards"]] == [str(inp / name) for name in sorted(data)]

    # a text edited in d: only d's ids are read
    data["d.parquet"][4]["text"] += " edited"
    write_rows(inp / "d.parquet", data["d.parquet"])
    edited = run_job(job(inp, out))
    assert edited["id_check"] == {"index": "used", "id_columns_read": 1, "index_written": True}
    assert edited["duplicate_ids_across_shards"]["count"] == 0
    assert edited["metrics"]["text_stats"]["rows_scored"] == 1

    # d now repeats an id of a and one of b: d is read, and a and b to confirm the hash hits
    data["d.parquet"][5]["id"] = data["a.parquet"][2]["id"]
    data["d.parquet"][9]["id"] = data["b.parquet"][11]["id"]
    write_rows(inp / "d.parquet", data["d.parquet"])
    duplicated = run_job(job(inp, out))
    assert duplicated["id_check"] == {"index": "used", "id_columns_read": 3, "index_written": True}
    note = duplicated["duplicate_ids_across_shards"]
    assert note == {"count": 2, "examples": sorted([
        {"id": data["a.parquet"][2]["id"], "files": [str(inp / "a.parquet"), str(inp / "d.parquet")]},
        {"id": data["b.parquet"][11]["id"], "files": [str(inp / "b.parquet"), str(inp / "d.parquet")]},
    ], key=lambda example: example["id"])}
    assert shard_rows(out / "text_stats", "d.parquet")[5]["id"] == data["a.parquet"][2]["id"]  # both rows scored
    assert _full_check_note(inp, out) == note

    # c edited: the duplicates of a, b and d are already confirmed in the index, nothing else is read
    data["c.parquet"][0]["text"] += " again"
    write_rows(inp / "c.parquet", data["c.parquet"])
    later = run_job(job(inp, out))
    assert later["id_check"] == {"index": "used", "id_columns_read": 1, "index_written": True}
    assert later["duplicate_ids_across_shards"] == note

    # d loses one duplicate, c gains one of d's own ids (now only in c and d)
    data["d.parquet"][9]["id"] = "d-only"
    write_rows(inp / "d.parquet", data["d.parquet"])
    data["c.parquet"][3]["id"] = data["d.parquet"][0]["id"]
    write_rows(inp / "c.parquet", data["c.parquet"])
    changed = run_job(job(inp, out))
    # c and d read; a's duplicate was confirmed in the index already, b's is gone
    assert changed["id_check"] == {"index": "used", "id_columns_read": 2, "index_written": True}
    expected = {"count": 2, "examples": sorted([
        {"id": data["a.parquet"][2]["id"], "files": [str(inp / "a.parquet"), str(inp / "d.parquet")]},
        {"id": data["d.parquet"][0]["id"], "files": [str(inp / "c.parquet"), str(inp / "d.parquet")]},
    ], key=lambda example: example["id"])}
    assert changed["duplicate_ids_across_shards"] == expected
    assert _full_check_note(inp, out) == expected

    # a changed shard still gets the per-shard checks: the same id twice in b is refused
    data["b.parquet"][1]["id"] = data["b.parquet"][0]["id"]
    write_rows(inp / "b.parquet", data["b.parquet"])
    with pytest.raises(JobError, match="duplicate id"):
        run_job(job(inp, out))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_missing_or_corrupt_index_falls_back_to_the_full_check(ray_local, tmp_path):
    inp, out = tmp_path / "in", tmp_path / "out"
    data = _corpus(inp, shards=3)
    data["c.parquet"][1]["id"] = data["a.parquet"][7]["id"]
    write_rows(inp / "c.parquet", data["c.parquet"])
    note = run_job(job(inp, out))["duplicate_ids_across_shards"]
    assert note["count"] == 1
    index = out / id_index.INDEX_NAME

    def edit_b(suffix: str) -> dict:
        data["b.parquet"][0]["text"] += suffix
        write_rows(inp / "b.parquet", data["b.parquet"])
        return run_job(job(inp, out))

    index.unlink()  # missing
    missing = edit_b(" one")
    assert missing["id_check"] == {"index": "built", "id_columns_read": 3, "index_written": True}
    assert missing["duplicate_ids_across_shards"] == note and index.is_file()

    index.write_bytes(b"not parquet at all")  # unreadable footer
    garbage = edit_b(" two")
    assert garbage["id_check"] == {"index": "built", "id_columns_read": 3, "index_written": True}
    assert garbage["duplicate_ids_across_shards"] == note
    assert len(_index_header(out)["shards"]) == 3  # rebuilt, readable again

    raw = index.read_bytes()  # a readable footer over zeroed row groups: the merge cannot read them
    footer = int.from_bytes(raw[-8:-4], "little") + 8
    index.write_bytes(raw[:4] + bytes(len(raw) - 4 - footer) + raw[-footer:])
    zeroed = edit_b(" three")
    assert zeroed["id_check"].pop("index_unusable")  # the reason, in one line
    assert zeroed["id_check"] == {"index": "built", "id_columns_read": 3, "index_written": True}
    assert zeroed["duplicate_ids_across_shards"] == note

    used = edit_b(" four")  # and the rebuilt index is used again
    assert used["id_check"] == {"index": "used", "id_columns_read": 1, "index_written": True}
    assert used["duplicate_ids_across_shards"] == note


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_on_s3_unchanged_shards_are_not_read(moto, ray_address, tmp_path):
    """Every request of the driver and the workers goes through a recording proxy: after one
    shard is edited, no GET touches another input shard."""
    import s3fs

    from ctgscore.testing.proxy import LatencyProxy

    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": moto}, skip_instance_cache=True)
    fs.mkdir("idx-in")
    fs.mkdir("idx-out")
    names = [f"part-{shard:05d}.parquet" for shard in range(4)]
    for shard, name in enumerate(names):
        write_rows(tmp_path / name, make_rows(shard, 12))
        fs.put_file(str(tmp_path / name), f"idx-in/dump/{name}")
    with LatencyProxy(int(moto.rsplit(":", 1)[1]), 0.0) as proxy:
        config = tmp_path / "job.json"
        config.write_text(json.dumps({
            "input": "s3://idx-in/dump", "output": "s3://idx-out/scores", "metrics": [{"name": "text_stats"}],
            "batch_size": 8, "part_rows": 10, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
            "s3": {"endpoint_url": proxy.endpoint}, "progress": False,
        }))

        def run() -> tuple[dict, list[str]]:
            before = len(proxy.request_lines)
            result = subprocess.run(
                [sys.executable, "-m", "ray_jobs.score_corpus", "--config", str(config), "--no-progress"],
                # joins the session's Ray, whose workers' AWS_ENDPOINT_URL is a dead port: their
                # requests reach the proxy through the job's config alone
                env=child_env(**FAKE_AWS, AWS_ENDPOINT_URL=proxy.endpoint, RAY_ADDRESS=ray_address),
                capture_output=True, text=True, timeout=240,
            )
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            fs.invalidate_cache()
            manifest = json.loads(fs.cat_file("idx-out/scores/manifest.json"))
            gets = [line for line in proxy.request_lines[before:] if line.startswith("GET /idx-in/dump/part-")]
            return manifest, sorted({line.split()[1].split("?")[0].rsplit("/", 1)[-1] for line in gets})

        first, read = run()
        assert first["id_check"]["index"] == "built" and read == names
        rows = make_rows(2, 12)
        rows[3]["text"] += " edited"
        write_rows(tmp_path / names[2], rows)
        fs.put_file(str(tmp_path / names[2]), f"idx-in/dump/{names[2]}")
        edited, read = run()
        assert edited["id_check"] == {"index": "used", "id_columns_read": 1, "index_written": True}
        assert read == [names[2]]  # its ids, then its rows; no other shard's bytes
        assert edited["metrics"]["text_stats"]["rows_scored"] == 1

"""No credential is written anywhere: an S3 job (moto on 127.0.0.1; data and a model on S3)
runs with a known fake secret in its environment, then every file under its private Ray
session directory, every object it wrote and its console output are searched for the secret
(and the key id)."""

from __future__ import annotations

import gzip
import json
import pathlib
import subprocess
import sys
import tempfile

import pytest

from tests.job_support import child_env, make_corpus, remove_ray_dir

SECRET = "ctgFAKEsecret/9dQ2+never-log-me-Zx81"
KEY_ID = "AKIACTGSCOREFAKE0042"


def files_containing(root: pathlib.Path, needles: list[bytes]) -> dict[str, list[str]]:
    """Every regular file under `root` (gzip members decompressed) that holds a needle."""
    found: dict[str, list[str]] = {}
    for path in root.rglob("*"):
        try:
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
        except OSError:
            continue
        if data[:2] == b"\x1f\x8b":
            try:
                data += gzip.decompress(data)
            except OSError:
                pass
        hits = [n.decode() for n in needles if n in data]
        if hits:
            found[str(path)] = hits
    return found


def test_the_search_finds_a_planted_secret(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "plain.log").write_text(f'env {{"AWS_SECRET_ACCESS_KEY": "{SECRET}"}}')
    (tmp_path / "a" / "zipped.gz").write_bytes(gzip.compress(SECRET.encode()))
    (tmp_path / "clean.txt").write_text("nothing here")
    found = files_containing(tmp_path, [SECRET.encode()])
    assert sorted(pathlib.Path(p).name for p in found) == ["plain.log", "zipped.gz"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_no_secret_in_ray_logs_outputs_or_console(moto, tmp_path, tiny_models):
    import s3fs

    endpoint = moto
    ray_dir = tempfile.mkdtemp(prefix="rsec", dir="/tmp")  # short: Ray's socket paths
    try:
        fs = s3fs.S3FileSystem(key=KEY_ID, secret=SECRET, client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
        fs.mkdir("sec-in")
        fs.mkdir("sec-out")
        for path in make_corpus(tmp_path / "in", shards=3, rows=12):
            fs.put_file(str(path), f"sec-in/dump/{path.name}")
        for path in pathlib.Path(tiny_models["gpt2"]).iterdir():  # a model from S3 too
            if path.is_file() and not path.name.startswith("."):
                fs.put_file(str(path), f"sec-in/models/lm/{path.name}")
        config = tmp_path / "job.yaml"
        config.write_text(
            json.dumps(
                {
                    "input": "s3://sec-in/dump",
                    "output": "s3://sec-out/scores",
                    "metrics": [
                        {"name": "text_stats"},
                        {"name": "perplexity", "params": {"model": "s3://sec-in/models/lm", "cache_dir": str(tmp_path / "cache")}},
                    ],
                    "batch_size": 8,
                    "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
                    "s3": {"endpoint_url": endpoint},
                    "ray": {"num_cpus": 2, "temp_dir": ray_dir},
                    "progress": False,
                }
            )
        )
        env = child_env(
            AWS_ACCESS_KEY_ID=KEY_ID,
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_EC2_METADATA_DISABLED="true",
        )
        env["AWS_ENDPOINT_URL"] = endpoint  # the same server for anything that reads only the environment
        run = subprocess.run(
            [sys.executable, "-m", "ray_jobs.score_corpus", "--config", str(config)],
            env=env,
            capture_output=True,
            timeout=240,
        )
        console = run.stdout + run.stderr
        assert run.returncode == 0, console.decode(errors="replace")[-3000:]

        fs.invalidate_cache()
        written = fs.find("sec-out/scores")
        assert any(name.endswith("manifest.json") for name in written)
        manifest = json.loads(fs.cat_file("sec-out/scores/manifest.json"))
        assert manifest["metrics"]["text_stats"]["rows_out"] == 36  # the run really went through S3
        assert manifest["metrics"]["perplexity"]["rows_out"] == 36
        assert manifest["metrics"]["perplexity"]["rows_error"] == 0

        needles = [SECRET.encode(), KEY_ID.encode()]
        assert [n for n in needles if n in console] == []
        leaked_objects = [name for name in written if any(n in fs.cat_file(name) for n in needles)]
        assert leaked_objects == []
        session_files = [p for p in pathlib.Path(ray_dir).rglob("*") if p.is_file()]
        assert any(p.suffix in (".log", ".out", ".err") for p in session_files)  # Ray's logs were there to search
        assert files_containing(pathlib.Path(ray_dir), needles) == {}
    finally:
        remove_ray_dir(ray_dir)

"""Models from `s3://` are versioned by content: weights replaced at the same prefix are fetched
again and change the signature; the endpoint comes from `configure_s3` (the job's `s3`
section), not only from `$AWS_ENDPOINT_URL`. Against moto's S3 server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import pathlib
import subprocess
import sys

import pytest

from scoring import models
from scoring.errors import StorageError, UsageError
from tests.job_support import FAKE_AWS, child_env, free_port, make_corpus


@pytest.fixture
def s3(moto, monkeypatch):
    """An s3fs client on the moto server; the model loader is pointed at the server only
    through `configure_s3`, while `$AWS_ENDPOINT_URL` names a dead port."""
    import s3fs

    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("CTGSCORE_S3_MAX_ATTEMPTS", "2")
    models.configure_s3(endpoint_url=moto)
    yield s3fs.S3FileSystem(client_kwargs={"endpoint_url": moto}, skip_instance_cache=True)
    models.configure_s3()


def upload(fs, folder: str, prefix: str) -> None:
    for path in pathlib.Path(folder).iterdir():
        if path.is_file() and not path.name.startswith("."):
            fs.put_file(str(path), f"{prefix}/{path.name}")


def sha256_of_safetensors(folder: pathlib.Path) -> str:
    """Independent of scoring.models: names and bytes of the safetensors files, sorted."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_replaced_weights_are_fetched_again_and_change_the_signature(s3, tiny_models, tmp_path):
    from ctgscore.testing.tiny_models import build_gpt2
    from scoring.perplexity import PerplexityMetric

    s3.mkdir("models-a")
    upload(s3, tiny_models["gpt2"], "models-a/gpt2")
    cache = tmp_path / "cache"
    first = models.resolve_model("s3://models-a/gpt2", cache_dir=cache)
    first_dir = pathlib.Path(first.local_path)
    assert first.identity()["revision"] == "sha256:" + sha256_of_safetensors(pathlib.Path(tiny_models["gpt2"]))
    signature_before = str(PerplexityMetric(model="s3://models-a/gpt2", cache_dir=str(cache)).signature())

    # unchanged prefix: same cached copy, nothing fetched again
    assert models.resolve_model("s3://models-a/gpt2", cache_dir=cache).local_path == first.local_path

    other = build_gpt2(tmp_path / "gpt2-seed1", seed=1)
    assert sha256_of_safetensors(pathlib.Path(other)) != sha256_of_safetensors(pathlib.Path(tiny_models["gpt2"]))
    upload(s3, other, "models-a/gpt2")  # same prefix, same names, new bytes
    listing = models._s3_listing(s3, "s3://models-a/gpt2")
    crashed = cache / "models" / f".{models.s3_content_key('s3://models-a/gpt2', listing)}.tmp-999999"
    crashed.mkdir()
    (crashed / "model.safetensors").write_bytes(b"half a copy")  # left by a copy that was killed
    second = models.resolve_model("s3://models-a/gpt2", cache_dir=cache)
    assert second.local_path != first.local_path
    for name in ("model.safetensors", "config.json"):
        assert (pathlib.Path(second.local_path) / name).read_bytes() == (pathlib.Path(other) / name).read_bytes()
    assert second.identity()["revision"] == "sha256:" + sha256_of_safetensors(pathlib.Path(other))
    signature_after = str(PerplexityMetric(model="s3://models-a/gpt2", cache_dir=str(cache)).signature())
    assert signature_after != signature_before
    assert sha256_of_safetensors(pathlib.Path(other)) in signature_after
    assert first_dir.is_dir()  # an actor still using the old copy keeps it
    assert not [p for p in (cache / "models").iterdir() if ".tmp-" in p.name]  # no staging debris


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_endpoint_comes_from_settings_and_failures_name_the_bucket(s3, tiny_models, tmp_path):
    s3.mkdir("models-b")
    upload(s3, tiny_models["gpt2"], "models-b/gpt2")
    assert models.resolve_model("s3://models-b/gpt2", cache_dir=tmp_path).identity()["model"] == "gpt2"

    with pytest.raises(StorageError, match="bucket 'no-such-bucket' does not exist"):
        models.resolve_model("s3://no-such-bucket/gpt2", cache_dir=tmp_path)
    with pytest.raises(UsageError, match="no files under this prefix"):
        models.resolve_model("s3://models-b/nothing-here", cache_dir=tmp_path)
    s3.pipe_file("models-b/pickled/pytorch_model.bin", b"not really")
    with pytest.raises(UsageError, match="refusing pickled pytorch_model.bin"):
        models.resolve_model("s3://models-b/pickled", cache_dir=tmp_path)

    # without settings the loader falls back to $AWS_ENDPOINT_URL (a dead port here)
    models.configure_s3()
    with pytest.raises(StorageError, match=r"cannot read model s3://models-b/gpt2: .*127\.0\.0\.1"):
        models.resolve_model("s3://models-b/gpt2", cache_dir=tmp_path / "other")


def _job(config: pathlib.Path, ray_address: str) -> subprocess.CompletedProcess:
    """The job as a process of its own, joining the session's Ray (whose workers, too, have a
    dead AWS_ENDPOINT_URL)."""
    env = child_env(**FAKE_AWS, RAY_ADDRESS=ray_address)
    # the endpoint comes from the job config only; anything that ignores it meets a dead
    # loopback port (never a real AWS endpoint)
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    return subprocess.run(
        [sys.executable, "-m", "ray_jobs.score_corpus", "--config", str(config)],
        env=env, capture_output=True, text=True, timeout=400,
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_job_loads_an_s3_model_through_its_s3_settings_and_rescores_when_it_changes(moto, ray_address, tiny_models,
                                                                                     tmp_path):
    import s3fs

    from ctgscore.testing.tiny_models import build_gpt2

    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": moto}, skip_instance_cache=True)
    fs.mkdir("models-job")
    upload(fs, tiny_models["gpt2"], "models-job/lm")
    make_corpus(tmp_path / "in", shards=2, rows=6)
    config = tmp_path / "job.json"
    config.write_text(json.dumps({
        "input": str(tmp_path / "in"),
        "output": str(tmp_path / "out"),
        "metrics": [{"name": "perplexity", "params": {"model": "s3://models-job/lm", "cache_dir": str(tmp_path / "cache")}}],
        "batch_size": 4,
        "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
        "s3": {"endpoint_url": moto},
        "progress": False,
    }))
    first = _job(config, ray_address)
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    signature = manifest["metrics"]["perplexity"]["signature"]
    assert sha256_of_safetensors(pathlib.Path(tiny_models["gpt2"])) in signature

    build_gpt2(tmp_path / "gpt2-new", seed=1)
    assert sha256_of_safetensors(tmp_path / "gpt2-new") != sha256_of_safetensors(pathlib.Path(tiny_models["gpt2"]))
    upload(fs, tmp_path / "gpt2-new", "models-job/lm")  # same prefix, new weights
    second = _job(config, ray_address)
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads((tmp_path / "out" / "manifest.json").read_text())["metrics"]["perplexity"]
    assert sha256_of_safetensors(tmp_path / "gpt2-new") in again["signature"]
    assert again["rows_scored"] == 12 and again["rows_cached"] == 0


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_shard_index_reaching_out_of_its_prefix_is_refused(s3, tiny_models, tmp_path):
    """The copy of an `s3://` model is one folder of the cache beside other models' copies: an
    index naming `../<another copy>/model.safetensors` would load weights its signature never
    hashed. Refused naming the index and the entry (docs/security.md, "Model folders")."""
    from scoring.model_files import ModelFileError

    s3.mkdir("models-d")
    upload(s3, tiny_models["gpt2"], "models-d/other")
    cache = tmp_path / "cache"
    other = pathlib.Path(models.resolve_model("s3://models-d/other", cache_dir=cache).local_path)
    upload(s3, tiny_models["gpt2"], "models-d/gpt2")
    s3.rm("models-d/gpt2/model.safetensors")
    s3.put_file(str(pathlib.Path(tiny_models["gpt2"]) / "model.safetensors"), "models-d/gpt2/model-00001-of-00001.safetensors")
    weight_map = {"transformer.wte.weight": f"../{other.name}/model.safetensors",
                  "transformer.wpe.weight": "model-00001-of-00001.safetensors"}
    s3.pipe_file("models-d/gpt2/model.safetensors.index.json", json.dumps({"metadata": {}, "weight_map": weight_map}).encode())
    with pytest.raises(ModelFileError, match=r"model.safetensors.index.json: weight_map\['transformer.wte.weight'\] names "
                                             rf"'\.\./{other.name}/model.safetensors', not a \.safetensors file of this folder"):
        models.resolve_model("s3://models-d/gpt2", cache_dir=cache)

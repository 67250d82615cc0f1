"""Where model weights come from: a hub id, a local folder, or an `s3://` prefix.

`resolve_model(location)` returns a local folder. An `s3://` prefix is copied once per node
into a local cache (a lock file guards concurrent actors on one node); only safetensors
weights are accepted everywhere, and `trust_remote_code` is never set.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pathlib
from dataclasses import dataclass

DEFAULT_CACHE = pathlib.Path(os.environ.get("CTGSCORE_CACHE", pathlib.Path.home() / ".cache" / "ctgscore"))
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
AUXILIARY_SUFFIXES = (".json", ".txt", ".model", ".safetensors", ".tiktoken")

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise ValueError(f"unknown dtype '{name}'; use one of float32, bfloat16, float16")
    return getattr(torch, DTYPES[name])


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device '{device}' requested but CUDA is not available")
    return device


@dataclass(frozen=True)
class ModelSource:
    """A resolved model: what the user named and the local folder (or hub id) to load."""

    location: str
    local_path: str
    revision: str | None
    is_hub: bool

    def identity(self) -> dict[str, str]:
        """Model id plus a revision: the hub revision, or a hash of the weight files."""
        if self.is_hub:
            return {"model": self.location, "revision": self.revision or "main"}
        # a local folder or s3 prefix is named by its last path component; the weight hash
        # identifies it, so the same weights give the same signature on every node
        name = self.location.rstrip("/").rsplit("/", 1)[-1]
        return {"model": name, "revision": f"sha256:{weights_digest(self.local_path)}"}


def _hash_file_into(digest, path) -> None:
    """Feed a file to a hash in 1 MiB chunks (weights can be gigabytes)."""
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)


def file_digest(path: str | os.PathLike) -> str:
    """Short sha256 of one file's bytes (state dicts, IWF tables), read in chunks."""
    digest = hashlib.sha256()
    _hash_file_into(digest, path)
    return digest.hexdigest()[:16]


def weights_digest(folder: str | os.PathLike) -> str:
    """sha256 over the safetensors files of a folder (names and bytes), cached beside them
    keyed by size and mtime so large checkpoints are hashed once."""
    folder = pathlib.Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no .safetensors weights (pickled checkpoints are refused)")
    stamp = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    sidecar = folder / ".ctgscore-digest.json"
    try:
        cached = json.loads(sidecar.read_text())
        if cached.get("stamp") == [list(s) for s in stamp]:
            return cached["digest"]
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        _hash_file_into(digest, file)
    value = digest.hexdigest()[:16]
    try:
        sidecar.write_text(json.dumps({"stamp": stamp, "digest": value}))
    except OSError:
        pass
    return value


def _copy_from_s3(uri: str, cache_dir: pathlib.Path, storage_options: dict | None) -> pathlib.Path:
    import s3fs

    key = hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:16]
    target = cache_dir / "models" / key
    done = target / ".complete"
    if done.exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / "models" / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return target
        fs = s3fs.S3FileSystem(**(storage_options or _s3_options_from_env()))
        prefix = uri[len("s3://") :].rstrip("/")
        names = [path for path in fs.ls(prefix, detail=False)]
        if not names:
            raise FileNotFoundError(f"{uri}: no files under this prefix")
        weights = [n for n in names if n.endswith(".safetensors")]
        if not weights:
            pickles = [n for n in names if n.endswith(PICKLE_SUFFIXES)]
            raise ValueError(f"{uri}: no .safetensors weights" + (f" (refusing pickled {pickles[0]})" if pickles else ""))
        for name in names:
            if name.endswith(AUXILIARY_SUFFIXES):
                fs.get(name, str(target / pathlib.PurePosixPath(name).name))
        done.write_text(uri)
    return target


def _s3_options_from_env() -> dict:
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    options: dict = {}
    if endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    return options


def resolve_model(
    location: str,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    storage_options: dict | None = None,
) -> ModelSource:
    """Turn a hub id, local folder or `s3://` prefix into something `from_pretrained` loads."""
    if not location:
        raise ValueError("model location is empty")
    cache = pathlib.Path(cache_dir) if cache_dir else DEFAULT_CACHE
    if location.startswith("s3://"):
        local = _copy_from_s3(location, cache, storage_options)
        return ModelSource(location, str(local), revision, is_hub=False)
    path = pathlib.Path(location).expanduser()
    if path.is_dir():
        if not list(path.glob("*.safetensors")):
            raise ValueError(f"{path}: no .safetensors weights (pickled checkpoints are refused)")
        return ModelSource(location, str(path.resolve()), revision, is_hub=False)
    if location.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model folder '{location}' does not exist")
    return ModelSource(location, location, revision, is_hub=True)


def load_pretrained(model_class, source: ModelSource, dtype: str = "float32", device: str = "cpu"):
    """Load weights (safetensors only, no remote code) in eval mode on `device`."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = model_class.from_pretrained(
        source.local_path,
        revision=source.revision if source.is_hub else None,
        dtype=torch_dtype(dtype),
        use_safetensors=True,
        trust_remote_code=False,
    )
    model.eval()
    return model.to(resolve_device(device))


def load_tokenizer(source: ModelSource):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        source.local_path, revision=source.revision if source.is_hub else None, trust_remote_code=False
    )

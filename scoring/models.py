"""Where model weights come from: a hub id, a local folder, or an `s3://` prefix.

`resolve_model(location)` returns a local folder. An `s3://` prefix is listed on every load
and copied into a local cache keyed by its content (the name, size and ETag of every file), so
a model replaced at the same prefix is fetched again and gets a new weight hash in the metric
signature; a lock file guards concurrent actors on one node. The endpoint and region for
`s3://` models come from `configure_s3` (the job's `s3` section), else the environment. Only
safetensors weights are accepted everywhere, and `trust_remote_code` is never set. A local or
`s3://` folder's files are checked before transformers reads them (`scoring.model_files`), and
what transformers cannot load from such a folder is one `ModelFileError` naming the folder.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
from dataclasses import dataclass

from scoring.errors import CtgscoreError, UsageError, is_accelerator_error, is_out_of_memory
from scoring.model_files import ModelFileError, check_folder, check_model_size, weights_elements
from scoring.quiet_tokenizer import quiet_tokenizer

DEFAULT_CACHE = pathlib.Path(os.environ.get("CTGSCORE_CACHE", pathlib.Path.home() / ".cache" / "ctgscore"))
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
AUXILIARY_SUFFIXES = (".json", ".txt", ".model", ".safetensors", ".tiktoken")

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise UsageError(f"unknown dtype '{name}'; use one of float32, bfloat16, float16")
    return getattr(torch, DTYPES[name])


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"device '{device}' requested but CUDA is not available")
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
    keyed by size, mtime and ctime so large checkpoints are hashed once."""
    folder = pathlib.Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLocationError(f"{folder}: no .safetensors weights (pickled checkpoints are refused)")
    # the change time too: a folder unpacked from an archive can carry a forged sidecar whose
    # names, sizes and modification times match (tar restores them), never its change times
    stamp = [(f.name, f.stat().st_size, f.stat().st_mtime_ns, f.stat().st_ctime_ns) for f in files]
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


class ModelLocationError(UsageError, FileNotFoundError):
    """A model location that names nothing loadable: no folder, no objects, no safetensors."""


# S3 settings for model loading, set once per process by `configure_s3` (the Ray job calls it
# in the driver and in every scoring actor with its `s3` section); unset fields fall back to
# `$AWS_ENDPOINT_URL` / `$AWS_DEFAULT_REGION`. Credentials are never part of it: s3fs takes
# them from the process's own AWS default chain.
_S3_SETTINGS: dict[str, object] = {}


def configure_s3(endpoint_url: str | None = None, region: str | None = None, max_attempts: int | None = None) -> None:
    """Where `s3://` models are read from in this process (endpoint, region, retry attempts).
    Call again to change; `configure_s3()` resets to the environment's defaults."""
    _S3_SETTINGS.clear()
    _S3_SETTINGS.update(
        {k: v for k, v in {"endpoint_url": endpoint_url, "region": region, "max_attempts": max_attempts}.items() if v}
    )


def s3_storage_options() -> dict:
    """s3fs options from `configure_s3`, else the environment (no credentials in them)."""
    from scoring.s3_options import s3fs_options

    attempts = _S3_SETTINGS.get("max_attempts")
    return s3fs_options(_S3_SETTINGS.get("endpoint_url"), _S3_SETTINGS.get("region"), int(attempts) if attempts else None)


def _s3_listing(fs, uri: str) -> dict[str, dict]:
    """name -> {size, etag} of the loadable files directly under an `s3://` prefix."""
    from scoring.errors import StorageError

    prefix = uri[len("s3://") :].rstrip("/")
    bucket = prefix.split("/", 1)[0]
    try:
        entries = fs.ls(prefix, detail=True, refresh=True)
    except FileNotFoundError as exc:
        if "bucket" in str(exc).lower():
            raise StorageError(f"cannot read model {uri}: bucket '{bucket}' does not exist") from exc
        raise ModelLocationError(f"model {uri}: no files under this prefix") from exc
    except PermissionError as exc:
        raise StorageError(f"cannot read model {uri}: permission denied") from exc
    except Exception as exc:  # noqa: BLE001 - network and endpoint failures name the model
        raise StorageError(f"cannot read model {uri}: {' '.join(str(exc).split())[:200]}") from exc
    files = {
        entry["name"].rsplit("/", 1)[-1]: {"size": int(entry.get("size") or 0), "etag": str(entry.get("ETag") or "").strip('"')}
        for entry in entries
        if entry.get("type", "file") != "directory"
    }
    if not files:
        raise ModelLocationError(f"model {uri}: no files under this prefix")
    if not any(name.endswith(".safetensors") for name in files):
        pickles = [n for n in files if n.endswith(PICKLE_SUFFIXES)]
        raise ModelLocationError(f"model {uri}: no .safetensors weights" + (f" (refusing pickled {pickles[0]})" if pickles else ""))
    return {name: meta for name, meta in files.items() if name.endswith(AUXILIARY_SUFFIXES)}


def s3_content_key(uri: str, listing: dict[str, dict]) -> str:
    """Cache key of an `s3://` model: its URI plus the name, size and ETag of every file, so
    weights replaced at the same prefix get a new key (and are fetched again)."""
    stamp = json.dumps([uri.rstrip("/"), sorted((n, m["size"], m["etag"]) for n, m in listing.items())])
    return hashlib.sha256(stamp.encode()).hexdigest()[:24]


def _copy_from_s3(uri: str, cache_dir: pathlib.Path, storage_options: dict | None) -> pathlib.Path:
    """Copy a model prefix into `cache_dir/models/<content key>` unless that exact content is
    there already. The prefix is listed on every load (one request); the copy is written to a
    temp folder and renamed into place, and re-done if the prefix changed while copying."""
    from scoring.errors import StorageError
    from scoring.s3_filesystem import S3FileSystem

    fs = S3FileSystem(**(storage_options or s3_storage_options()))
    models = cache_dir / "models"
    models.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        listing = _s3_listing(fs, uri)
        target = models / s3_content_key(uri, listing)
        if (target / ".complete").exists():
            return target
        with open(models / f"{target.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (target / ".complete").exists():
                return target
            for stale in models.glob(f".{target.name}.tmp-*"):  # a copy that crashed (we hold the lock)
                shutil.rmtree(stale, ignore_errors=True)
            staging = models / f".{target.name}.tmp-{os.getpid()}"
            staging.mkdir()
            prefix = uri[len("s3://") :].rstrip("/")
            try:
                for name in listing:
                    fs.get(f"{prefix}/{name}", str(staging / name))
            except Exception as exc:  # noqa: BLE001 - a failed copy leaves nothing behind
                shutil.rmtree(staging, ignore_errors=True)
                raise StorageError(f"cannot copy model {uri}: {' '.join(str(exc).split())[:200]}") from exc
            if _s3_listing(fs, uri) != listing:  # replaced while we copied: start again
                shutil.rmtree(staging, ignore_errors=True)
                continue
            (staging / ".complete").write_text(json.dumps({"uri": uri, "files": listing}, sort_keys=True))
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)
            return target
    raise StorageError(f"cannot copy model {uri}: its files kept changing while being copied")


def resolve_model(
    location: str,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    storage_options: dict | None = None,
) -> ModelSource:
    """Turn a hub id, local folder or `s3://` prefix into something `from_pretrained` loads."""
    if not location:
        raise ModelLocationError("model location is empty")
    cache = pathlib.Path(cache_dir) if cache_dir else DEFAULT_CACHE
    if location.startswith("s3://"):
        local = _copy_from_s3(location, cache, storage_options)
        check_folder(local)
        return ModelSource(location, str(local), revision, is_hub=False)
    path = pathlib.Path(location).expanduser()
    if path.is_dir():
        if not list(path.glob("*.safetensors")):
            raise ModelLocationError(f"{path}: no .safetensors weights (pickled checkpoints are refused)")
        check_folder(path)
        return ModelSource(location, str(path.resolve()), revision, is_hub=False)
    if location.startswith((".", "/", "~")):
        raise ModelLocationError(f"model folder '{location}' does not exist")
    _check_hub_reachable(location, revision)
    return ModelSource(location, location, revision, is_hub=True)


HUB_PROBE_TIMEOUT_S = 3.0


def _check_hub_reachable(repo_id: str, revision: str | None) -> None:
    """Fail in seconds, naming the model, when a hub id is not cached and the hub cannot be
    reached (instead of the loader's minute of retries); offline mode is left to the loader."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
        return
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str):
            return
    except Exception:  # noqa: BLE001 - an unusual id: let the loader report it
        return
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise ModelLocationError(
            f"hub model '{repo_id}' is not in the local cache and {endpoint.hostname} cannot be reached "
            f"({type(exc).__name__}): download it where there is network, or pass a local folder or s3:// prefix"
        ) from exc


_WEIGHTS_WANTED = contextvars.ContextVar("ctgscore_weights_wanted", default=True)


@contextlib.contextmanager
def without_weights():
    """Inside this block `load_pretrained` returns None: metrics built here have their
    tokenizer and configuration but no model (the CPU stage that only prepares token ids)."""
    token = _WEIGHTS_WANTED.set(False)
    try:
        yield
    finally:
        _WEIGHTS_WANTED.reset(token)


@contextlib.contextmanager
def _model_files(source: ModelSource, what: str):
    """What transformers raises on a local or `s3://` folder's files as one `ModelFileError`
    naming the folder (a hub model's errors, network ones included, are left as they are)."""
    try:
        yield
    except CtgscoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to read a hostile folder names it
        if source.is_hub or is_out_of_memory(exc) or is_accelerator_error(exc):  # the machine's, not the folder's
            raise
        message = " ".join(str(exc).split())[:300]
        raise ModelFileError(f"model {source.local_path}: its {what} cannot be loaded ({type(exc).__name__}: {message})") from None


@contextlib.contextmanager
def _quiet_transformers(quiet: bool):
    """transformers' warnings (its load report of missing and unexpected weights, its doubts
    about a config's values) held back while a local or `s3://` model loads: what matters is
    refused in one line (`_check_loaded_weights`, `scoring.model_files`)."""
    from transformers.utils import logging as hf_logging

    if not quiet:
        yield
        return
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def load_config(source: ModelSource):
    from transformers import AutoConfig

    with _model_files(source, "config.json"), _quiet_transformers(not source.is_hub):
        return AutoConfig.from_pretrained(source.local_path, revision=source.revision if source.is_hub else None,
                                          trust_remote_code=False)


def load_pretrained(model_class, source: ModelSource, dtype: str = "float32", device: str = "cpu", unused: tuple[str, ...] = ()):
    """Load weights (safetensors only, no remote code) in eval mode on `device`; None inside
    `without_weights()`. A local or `s3://` folder's configuration is read once: checked against
    its weights before the model is built, then the model built from it; weights that do not
    match that model are refused (`_check_loaded_weights`); `unused`: name prefixes of weights the metric never reads
    (BERTScore's pooler and a masked-LM head), which may be absent or left over."""
    if not _WEIGHTS_WANTED.get():
        return None
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    config = None  # a hub model's: transformers reads it
    if not source.is_hub:  # read once: the model built is the one checked
        config = load_config(source)
        check_model_size(model_class, config, source.local_path, weights_elements(source.local_path))
    with _model_files(source, "weights"), _quiet_transformers(not source.is_hub):
        model, info = model_class.from_pretrained(
            source.local_path,
            config=config,
            revision=source.revision if source.is_hub else None,
            dtype=torch_dtype(dtype),
            use_safetensors=True,
            trust_remote_code=False,
            output_loading_info=True,
            ignore_mismatched_sizes=not source.is_hub,  # reported by `_check_loaded_weights`, naming the tensor
        )
    if not source.is_hub:
        _check_loaded_weights(model, info, source.location, unused)
    model.eval()
    return model.to(resolve_device(device))


def _check_loaded_weights(model, info: dict, location: str, unused: tuple[str, ...]) -> None:
    """The weights and the model of config.json agree: no weight the model needs is missing
    (transformers would draw it at random), none has another shape, and no layer is left over (a
    config that describes fewer layers than the weights hold would score with a truncated model).
    A leftover tensor that is no parameter of any layer the model has (a buffer an older
    transformers saved, such as GPT-2's `attn.masked_bias` or a `rotary_emb.inv_freq`) is let be,
    as transformers lets it be."""
    problems = [f"lack {key}" for key in sorted(info.get("missing_keys") or ()) if not _computed_or_unused(model, key, unused)]
    problems += [f"hold {key[0]} as {list(key[1])}, the model needs {list(key[2])}" if isinstance(key, tuple) and len(key) == 3
                 else f"hold {key} in another shape" for key in sorted(info.get("mismatched_keys") or (), key=str)]
    shapes = _parameter_shapes(model)
    problems += [f"hold {key}, which the model has no place for" for key in sorted(info.get("unexpected_keys") or ())
                 if not key.startswith(unused) and _layer_shape(key) in shapes]
    if problems:
        raise ModelFileError(f"model {location}: its weights do not match the model its config.json describes: they "
                             f"{problems[0]} ({len(problems)} such tensor(s)); refusing a model that would be partly random or cut")


def _layer_shape(name: str) -> str:
    """A weight's name with its layer numbers as `#` (`transformer.h.#.mlp.c_fc.weight`)."""
    import re

    return re.sub(r"\.\d+(?=\.)", ".#", name)


def _parameter_shapes(model) -> set[str]:
    """The model's parameter names, layer numbers as `#` (with and without its base prefix)."""
    names = {_layer_shape(name) for name, _ in model.named_parameters()}
    prefix = getattr(model, "base_model_prefix", "") or ""
    return names | {name[len(prefix) + 1:] for name in names if prefix and name.startswith(prefix + ".")}


def _computed_or_unused(model, key: str, unused: tuple[str, ...]) -> bool:
    """A missing weight that is no loss: one the metric never reads, or a sinusoidal position
    table (PEGASUS), which the model computes."""
    if key.startswith(unused):
        return True
    try:
        module = model.get_submodule(key.rsplit(".", 1)[0]) if "." in key else model
    except AttributeError:
        return False
    return "Sinusoidal" in type(module).__name__


def load_tokenizer(source: ModelSource):
    """The model's tokenizer on the tokenizers library (or transformers' Python backend), never
    mistral-common's: with that package installed (vLLM brings it) transformers would load a
    Mistral checkpoint holding `tekken.json` through it, so the same model would tokenise on
    another backend from one environment to the next, outside the literal-text rules
    (`scoring.literal_tokens`) that are tested on these backends. Its Rust calls hold stderr
    back (`scoring.quiet_tokenizer`): a panic in them is the caller's exception, not console text."""
    from transformers import AutoTokenizer

    if not source.is_hub:
        load_config(source)  # the tokenizer reads config.json too: its errors name that file
    with _model_files(source, "tokenizer"), _quiet_transformers(not source.is_hub):
        return quiet_tokenizer(AutoTokenizer.from_pretrained(
            source.local_path, revision=source.revision if source.is_hub else None, trust_remote_code=False,
            mistral_format=False,
        ))

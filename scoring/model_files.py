"""A model folder's files checked before transformers reads them (docs/security.md, "Models").

A model folder is data from whoever published it. transformers follows it where it points:
a shard index naming `../../other/model.safetensors` loads weights from outside the folder
(weights the signature's hash never saw), a `config.json` symlinked to `/dev/zero` is read
forever, and a `config.json` asking for a vocabulary of 10**9 rows has the model allocate
terabytes before a single weight is read. Here, before any of that:

- `check_folder`: every file of the folder (a symlink followed) is a regular file or a folder
  (a device, pipe or socket, or a link to nowhere, is refused by name, never read); the small
  JSON files are at most `MAX_JSON_BYTES`, tokenizer files `MAX_TOKENIZER_BYTES` and a
  vocabulary `MAX_VOCABULARY` entries; a shard index names only `.safetensors` files of
  the folder itself, by plain name.
- `weights_elements` (before the weights load): every safetensors header is well formed: its declared
  length inside the file and at most `MAX_HEADER_BYTES`, each tensor's dtype known, its shape
  whole numbers, its bytes inside the file and as many as its shape and dtype take.
- `check_model_size`: the model a configuration describes is built on the meta device (no
  memory) and its parameters and buffers counted; more than the weights hold (plus
  `MAX_EXTRA_ELEMENTS` for buffers a checkpoint does not store) is refused. Layer counts past
  `MAX_LAYERS` are refused before that build (each layer is Python objects, even on meta).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import stat

from scoring.errors import UsageError

MAX_JSON_BYTES = 64 << 20
MAX_TOKENIZER_BYTES = 256 << 20
MAX_VOCABULARY = 1 << 20  # entries of a tokenizer's vocabulary (the largest published: about 262,000)
VOCABULARY_COUNTED_PAST = 8 << 20  # smaller tokenizer files cannot hold MAX_VOCABULARY entries
TOKENIZER_FILES = ("tokenizer.json", "vocab.json")
MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own cap
MAX_LAYERS = 1_000
MAX_EXTRA_ELEMENTS = 64 << 20
SMALL_JSON = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
              "chat_template.json", "model.safetensors.index.json", "added_tokens.json", "preprocessor_config.json")
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
               "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}


class ModelFileError(UsageError):
    """A model folder holding a file ctgscore will not read; the message names the file and field."""


def check_folder(folder: str | os.PathLike) -> None:
    """Check the folder's files (module docstring) but the safetensors headers, which only a
    load of the weights reads (`weights_elements`)."""
    folder = pathlib.Path(folder)
    for entry in sorted(folder.iterdir()):
        try:
            info = entry.stat()
        except OSError as exc:
            raise ModelFileError(f"model file {entry}: cannot be read ({exc.strerror or type(exc).__name__}; a symbolic "
                                 "link to nowhere or in a loop?)") from None
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            raise ModelFileError(f"model file {entry}: not a regular file (a device, pipe or socket); refused before it is read")
        if entry.name in SMALL_JSON and info.st_size > MAX_JSON_BYTES:
            raise ModelFileError(f"model file {entry}: {info.st_size:,} bytes, more than {MAX_JSON_BYTES:,} for this file")
        if entry.name in TOKENIZER_FILES or entry.suffix in (".model", ".tiktoken", ".txt"):
            if info.st_size > MAX_TOKENIZER_BYTES:
                raise ModelFileError(f"model file {entry}: {info.st_size:,} bytes, more than {MAX_TOKENIZER_BYTES:,} for a "
                                     "tokenizer file")
            if entry.name in TOKENIZER_FILES and info.st_size > VOCABULARY_COUNTED_PAST:
                check_vocabulary(entry)
    check_index(folder)


def weights_elements(folder: str | os.PathLike) -> int:
    """The tensor elements the folder's safetensors files hold, each header checked."""
    return sum(safetensors_elements(path) for path in sorted(pathlib.Path(folder).glob("*.safetensors")))


def check_vocabulary(path: pathlib.Path) -> None:
    """A tokenizer's vocabulary of at most `MAX_VOCABULARY` entries (loading takes time per
    entry: about a minute for 300,000 on a small machine)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"model file {path}: not JSON ({exc})") from None
    vocabulary = data.get("model", {}).get("vocab") if path.name == "tokenizer.json" and isinstance(data, dict) else data
    added = data.get("added_tokens") if path.name == "tokenizer.json" and isinstance(data, dict) else None
    size = (len(vocabulary) if isinstance(vocabulary, (dict, list)) else 0) + (len(added) if isinstance(added, list) else 0)
    if size > MAX_VOCABULARY:
        raise ModelFileError(f"model file {path}: a vocabulary of {size:,} entries, more than {MAX_VOCABULARY:,}")


def check_index(folder: pathlib.Path) -> None:
    """A shard index names `.safetensors` files of the folder itself, by plain name."""
    for index in sorted(folder.glob("*.safetensors.index.json")):
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        except (ValueError, AttributeError, UnicodeDecodeError) as exc:
            raise ModelFileError(f"model file {index}: not a shard index (JSON object with weight_map): {exc}") from None
        if not isinstance(weight_map, dict):
            raise ModelFileError(f"model file {index}: weight_map is not an object")
        for key, name in weight_map.items():
            plain = isinstance(name, str) and name == pathlib.PurePosixPath(name).name and "\\" not in name
            if not plain or name in (".", "..") or not name.endswith(".safetensors"):
                raise ModelFileError(f"model file {index}: weight_map[{key!r}] names {name!r}, not a .safetensors file "
                                     "of this folder (shards are read from the model's own folder only)")
            if not (folder / name).is_file():
                raise ModelFileError(f"model file {index}: weight_map[{key!r}] names {name!r}, which the folder does not hold")


def safetensors_elements(path: pathlib.Path) -> int:
    """Tensor elements of one safetensors file, its header checked against the file."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ModelFileError(f"model file {path}: {size} bytes, too short for a safetensors header")
        declared = int.from_bytes(head, "little")
        if declared > min(size - 8, MAX_HEADER_BYTES):
            pointer = " (a Git LFS pointer: fetch the file itself)" if head.startswith(b"version ") else ""
            raise ModelFileError(f"model file {path}: the safetensors header declares {declared:,} bytes, more than "
                                 f"{'the file holds' if declared > size - 8 else f'{MAX_HEADER_BYTES:,}'}{pointer}")
        raw = handle.read(declared)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"model file {path}: the safetensors header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"model file {path}: the safetensors header is not a JSON object")
    data = size - 8 - declared
    total = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        where = f"model file {path}: tensor {name!r}"
        if not isinstance(tensor, dict) or tensor.get("dtype") not in DTYPE_BYTES:
            raise ModelFileError(f"{where}: unknown dtype {tensor.get('dtype') if isinstance(tensor, dict) else tensor!r}")
        shape, offsets = tensor.get("shape"), tensor.get("data_offsets")
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            raise ModelFileError(f"{where}: shape {shape!r} is not a list of whole numbers")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(n) is int for n in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data):
            raise ModelFileError(f"{where}: data_offsets {offsets!r} are not inside the file's {data:,} data bytes")
        elements = math.prod(shape)
        if elements * DTYPE_BYTES[tensor["dtype"]] != offsets[1] - offsets[0]:
            raise ModelFileError(f"{where}: shape {shape} of {tensor['dtype']} takes {elements * DTYPE_BYTES[tensor['dtype']]:,} "
                                 f"bytes, its data_offsets give {offsets[1] - offsets[0]:,}")
        total += elements
    return total


def _layer_counts(values: dict, path: str = ""):
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _layer_counts(value, f"{path}{key}.")
        elif isinstance(key, str) and (key.endswith("layers") or key == "n_layer") and not isinstance(value, bool):
            yield f"{path}{key}", value  # numbers are checked; lists of layer indices and names are not counts


def check_model_size(model_class, config, folder: str | os.PathLike, held: int) -> None:
    """Refuse a configuration whose model would hold more than the weights do (`held` elements),
    built on the meta device so that nothing is allocated. `config` is left as given (the model
    is built from a copy: building one settles its attention implementation on the config)."""
    import copy

    import torch

    where = pathlib.Path(folder) / "config.json"
    for key, value in _layer_counts(config.to_dict()):
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, (int, float)) and not (whole and 0 <= value <= MAX_LAYERS):
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... ({len(repr(value))} characters)"
            raise ModelFileError(f"model file {where}: {key} is {shown}; a whole number from 0 to {MAX_LAYERS} is expected")
    try:
        with torch.device("meta"):
            model = model_class.from_config(copy.deepcopy(config), trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - any value the model's constructor cannot take
        raise ModelFileError(f"model file {where}: describes no model that can be built "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]})") from None
    needed = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    if needed > held + MAX_EXTRA_ELEMENTS:
        raise ModelFileError(f"model file {where}: describes a model of {needed:,} parameters and buffers, but its "
                             f"safetensors weights hold {held:,}; refused before anything is allocated")

"""`scoring.models.load_pretrained` reads a local model folder's `config.json` once: the
configuration `scoring.model_files.check_model_size` checks against the weights is the one the
model is built from (transformers no longer reads the file a second time), and the model is
the one transformers itself loads from the folder."""

from __future__ import annotations

import builtins
import json
import pathlib

import pytest
import torch

from scoring import model_files, models


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> pathlib.Path:
    """A tiny GPT-2 folder (2 layers)."""
    from ctgscore.testing.tiny_models import build_gpt2

    return build_gpt2(tmp_path_factory.mktemp("gpt2") / "gpt2")


def config_reads(monkeypatch, folder: pathlib.Path) -> list[str]:
    """The opens of `folder`'s config.json from now on (a list that fills as they happen)."""
    opened = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if pathlib.Path(str(file)).resolve() == (folder / "config.json").resolve():
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    return opened


def test_load_pretrained_reads_a_local_config_json_once(gpt2, monkeypatch):
    from transformers import AutoModelForCausalLM

    source = models.resolve_model(str(gpt2))
    opened = config_reads(monkeypatch, gpt2)
    assert models.load_pretrained(AutoModelForCausalLM, source) is not None
    assert len(opened) == 1  # was 2: load_config for the size check, then from_pretrained again


def test_check_model_size_leaves_the_config_as_given(gpt2):
    from transformers import AutoModelForCausalLM

    config = models.load_config(models.resolve_model(str(gpt2)))
    before = dict(vars(config))
    model_files.check_model_size(AutoModelForCausalLM, config, gpt2, model_files.weights_elements(gpt2))
    assert dict(vars(config)) == before  # building on meta set the attention implementation on it before


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_model_loaded_is_the_one_transformers_loads_from_the_folder(gpt2, dtype):
    from transformers import AutoModelForCausalLM

    got = models.load_pretrained(AutoModelForCausalLM, models.resolve_model(str(gpt2)), dtype=dtype)
    want = AutoModelForCausalLM.from_pretrained(str(gpt2), dtype=models.torch_dtype(dtype), use_safetensors=True).eval()
    assert type(got) is type(want) and not got.training
    assert got.config.to_dict() == want.config.to_dict()
    assert got.config._attn_implementation == want.config._attn_implementation
    mine, theirs = got.state_dict(), want.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(mine[k].dtype == theirs[k].dtype and torch.equal(mine[k], theirs[k]) for k in mine)
    ids = torch.tensor([[5, 17, 42, 8, 99]])
    with torch.no_grad():
        assert torch.equal(got(ids).logits, want(ids).logits)


def test_a_config_json_changed_after_its_check_is_not_the_model_built(gpt2, tmp_path, monkeypatch):
    """A folder whose config.json changes between the size check and the weights' load (a
    second writer, an `s3://` copy refreshed) gets the model that was checked; before, transformers
    read the file again and built the other model (here a third layer, refused as drawn at random)."""
    import shutil

    from transformers import AutoModelForCausalLM

    folder = pathlib.Path(shutil.copytree(gpt2, tmp_path / "gpt2"))
    real_check = models.check_model_size

    def check_then_change(*args, **kwargs):
        real_check(*args, **kwargs)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "n_layer": config["n_layer"] + 1}))

    monkeypatch.setattr(models, "check_model_size", check_then_change)
    model = models.load_pretrained(AutoModelForCausalLM, models.resolve_model(str(folder)))
    assert model.config.n_layer == 2 and len(model.transformer.h) == 2

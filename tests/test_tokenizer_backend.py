"""Which tokenizer backend `scoring.models.load_tokenizer` gives a model."""

import json

from tests.test_special_tokens import metaspace_tokenizer


def test_a_mistral_checkpoint_with_tekken_loads_on_the_tokenizers_library_even_where_mistral_common_is_installed(
        tmp_path, monkeypatch):
    """With mistral-common installed, transformers maps Mistral's model types to its backend and
    takes it for a folder holding `tekken.json`. The test makes transformers believe the package
    is there (it is not installed here, so taking that backend fails): the loader still gives the
    tokenizers-library tokenizer of `tokenizer.json`, the one ctgscore's literal-text rules are
    tested on, with the ids it gives everywhere."""
    from transformers import PreTrainedTokenizerFast
    from transformers.models.auto import tokenization_auto

    from scoring.models import load_tokenizer, resolve_model

    folder = tmp_path / "tiny-mistral"
    reference = metaspace_tokenizer()
    reference.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "mistral", "architectures": ["MistralForCausalLM"]}))
    (folder / "tekken.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")  # the loader asks for safetensors weights; they are not read
    monkeypatch.setitem(tokenization_auto.TOKENIZER_MAPPING_NAMES, "mistral", "MistralCommonBackend")
    monkeypatch.setattr(tokenization_auto, "_use_mistral_format",
                        lambda path, mistral_format=None, **kwargs: mistral_format is not False)

    tokenizer = load_tokenizer(resolve_model(str(folder)))

    assert isinstance(tokenizer, PreTrainedTokenizerFast) and type(tokenizer).__name__ != "MistralCommonBackend"
    text = "The council met on Monday."
    assert tokenizer(text)["input_ids"] == reference(text)["input_ids"]

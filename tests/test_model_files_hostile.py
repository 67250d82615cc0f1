"""Hostile model folders: models are trusted only as data (docs/security.md, "Models"). Each
test tampers with a tiny model the way a published folder could and runs the real loading and
scoring paths; the refusal must be one line naming the file (or template) and field, within
bounded time and memory, and where an allocation threatens, before it (transformers'
`from_pretrained` is never reached)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error
from scoring import chat_render, model_files
from scoring.errors import UsageError
from scoring.registry import build_metric

USER_TURN = "<|user|>\n{{ messages[0]['content'] }}\n<|assistant|>\n"
ROWS = [{"id": "a", "text": "The storm closed the harbour.", "source": "A storm closed the harbour for the day."},
        {"id": "b", "text": "A calm day at sea.", "source": "The sea was calm all day long."}]


@pytest.fixture(scope="module")
def chat_llm(tmp_path_factory) -> str:
    """A tiny Llama whose folder holds its chat template (`chat_template.jinja`)."""
    from ctgscore.testing.tiny_llms import build_decoder

    return str(build_decoder("llama", tmp_path_factory.mktemp("chat") / "llama"))


def tampered(source: str, out: pathlib.Path) -> pathlib.Path:
    shutil.copytree(source, out, symlinks=True)
    return out


def with_template(chat_llm: str, out: pathlib.Path, template: str) -> str:
    folder = tampered(chat_llm, out)
    (folder / "chat_template.jinja").write_text(template)
    return str(folder)


def edit_json(path: pathlib.Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.fixture
def no_allocation(monkeypatch):
    """Fail the test if transformers is asked to build the model from its weights."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("from_pretrained was reached: the refusal came after the model was built")

    for name in ("AutoModelForCausalLM", "AutoModelForSeq2SeqLM"):
        monkeypatch.setattr(getattr(transformers, name), "from_pretrained", refuse)


# ----- chat templates: Jinja code from the model folder -----------------------------------------
BOMBS = {
    "nested loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "100,000 steps"),
    "string product": ("{{ 'x' * 10**10 }}", "10,000,000,000 characters or items"),
    "join of an iterator": ("{% set s = 'a' * 100000 %}{{ ([s] * 1000)|map('string')|join }}", "(join) of 100,000,000"),
    "gigabytes of output": ("{% for i in range(100000) %}{{ 'y' * 100000 }}{% endfor %}", "writes more than 16,000,000 characters"),
    "doubling": ("{% set ns = namespace(x='ab') %}{% for i in range(60) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}{{ ns.x }}",
                 "16,777,216 characters or items"),
    "exponential macro": ("{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}", "steps"),
    "padding": ("{{ 'x'|center(1000000000) }}", "the number 1000000000"),
    "str method width": ("{{ 'x'.ljust(1000000000) }}", "the number 1000000000"),
    "format width": ("{{ '{:>999999999}'.format(1) }}", "width or precision"),
    "printf width": ("{{ '%999999999d' % 1 }}", "width or precision"),
    "replace": ("{% set s = 'a' * 100000 %}{{ s.replace('a', s) }}", "(replace) of 10,000,100,000"),
    "join": ("{% set s = 'a' * 100000 %}{{ s.join(s) }}", "(join) of 10,000,000,000"),
    "power": ("{{ 2 ** 100000000 }}", "integer of more than 4,096 bits"),
    "json indent": ("{{ range(100000)|list|tojson(indent=100000) }}", "indents JSON by 100,000"),
    "expandtabs": ("{{ ('\t' * 1000).expandtabs(100000) }}", "str.expandtabs"),
    "recursion": ("{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}", "recurses too deeply"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(BOMBS))
def test_a_chat_template_that_would_run_away_stops_at_a_bound(chat_llm, tmp_path, name):
    template, message = BOMBS[name]
    folder = with_template(chat_llm, tmp_path / "llama", template + USER_TURN)
    with pytest.raises(UsageError, match="chat_template: the chat template of .* cannot be used: ") as caught:
        build_metric("gptscore", {"model": folder, "chat_template": True, "templates": {"plain": "{input}"}})
    assert message in str(caught.value) and "\n" not in str(caught.value)


ESCAPES = {
    "mro": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "function globals": "{{ raise_exception.__globals__['os'].system('touch MARKER') }}",
    "cycler globals": "{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "mutating the messages": "{% set x = messages.append({'role': 'user', 'content': 'evil'}) %}",
    "raise_exception": "{{ raise_exception('this model refuses to be scored') }}",
    "syntax error": "{% for m in messages %}{{ m['content'] }",
    "division by zero": "{{ 1 / 0 }}",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(ESCAPES))
def test_a_failing_or_escaping_chat_template_is_one_error_line(chat_llm, tmp_path, cli, name):
    marker = tmp_path / "MARKER"
    folder = with_template(chat_llm, tmp_path / "llama", ESCAPES[name].replace("MARKER", str(marker)) + USER_TURN)
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "in.parquet")
    params = json.dumps({"model": folder, "chat_template": True, "templates": {"plain": "{input}"}})
    proc = cli(["score", "-m", "gptscore", "--params", params, "-i", str(tmp_path / "in.parquet"),
                "-o", str(tmp_path / "out.parquet")])
    assert_user_error(proc, 2, "chat_template: the chat template of", "cannot be used")
    assert not marker.exists()


@pytest.mark.timeout(120)
def test_a_template_that_runs_away_on_one_text_fails_that_row_only(chat_llm, tmp_path):
    bomb = ("{% if 'urgent' in messages[0]['content'] %}{% for i in range(100000) %}{% for j in range(100000) %}"
            "{% endfor %}{% endfor %}{% endif %}")
    folder = with_template(chat_llm, tmp_path / "llama", bomb + USER_TURN)
    metric = build_metric("gptscore", {"model": folder, "chat_template": True, "templates": {"plain": "{input}"}})
    out = metric.score_rows([ROWS[0], {**ROWS[1], "source": "urgent: the sea was calm"}])
    assert out[0]["error"] is None and out[0]["gptscore_plain_s_h"] is not None
    assert out[1]["error"] == ("s_h: prompt is refused by the chat template (the chat template takes more than 100,000 "
                               "steps (loop iterations, calls, output pieces, 1,024 characters built) to render one prompt)")


PARITY_TEMPLATES = [
    None,  # the tiny model's own
    "{% set ns = namespace(text='') %}{% for m in messages %}{% set ns.text = ns.text ~ m['role'] ~ ': ' ~ m['content'] %}"
    "{% if not loop.last %}\n{% endif %}{% endfor %}{{ bos_token }}{{ ns.text | trim }}{{ messages | tojson }}"
    "{% if add_generation_prompt %}\nassistant:{% endif %}",
    "{% if date_string is not defined %}{% set date_string = strftime_now('%d %b %Y') %}{% endif %}Today: {{ date_string }}\n"
    "{% for m in messages %}{% generation %}{{ m['content'] | upper | replace('A', 'a') }}{% endgeneration %}{% endfor %}"
    "{{ '%s|%5d' % ('x', 3) }}{{ '{} {}'.format(eos_token, unk_token) }}{{ [1, 2] | join(',') }}{{ 'ab' * 3 }}",
    # the shape of today's templates: a system turn taken apart, loop controls, whitespace control, a guard
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] | trim %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = 'You rate texts.' %}{%- set rest = messages %}{%- endif %}"
    "{{- bos_token }}<|system|>\n{{ system }}\n"
    "{%- for m in rest %}{%- if loop.index > 8 %}{% break %}{%- endif %}"
    "{%- if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('unknown role ' ~ m['role']) }}{%- endif %}"
    "{%- if m['content'] is string and m['content'].strip() == '' %}{% continue %}{%- endif %}"
    "\n<|{{ m['role'] }}|>\n{{ m['content'] | trim }}{{ eos_token if m['role'] == 'assistant' else '' }}"
    "{%- endfor %}{%- if add_generation_prompt %}\n<|assistant|>\n{%- endif %}",
]


@pytest.mark.parametrize("template", PARITY_TEMPLATES)
def test_bounded_rendering_is_transformers_rendering(chat_llm, template):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chat_llm)
    if template is not None:
        tokenizer.chat_template = template
    messages = [{"role": "user", "content": "  A <b>storm</b> & <|user|> closed it.  "}]
    expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, date_string="1 Jan 2025")
    assert chat_render.render_chat(tokenizer, messages, date_string="1 Jan 2025") == expected


# ----- config.json: sizes, types, remote code ----------------------------------------------------
ALLOCATING = {
    "vocab_size": ({"vocab_size": 10**9}, "describes a model of 64,000,132,608 parameters"),
    "n_positions": ({"n_positions": 10**9}, "describes a model of 64,000,131,072 parameters"),
    "hidden sizes": ({"n_embd": 2**20, "n_inner": 2**24}, "safetensors weights hold 196,608; refused before anything is allocated"),
    "layers": ({"n_layer": 10**6}, "n_layer is 1000000; a whole number from 0 to 1000"),
    "negative layers": ({"n_layer": -2}, "n_layer is -2"),
    "negative vocabulary": ({"vocab_size": -5}, "describes no model that can be built (RuntimeError"),
    "wrong model_type": ({"model_type": "llama"}, "describes a model of"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(ALLOCATING))
def test_a_config_asking_for_more_than_its_weights_is_refused_before_allocation(tiny_models, tmp_path, no_allocation, name):
    changes, message = ALLOCATING[name]
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    edit_json(folder / "config.json", **changes)
    with pytest.raises(UsageError) as caught:
        build_metric("perplexity", {"model": str(folder)})
    assert str(folder / "config.json") in str(caught.value) and message in str(caught.value)


def test_seq2seq_config_sizes_are_checked_too(tiny_models, tmp_path, no_allocation):
    folder = tampered(tiny_models["bart"], tmp_path / "bart")
    edit_json(folder / "config.json", d_model=2**20)
    with pytest.raises(UsageError, match=r"bart/config.json: describes a model of [\d,]+ parameters and buffers, but its "
                                         r"safetensors weights hold 364,008"):
        build_metric("bartscore", {"model": str(folder), "directions": ["s_h"]})


@pytest.mark.parametrize("changes, message", [
    ({"n_embd": 64.5}, "its config.json cannot be loaded (StrictDataclassFieldValidationError: Validation error for field 'n_embd'"),
    ({"model_type": "evil", "auto_map": {"AutoConfig": "evil.EvilConfig"}}, "its config.json cannot be loaded (ValueError: "),
])
def test_a_config_of_wrong_types_or_remote_code_is_one_error(tiny_models, tmp_path, changes, message):
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    (folder / "evil.py").write_text(f"open({str(tmp_path / 'MARKER')!r}, 'w').close()\n")
    edit_json(folder / "config.json", **changes)
    with pytest.raises(UsageError) as caught:
        build_metric("perplexity", {"model": str(folder)})
    assert message in str(caught.value) and str(folder) in str(caught.value)
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("layers, message", [
    (1, r"they hold transformer\.h\.1\.\S+, which the model has no place for \(\d+ such tensor"),  # a cut model, silently
    (3, r"they lack transformer\.h\.2\.\S+ \(12 such tensor"),  # a layer drawn at random
])
def test_a_config_and_weights_that_disagree_are_refused(tiny_models, tmp_path, layers, message):
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    edit_json(folder / "config.json", n_layer=layers)
    with pytest.raises(UsageError, match="its weights do not match the model its config.json describes") as caught:
        build_metric("perplexity", {"model": str(folder)})
    assert re.search(message, str(caught.value)), str(caught.value)


# ----- weights -----------------------------------------------------------------------------------
def _rewrite_weights(folder: pathlib.Path, change) -> None:
    from safetensors.torch import load_file, save_file

    save_file(change(load_file(str(folder / "model.safetensors"))), str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_weights_of_another_shape_or_name_are_refused(tiny_models, tmp_path):
    import torch

    shapes = tampered(tiny_models["gpt2"], tmp_path / "shapes")
    _rewrite_weights(shapes, lambda state: {**state, "transformer.wte.weight": torch.zeros(7, 3)})
    with pytest.raises(UsageError, match=r"they hold transformer.wte.weight as \[7, 3\], the model needs \[1000, 64\]"):
        build_metric("perplexity", {"model": str(shapes)})
    renamed = tampered(tiny_models["gpt2"], tmp_path / "renamed")  # every weight missing: a random model, before
    _rewrite_weights(renamed, lambda state: {f"junk.{k}": v for k, v in state.items()})
    with pytest.raises(UsageError, match="they lack lm_head.weight"):
        build_metric("perplexity", {"model": str(renamed)})


def test_buffers_an_older_transformers_saved_are_let_be(tiny_models, chat_llm, tmp_path):
    """Published checkpoints carry buffers today's models no longer keep (GPT-2's `attn.bias` and
    `attn.masked_bias`, Llama's `rotary_emb.inv_freq`, RoBERTa's `position_ids`) and leave out a
    tied `lm_head`: such a folder loads, and scores as the folder without them."""
    import torch

    from scoring.models import _check_loaded_weights

    gpt2 = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    _rewrite_weights(gpt2, lambda state: {
        **{k: v for k, v in state.items() if k != "lm_head.weight"},
        **{f"transformer.h.{i}.attn.bias": torch.tril(torch.ones(1, 1, 8, 8)) for i in range(2)},
        **{f"transformer.h.{i}.attn.masked_bias": torch.tensor(-1e4) for i in range(2)}})
    rows = [{"id": "a", "text": "The storm closed the harbour."}]
    clean = build_metric("perplexity", {"model": tiny_models["gpt2"]}).score_rows(rows)
    assert build_metric("perplexity", {"model": str(gpt2)}).score_rows(rows) == clean
    llama = tampered(chat_llm, tmp_path / "llama")
    _rewrite_weights(llama, lambda state: {**state, "model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(4)})
    assert build_metric("perplexity", {"model": str(llama)}).score_rows(rows)[0].get("error") is None
    # a leftover layer is still refused, in any model and with or without its base prefix
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=10, n_positions=8))
    for key in ("transformer.h.3.mlp.c_fc.weight", "h.3.mlp.c_fc.weight"):
        with pytest.raises(UsageError, match="which the model has no place for"):
            _check_loaded_weights(model, {"unexpected_keys": {key}}, "m", ())
    _check_loaded_weights(model, {"unexpected_keys": {"h.3.attn.masked_bias", "roberta.embeddings.position_ids"}}, "m", ())


@pytest.mark.parametrize("declared, message", [
    (2**62, "declares 4,611,686,018,427,387,904 bytes, more than the file holds"),
    (50_000_000, "declares 50,000,000 bytes, more than the file holds"),
])
def test_a_safetensors_header_longer_than_its_file_is_refused_by_name(tiny_models, tmp_path, declared, message):
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    with open(folder / "model.safetensors", "r+b") as handle:
        handle.write(struct.pack("<Q", declared))
    with pytest.raises(UsageError) as caught:
        build_metric("perplexity", {"model": str(folder)})
    assert f"model file {folder / 'model.safetensors'}: the safetensors header {message}" == str(caught.value)


def test_a_header_whose_shapes_disagree_with_its_bytes_is_refused(tiny_models, tmp_path):
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    raw = (folder / "model.safetensors").read_bytes()
    length = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + length])
    header["transformer.wte.weight"]["shape"] = [10**6, 64]
    text = json.dumps(header).encode()
    text += b" " * (length - len(text)) if len(text) <= length else b""
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length:])
    with pytest.raises(UsageError, match=r"tensor 'transformer.wte.weight': shape \[1000000, 64\] of F32 takes 256,000,000 bytes"):
        build_metric("perplexity", {"model": str(folder)})


@pytest.mark.parametrize("shard", ["../../../../../etc/passwd", "../sibling/model.safetensors", "sub/model.safetensors"])
def test_a_shard_index_naming_files_outside_the_folder_is_refused(tiny_models, tmp_path, shard):
    sibling = tampered(tiny_models["gpt2"], tmp_path / "sibling")  # real weights the signature would never hash
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    os.rename(folder / "model.safetensors", folder / "model-00001-of-00002.safetensors")
    keys = json.loads((sibling / "model.safetensors").read_bytes()[8:8 + struct.unpack("<Q", (sibling / "model.safetensors").read_bytes()[:8])[0]])
    weight_map = {key: "model-00001-of-00002.safetensors" for key in keys if key != "__metadata__"}
    weight_map["transformer.wte.weight"] = shard
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(UsageError, match=r"model.safetensors.index.json: weight_map\['transformer.wte.weight'\] names .*not a "
                                         r"\.safetensors file of this folder"):
        build_metric("perplexity", {"model": str(folder)})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors"])
def test_a_device_or_pipe_in_the_folder_is_refused_before_it_is_read(tiny_models, tmp_path, name):
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    (folder / name).unlink()
    if name == "model.safetensors":
        (folder / "model.safetensors").write_bytes((pathlib.Path(tiny_models["gpt2"]) / name).read_bytes())
        os.mkfifo(folder / "extra.safetensors")  # opened for hashing, it would block forever
        name = "extra.safetensors"
    else:
        os.symlink("/dev/zero", folder / name)  # read as JSON, it would never end
    with pytest.raises(UsageError, match=f"model file {folder / name}: not a regular file"):
        build_metric("perplexity", {"model": str(folder)})


def test_a_symlink_to_weights_outside_is_followed_and_hashed(tiny_models, tmp_path):
    """The layout of Hugging Face's own cache (snapshots linking to blobs): followed, and the
    signature hashes the bytes the link points to."""
    from scoring.models import weights_digest

    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    (folder / "model.safetensors").unlink()
    os.symlink(pathlib.Path(tiny_models["gpt2"]) / "model.safetensors", folder / "model.safetensors")
    metric = build_metric("perplexity", {"model": str(folder)})
    assert weights_digest(tiny_models["gpt2"]) in str(metric.signature())


# ----- tokenizer files ---------------------------------------------------------------------------
def test_a_vocabulary_past_the_cap_is_refused_before_the_tokenizer_loads(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setattr(model_files, "MAX_VOCABULARY", 2_000, raising=False)  # the real cap is 1,048,576 entries
    monkeypatch.setattr(model_files, "VOCABULARY_COUNTED_PAST", 0, raising=False)
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"].update({f"zz{i}": 1000 + i for i in range(1_500)})
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(UsageError, match=r"tokenizer.json: a vocabulary of 2,501 entries, more than 2,000"):
        build_metric("perplexity", {"model": str(folder)})


def test_a_tokenizer_class_with_remote_code_runs_no_code(tiny_models, tmp_path):
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    (folder / "evil.py").write_text(f"open({str(tmp_path / 'MARKER')!r}, 'w').close()\n"
                                    "from transformers import PreTrainedTokenizerFast\nclass EvilTokenizer(PreTrainedTokenizerFast): pass\n")
    edit_json(folder / "tokenizer_config.json", tokenizer_class="EvilTokenizer", auto_map={"AutoTokenizer": [None, "evil.EvilTokenizer"]})
    metric = build_metric("perplexity", {"model": str(folder)})
    assert metric.score_rows(ROWS)[0]["error"] is None
    assert not (tmp_path / "MARKER").exists()


def test_a_pre_tokenizer_regex_that_backtracks_fails_the_row_it_meets(chat_llm, tmp_path):
    """`(a|a)+$` backtracks exponentially on `aaa...!`: Oniguruma stops at its retry limit and
    the tokenizers library panics (a `BaseException`), which used to end the whole run."""
    folder = tampered(chat_llm, tmp_path / "llama")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a|a)+$"}, "behavior": "Isolated", "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    metric = build_metric("perplexity", {"model": str(folder)})
    out = metric.score_rows([{"id": "a", "text": "a" * 40 + "!"}, {"id": "b", "text": "A calm day at sea."}])
    assert out[0]["error"].startswith("PanicException: ") and "retry-limit-in-match" in out[0]["error"]
    assert out[1]["error"] is None and out[1]["perplexity"] > 1


def with_backtracking_regex(chat_llm: str, out: pathlib.Path) -> pathlib.Path:
    """A tiny Llama whose pre-tokenizer panics inside the tokenizers library on `aaa...!`."""
    folder = tampered(chat_llm, out)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a|a)+$"}, "behavior": "Isolated", "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


@pytest.mark.timeout(120)
def test_ctgscore_score_keeps_rust_panic_reports_off_the_console(chat_llm, tmp_path):
    """Rust's panic hook wrote `thread '<unnamed>' panicked at ...` and a backtrace to stderr
    once per attempt (the batch, then each bisection step), in the middle of the progress line;
    the panic now reaches the console only as the row's error, with the panic's location."""
    from ctgscore.testing.cli import run_cli

    folder = with_backtracking_regex(chat_llm, tmp_path / "llama")
    pq.write_table(pa.Table.from_pylist([{"id": "a", "text": "a" * 40 + "!"}, {"id": "b", "text": "A calm day at sea."},
                                         {"id": "c", "text": "Another line."}]), tmp_path / "in.parquet")
    proc = run_cli(["score", "-m", "perplexity", "--param", f"model={folder}", "-i", tmp_path / "in.parquet",
                    "-o", tmp_path / "out.parquet", "--max-error-rate", "0.5"], env={"RUST_BACKTRACE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "panicked at" not in proc.stderr and "stack backtrace" not in proc.stderr and "RUST_BACKTRACE" not in proc.stderr
    reason = "PanicException: Onig: Regex search error: retry-limit-in-match over (panicked at onig-"
    assert reason in proc.stdout and "/src/lib.rs:" in proc.stdout
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert out[0]["error"].startswith(reason) and [row["error"] for row in out[1:]] == [None, None]


def test_stderr_written_during_a_panicking_tokenizer_call_still_reaches_stderr(chat_llm, tmp_path, capfd):
    """A custom pre-tokenizer writes a line to descriptor 2 inside the Rust call, then the regex
    panics: the line is forwarded once the call ends, the panic report is not."""
    from tokenizers import pre_tokenizers

    from scoring.models import load_tokenizer, resolve_model

    class WritesToStderr:
        def pre_tokenize(self, pretokenized):
            os.write(2, b"an ordinary line from inside the tokenizer call\n")

    tokenizer = load_tokenizer(resolve_model(str(with_backtracking_regex(chat_llm, tmp_path / "llama"))))
    backend = tokenizer.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.PreTokenizer.custom(WritesToStderr()), backend.pre_tokenizer])
    capfd.readouterr()
    with pytest.raises(BaseException, match=r"retry-limit-in-match over \(panicked at onig-[^ ]*/src/lib\.rs:\d+:\d+\)$") as caught:
        tokenizer(["a" * 40 + "!"], add_special_tokens=False)
    assert type(caught.value).__name__ == "PanicException"
    err = capfd.readouterr().err
    assert err == "an ordinary line from inside the tokenizer call\n"
    assert tokenizer(["a calm sea"], add_special_tokens=False)["input_ids"][0]  # the same tokenizer still works
    assert capfd.readouterr().err.count("an ordinary line") == 1


def test_ctgscore_score_on_a_hostile_config_exits_2_with_one_line(tiny_models, tmp_path, cli, no_allocation):
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    edit_json(folder / "config.json", vocab_size=-5)
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "in.parquet")
    proc = cli(["score", "-m", "perplexity", "--param", f"model={folder}", "-i", str(tmp_path / "in.parquet"),
                "-o", str(tmp_path / "out.parquet")])
    assert_user_error(proc, 2, f"model file {folder / 'config.json'}: describes no model that can be built")
    assert not (tmp_path / "out.parquet").exists()


def test_a_forged_digest_sidecar_in_the_folder_is_not_believed(tiny_models, tmp_path):
    """A folder unpacked from an archive keeps the names, sizes and modification times it was
    packed with, so a `.ctgscore-digest.json` shipped in it could name other weights' digest."""
    import hashlib

    from scoring.models import resolve_model

    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    weights = folder / "model.safetensors"
    stamp = [["model.safetensors", weights.stat().st_size, weights.stat().st_mtime_ns]]
    (folder / ".ctgscore-digest.json").write_text(json.dumps({"stamp": stamp, "digest": "0123456789abcdef"}))
    expected = hashlib.sha256(b"model.safetensors" + weights.read_bytes()).hexdigest()[:16]
    assert resolve_model(str(folder)).identity()["revision"] == f"sha256:{expected}"


@pytest.mark.parametrize("value, message", [
    (10**400, "config.json: n_layer is 10000000000000000000... (401 characters); a whole number from 0 to 1000"),
    (2.5, "its config.json cannot be loaded (StrictDataclassFieldValidationError: Validation error for field 'n_layer'"),
])
def test_a_layer_count_that_is_no_whole_number_in_range_is_refused(tiny_models, tmp_path, no_allocation, value, message):
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    (folder / "config.json").write_text((folder / "config.json").read_text().replace('"n_layer": 2', f'"n_layer": {value}'))
    with pytest.raises(UsageError, match=re.escape(message)):
        build_metric("perplexity", {"model": str(folder)})


def test_an_unfetched_git_lfs_pointer_is_named(tiny_models, tmp_path):
    folder = tampered(tiny_models["gpt2"], tmp_path / "gpt2")
    (folder / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 789064\n")
    with pytest.raises(UsageError, match=r"model.safetensors: the safetensors header declares .*\(a Git LFS pointer: fetch the file itself\)"):
        build_metric("perplexity", {"model": str(folder)})


def test_a_hostile_bartscore_state_dict_is_one_error(tiny_models, tmp_path):
    """`bartscore`'s `state_dict` (a fine-tuned file on top of the model, ParaBank's) is a model
    file too: a tensor of another shape, a header that lies, a device are one `state_dict:` line."""
    import torch
    from safetensors.torch import save_file

    shapes = tmp_path / "shapes.safetensors"
    save_file({"model.shared.weight": torch.zeros(7, 3)}, str(shapes))
    lying = tmp_path / "lying.safetensors"
    lying.write_bytes(struct.pack("<Q", 2**40) + b"{}")
    os.symlink("/dev/zero", tmp_path / "zero.safetensors")
    for path, message in ((shapes, "does not fit"), (lying, "the safetensors header declares 1,099,511,627,776 bytes"),
                          (tmp_path / "zero.safetensors", "not a regular file")):
        with pytest.raises(UsageError, match=f"state_dict: .*{message}"):
            build_metric("bartscore", {"model": tiny_models["bart"], "state_dict": str(path), "directions": ["s_h"]})

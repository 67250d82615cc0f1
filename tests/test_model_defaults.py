"""An unset `max_length` follows the model (its position table; the tokenizer's limit for
relative positions such as T5's), the value goes into the signature, and an explicit value past
the table is still refused with exit 2; BARTScore through a tiny T5 (FLAN-T5's architecture)
against a naive teacher-forced loop."""

from __future__ import annotations

import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from scoring.errors import UsageError
from scoring.registry import build_metric

ROWS = [{"id": str(i), "text": f"The council met on day {i} and approved the budget.",
         "source": f"On day {i} the council approved the new budget after a debate.", "prefix": "The council",
         "references": ["The council approved the budget."]} for i in range(3)]


def _with_positions(folder: str, out: pathlib.Path, positions: int) -> str:
    """A copy of a tiny model whose position table really has `positions` rows (weights included)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    causal = config.model_type == "gpt2"
    setattr(config, "n_positions" if causal else "max_position_embeddings", positions)
    loader = AutoModelForCausalLM if causal else AutoModelForSeq2SeqLM
    torch.manual_seed(0)
    model = loader.from_config(config)
    source = loader.from_pretrained(folder).state_dict()
    state = {k: v[: positions + (2 if "embed_positions" in k and config.model_type == "bart" else 0)]
             if ("wpe" in k or "embed_positions" in k) and v.dim() == 2 else v for k, v in source.items()}
    model.load_state_dict(state, strict=False)
    model.save_pretrained(str(out), safe_serialization=True)
    AutoTokenizer.from_pretrained(folder).save_pretrained(str(out))
    return str(out)


@pytest.fixture(scope="module")
def models_512(tiny_models, tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("p512")
    return {name: _with_positions(tiny_models[name], root / name, 512) for name in ("bart", "pegasus", "gpt2")}


@pytest.mark.timeout(600)
def test_unset_max_length_is_the_position_table_and_named_in_the_signature(models_512, tiny_models):
    from scoring.bartscore import BARTScorer
    from scoring.ctrleval import CTRLEval
    from scoring.perplexity import Perplexity

    bart = BARTScorer(models_512["bart"])
    assert bart.max_length == 512 and bart.score(["a source ."], ["a target ."])[0] < 0
    ctrl = CTRLEval(models_512["pegasus"], iwf=tiny_models["iwf"])
    assert ctrl.max_length == 512
    ppl = Perplexity(models_512["gpt2"])
    assert ppl.max_length == 512 and ppl.score(["a short text ."])[0] > 1
    for name, params in (("bartscore", {"model": models_512["bart"], "directions": ["s_h"]}),
                         ("ctrleval", {"model": models_512["pegasus"], "iwf": tiny_models["iwf"], "aspects": ["coherence"]}),
                         ("perplexity", {"model": models_512["gpt2"]})):
        metric = build_metric(name, params)
        assert "|max_length:512|" in metric.signature_string() + "|", name
        out = metric.score_rows(ROWS)
        assert all(r["error"] is None for r in out), (name, out)
        with pytest.raises(UsageError, match="max_length 1024 is past the position table .* .512 positions"):
            build_metric(name, {**params, "max_length": 1024})
    # a 1,024-position model keeps its 1,024 (the shipped demo's signatures do not move)
    assert "|max_length:1024|" in build_metric("bartscore", {"model": tiny_models["bart"], "directions": ["s_h"]}).signature_string()


@pytest.mark.timeout(600)
def test_cli_explicit_max_length_past_the_table_exits_2(models_512, tmp_path):
    from ctgscore.testing.cli import run_cli

    source = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([{k: r[k] for k in ("id", "text", "source")} for r in ROWS]), source)
    base = ["score", "-m", "bartscore", "--param", f"model={models_512['bart']}", "--param", "directions=s_h", "-i", source]
    proc = run_cli(base + ["-o", tmp_path / "ok.parquet"])
    assert proc.returncode == 0, proc.stderr
    assert all(r["bartscore_s_h"] < 0 for r in pq.read_table(tmp_path / "ok.parquet").to_pylist())
    proc = run_cli(base + ["--param", "max_length=1024", "-o", tmp_path / "refused.parquet"])
    assert proc.returncode == 2 and "max_length 1024 is past the position table" in proc.stderr


@pytest.mark.timeout(600)
def test_bartscore_with_a_tiny_t5_matches_a_teacher_forced_loop(tmp_path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from ctgscore.testing.tiny_llms import build_t5
    from scoring.bartscore import BARTScoreMetric

    folder = str(build_t5(tmp_path / "t5"))
    metric = BARTScoreMetric(model=folder, directions=["s_h"])
    # relative positions: no table, so the tokenizer's limit
    assert metric.scorer.limits.positions is None and metric.scorer.max_length == 512
    assert "|max_length:512|" in metric.signature_string() + "|"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    out = metric.score_rows(ROWS)
    for row, result in zip(ROWS, out):
        source = tokenizer(row["source"])["input_ids"]
        target = tokenizer(row["text"])["input_ids"]  # with </s>, as BARTScore scores it
        decoder_inputs = [model.config.decoder_start_token_id] + target[:-1]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder_inputs])).logits[0]
        logprobs = torch.log_softmax(logits.float(), -1)
        expected = sum(logprobs[t, y].item() for t, y in enumerate(target)) / len(target)
        assert result["error"] is None and result["bartscore_s_h"] == pytest.approx(expected, abs=1e-5)


@pytest.mark.timeout(300)
def test_classifiers_follow_their_table_and_refuse_an_explicit_length_past_it(tmp_path):
    from ctgscore.testing.tiny_classifier import build_tiny_classifier
    from scoring.codi.classifiers import SequenceClassifier

    folder = str(build_tiny_classifier(tmp_path / "c128", ["neg", "pos"], max_positions=128))
    roberta = str(build_tiny_classifier(tmp_path / "r128", ["neg", "pos"], arch="roberta", max_positions=128))
    assert SequenceClassifier(folder).max_length == 128 and SequenceClassifier(roberta).max_length == 128
    with pytest.raises(UsageError, match="max_length 512 is past the position table .* .128 positions"):
        SequenceClassifier(folder, max_length=512)
    assert SequenceClassifier(folder, max_length=512, clamp_to_table=True).max_length == 128  # CoDI-Eval's shared value
    metric = build_metric("attribute_accuracy", {"classifiers": {"sentiment": folder}})
    assert '"sentiment":128' in metric.signature_string()
    out = metric.score_rows([{"id": "a", "text": "word " * 300, "attributes": {"sentiment": "pos"}}])
    assert out[0]["error"] is None and out[0]["warning"] == "truncated to the classifier's max_length"
    with pytest.raises(UsageError, match="past the position table"):
        build_metric("attribute_accuracy", {"classifiers": {"sentiment": folder}, "max_length": 512})

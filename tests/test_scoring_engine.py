"""Engine behaviour: OOM splitting, no swallowed failures, truncation flags, dtypes,
signatures, state-dict loading, safetensors-only loading, the row contract and the CLI."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch

from scoring.bartscore import BARTScoreMetric, BARTScorer
from scoring.ctrleval import CTRLEvalMetric
from scoring.engine import budget_batches
from scoring.metric import RowError, RowMetric
from scoring.models import resolve_model, weights_digest
from scoring.perplexity import PerplexityMetric
from scoring.registry import build_metric
from scoring.signature import Signature


@pytest.fixture(scope="module")
def bart(tiny_models):
    return BARTScorer(tiny_models["bart"])


SRCS = ["The quick brown fox jumps over the lazy dog near the river bank.", "Short source.", "A medium sized source sentence here."]
TGTS = ["A fox jumps.", "Something rather longer than the others in this little batch.", "Medium target."]


def test_budget_batches_respects_budget_and_keeps_everything():
    lengths = [5, 40, 12, 7, 33, 1]
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches = budget_batches(lengths, order, token_budget=60)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 60
    assert budget_batches([500], [0], token_budget=10) == [[0]]  # an oversized item still runs alone


def test_budget_batches_caps_padding_per_batch():
    lengths = [100, 95, 91, 89, 60, 58, 57, 20]
    order = list(range(len(lengths)))  # already longest first
    assert len(budget_batches(lengths, order, token_budget=10_000)) == 1
    capped = budget_batches(lengths, order, token_budget=10_000, max_padding=0.1)
    assert capped == [[0, 1, 2], [3], [4, 5, 6], [7]]
    for batch in capped:
        assert min(lengths[i] for i in batch) >= 0.9 * max(lengths[i] for i in batch)


def _patch_forward(monkeypatch, module, wrapper):
    original = module.forward
    monkeypatch.setattr(module, "forward", lambda *args, **kwargs: wrapper(original, *args, **kwargs))


def test_out_of_memory_splits_and_retries(bart, monkeypatch):
    expected = bart.score(SRCS, TGTS)

    def fail_on_batches(original, *args, **kwargs):
        batch = kwargs.get("input_ids")
        if batch is not None and batch.shape[0] > 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(*args, **kwargs)

    _patch_forward(monkeypatch, bart.model.get_encoder(), fail_on_batches)
    _patch_forward(monkeypatch, bart.model.get_decoder(), fail_on_batches)
    before = bart.engine.stats["oom_splits"]
    assert bart.score(SRCS, TGTS) == pytest.approx(expected, abs=1e-5)
    assert bart.engine.stats["oom_splits"] > before


def test_other_failures_are_not_swallowed(bart, monkeypatch):
    def broken(original, *args, **kwargs):
        raise RuntimeError("device-side assert triggered")

    _patch_forward(monkeypatch, bart.model.get_decoder(), broken)
    with pytest.raises(RuntimeError, match="device-side assert"):
        bart.score(SRCS, TGTS)


def test_truncation_is_flagged(tiny_models):
    metric = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"], max_length=12)
    rows = [{"id": "a", "text": "Short.", "source": "A short source."},
            {"id": "b", "text": "Short.", "source": " ".join(["word"] * 50)}]
    results = metric.score_rows(rows)
    assert results[0]["warning"] is None
    assert "truncated" in results[1]["warning"] and results[1]["bartscore_s_h"] < 0


def test_bfloat16_runs_and_tracks_float32(tiny_models):
    fp32 = BARTScorer(tiny_models["bart"], dtype="float32").score(SRCS, TGTS)
    bf16_scorer = BARTScorer(tiny_models["bart"], dtype="bfloat16")
    assert next(bf16_scorer.model.parameters()).dtype == torch.bfloat16
    bf16 = bf16_scorer.score(SRCS, TGTS)
    assert all(abs(a - b) < 0.25 for a, b in zip(fp32, bf16))


def test_signature_names_everything_that_changes_numbers(tiny_models):
    base = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"])
    prompted = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"], prompts="src_hypo")
    half = BARTScoreMetric(model=tiny_models["bart"], directions=["s_h"], dtype="bfloat16")
    text = str(base.signature())
    for key in ("metric:bartscore", "v:", "model:tiny-bart", "revision:sha256:", "dtype:float32", "max_length:1024", "prompts:none", "batching:", "torch:", "transformers:"):
        assert key in text
    assert "prompts:70:" in str(prompted.signature())
    assert len({base.signature().digest, prompted.signature().digest, half.signature().digest}) == 3
    row = {"id": "x", "text": "t", "source": "s"}
    assert base.row_key(row) != half.row_key(row)
    assert base.row_key(row) != base.row_key({**row, "text": "u"})
    assert base.row_key(row) == base.row_key({**row, "system": "ignored column"})


def test_signature_string_is_stable():
    sig = Signature("m", "1", {"b": 2, "a": [1, 2]})
    assert str(sig) == "metric:m|v:1|a:[1,2]|b:2"


def test_state_dict_on_top_of_checkpoint(tiny_models, tmp_path):
    from safetensors.torch import save_file

    scorer = BARTScorer(tiny_models["bart"])
    before = scorer.score(SRCS, TGTS)
    changed = ("model.decoder.layers.0.fc1.weight", "model.shared.weight")  # incl. the output embedding
    state = {k: v.clone() * 3.0 for k, v in scorer.model.state_dict().items() if k in changed}
    save_file(state, str(tmp_path / "finetuned.safetensors"))
    scorer.load(str(tmp_path / "finetuned.safetensors"))
    after = scorer.score(SRCS, TGTS)
    assert all(abs(a - b) > 1e-4 for a, b in zip(before, after))
    reference = BARTScorer(tiny_models["bart"])  # the same weights loaded into a fresh scorer
    reference.model.load_state_dict(state, strict=False)
    reference.model.tie_weights()
    reference.engine.head = None  # the model's own forward, nothing cached
    assert after == pytest.approx(reference.score(SRCS, TGTS), abs=1e-5)
    assert scorer.signature_params()["state_dict"].startswith("sha256:")
    with pytest.raises(ValueError, match="safetensors"):
        scorer.load(str(tmp_path / "finetuned.bin"))


def test_model_resolution(tiny_models, tmp_path):
    source = resolve_model(tiny_models["gpt2"])
    assert not source.is_hub and source.identity()["revision"] == f"sha256:{weights_digest(tiny_models['gpt2'])}"
    assert resolve_model("facebook/bart-large-cnn").is_hub
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "pytorch_model.bin").write_bytes(b"not really")
    with pytest.raises(ValueError, match="safetensors"):
        resolve_model(str(pickled))
    with pytest.raises(FileNotFoundError):
        resolve_model("./does/not/exist")


def test_tiny_models_are_deterministic(tiny_models, tmp_path):
    from ctgscore.testing.tiny_models import build_tiny_models

    again = build_tiny_models(tmp_path / "again")
    for name in ("pegasus", "bart", "gpt2"):
        assert weights_digest(again[name]) == weights_digest(tiny_models[name])
    assert open(again["iwf"]).read() == open(tiny_models["iwf"]).read()


class _Fragile(RowMetric):
    """A metric whose batch call fails when a poisoned row is present."""

    name = "fragile"
    output_columns = ("fragile_len",)

    def signature(self):
        return Signature(self.name, "1")

    def score_valid(self, rows):
        for i, row in enumerate(rows):
            if row["text"] == "bad-row":
                raise RowError(i, "this row is bad")
        if any(row["text"] == "crash" for row in rows):
            raise RuntimeError("batch crashed")
        return [{"fragile_len": float(len(row["text"]))} for row in rows]


def test_score_rows_never_loses_a_row():
    rows = [{"id": str(i), "text": t} for i, t in enumerate(["ok", "bad-row", None, "  ", "crash", "fine", "also fine"])]
    rows.append({"id": "7"})
    results = _Fragile().score_rows(rows)
    assert len(results) == len(rows)
    assert [r["error"] for r in results] == [None, "this row is bad", "null field 'text'", "empty field 'text'",
                                             "RuntimeError: batch crashed", None, None, "missing field 'text'"]
    assert [r["fragile_len"] for r in results] == [2.0, None, None, None, None, 4.0, 9.0, None]


def test_ctrleval_metric_error_rows(tiny_models):
    metric = CTRLEvalMetric(model=tiny_models["pegasus"], iwf=tiny_models["iwf"], task="sentiment")
    rows = [
        {"id": "0", "text": "The book is about NLP. It is nice.", "prefix": "The book", "attribute": "positive"},
        {"id": "1", "text": "Wrong start. Yes.", "prefix": "The book", "attribute": "positive"},
        {"id": "2", "text": "The book is here.", "prefix": "The book", "attribute": "sports"},
        {"id": "3", "text": "The book", "prefix": "The book", "attribute": "negative"},
        {"id": "4", "text": "The film was long. It was fine.", "prefix": "The film", "attribute": "negative"},
    ]
    results = metric.score_rows(rows)
    assert results[0]["error"] is None and results[4]["error"] is None
    assert "does not start with its prefix" in results[1]["error"]
    assert "not one of the verbaliser labels" in results[2]["error"]
    assert "nothing after its prefix" in results[3]["error"]
    alone = metric.score_rows([rows[4]])[0]
    for column in metric.output_columns:
        assert alone[column] == pytest.approx(results[4][column], abs=1e-5)


def test_registry_rejects_unknown_names_and_parameters(tiny_models):
    with pytest.raises(ValueError, match="unknown metric 'nope'"):
        build_metric("nope")
    with pytest.raises(ValueError, match="'perplexity'.*'temperature'"):
        build_metric("perplexity", {"model": tiny_models["gpt2"], "temperature": 2})
    assert isinstance(build_metric("perplexity", {"model": tiny_models["gpt2"]}), PerplexityMetric)


def test_cli_score_keeps_every_row(tiny_models, sample_corpus, tmp_path, capsys):
    from ctgscore.cli import main

    source = pq.read_table(sample_corpus / "ctrleval_senti-00000.parquet").slice(0, 10)
    rows = source.to_pylist()
    rows[3]["text"] = ""
    rows[5]["text"] = "Does not start with the prefix."
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows, schema=source.schema), tmp_path / "in.parquet")
    code = main(["score", "--metric", "ctrleval", "--param", f"model={tiny_models['pegasus']}", "--param", f"iwf={tiny_models['iwf']}",
                 "--param", "task=sentiment", "--param", "aspects=[coh,cons]", "--input", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "out.parquet"),
                 "--max-error-rate", "1"])
    assert code == 0  # 2 of 10 rows fail on purpose; a rate of 1 never fails the run on row errors
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert len(out) == 10 and sum(r["error"] is not None for r in out) == 2
    assert [r["id"] for r in out] == [r["id"] for r in rows]
    assert out[3]["error"] == "empty field 'text'" and "prefix" in out[5]["error"]
    assert all(r["ctrleval_coherence"] is not None for i, r in enumerate(out) if i not in (3, 5))
    assert out[0]["human_coherence"] == rows[0]["human_coherence"]


def test_plain_forward_fallback_matches_fast_head(tiny_models):
    """Architectures outside OutputHead.ARCHITECTURES use the model's own forward; both paths
    give the same numbers."""
    fast = BARTScorer(tiny_models["bart"])
    plain = BARTScorer(tiny_models["bart"])
    plain.engine.head = None
    assert fast.engine.head is not None
    assert plain.score(SRCS, TGTS) == pytest.approx(fast.score(SRCS, TGTS), abs=1e-5)


def test_decode_layouts_agree_and_short_targets_read_keys_in_place(bart, monkeypatch):
    """Both decoder layouts (by length, with key/value copies; by target slot, reading slices of
    the cached keys/values) give the same numbers; label-word-like targets, short next to their
    sources, are decoded by slot (auto), and then no cross-attention keys are copied."""
    sources = [s * 3 for s in SRCS]
    engine = bart.engine
    source_ids = [bart.tokenizer(s).input_ids for s in sources]
    target_ids = [[bart.tokenizer(w).input_ids for w in ("good", "bad", "great")]] * len(sources)
    batch = list(range(len(sources)))
    plan = engine._decode_plan(batch, target_ids, max(map(len, source_ids)))
    assert all(len({j for _, _, j in chunk}) == 1 for chunk in plan), "expected one target slot per chunk"
    gathered = []
    original = torch.Tensor.index_select
    monkeypatch.setattr(torch.Tensor, "index_select", lambda t, d, i: gathered.append(t.dim()) or original(t, d, i))
    by_slot = engine.mean_nll(source_ids, target_ids)
    assert 4 not in gathered  # no (rows, heads, length, dim) key/value gathers
    monkeypatch.setattr(engine, "layout", "by_length")
    assert any(len({i for _, i, _ in chunk}) > 1 for chunk in engine._decode_plan(batch, target_ids, 1))
    by_length = engine.mean_nll(source_ids, target_ids)
    assert 4 in gathered
    for slot_row, length_row in zip(by_slot, by_length):
        assert slot_row == pytest.approx(length_row, abs=1e-5)
    # in each slot, targets of very different lengths next to short sources: by length (less padding)
    words = lambda n: bart.tokenizer(" ".join(["word"] * n)).input_ids  # noqa: E731
    long_targets = [[words(2), words(40)], [words(40), words(2)], [words(3), words(38)]]
    monkeypatch.setattr(engine, "layout", "auto")
    monkeypatch.setattr(engine, "decode_token_budget", 2 * len(words(40)))
    plan = engine._decode_plan(batch, long_targets, 4)
    assert any(len({j for _, _, j in chunk}) > 1 for chunk in plan)


def test_one_source_many_targets_attend_as_one_query_sequence(tiny_models, monkeypatch):
    """Targets of a single source (a decoder-side prompt ensemble) share the source's keys and
    values: the folded cross-attention is taken and equals the model's own forward."""
    from scoring import shared_source_attention
    from scoring.resources import BARTSCORE_PROMPTS
    from scoring.text_encoding import read_lines

    fast = BARTScorer(tiny_models["bart"])
    plain = BARTScorer(tiny_models["bart"])
    plain.engine.head = None  # the model's own forward: no broadcast keys, nothing folded
    assert fast.engine.shared_source_attention
    folded = []
    original = shared_source_attention._is_broadcast
    monkeypatch.setattr(shared_source_attention, "_is_broadcast", lambda t: folded.append(original(t)) or original(t))
    prompts = read_lines(BARTSCORE_PROMPTS["src_hypo"], "prompt")[:12]
    got = fast.score_prompted(SRCS[:1], TGTS[:1], prompts, side="decoder")
    assert any(folded)
    assert got == pytest.approx(plain.score_prompted(SRCS[:1], TGTS[:1], prompts, side="decoder"), abs=1e-5)

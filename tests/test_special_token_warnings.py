"""A fidelity metric scores a text holding a special-token string as its original does, and the
row's `warning` says so (docs/security.md, "Special tokens in data"): per metric, on the tiny
models, a text with `</s>` (or `[SEP]` for the BERT classifiers) gets the note and the number
the metric's own scorer gives the same text (the call shape of the original), a clean text and
one holding only a look-alike (`< /s>`) get none; `ctgscore score` counts the rows with a
warning; the job's summary line names its count."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.parsed_tokens import ParsedTokens
from scoring.registry import build_metric

PARSED = "(parsed as a special token, as the original does)"
CLEAN = "The cat sat on the mat. It was happy."
TOL = 1e-5  # float32 batches of other shapes (as tests/test_fidelity_bartscore.py)
LOOKALIKE = "The cat sat on the mat.< /s> It was happy.<s >"


def _warnings(out):
    return [row["warning"] for row in out]


# ----- the check itself --------------------------------------------------------------------
def test_control_strings_are_every_special_token_but_unk(tiny_models):
    from transformers import AutoTokenizer

    found = ParsedTokens(AutoTokenizer.from_pretrained(tiny_models["bart"]))
    assert found.found(["a <unk> b", LOOKALIKE, None, ""]) == []
    assert found.found(["x</s><pad>", "<s>y</s>"]) == ["</s>", "<pad>", "<s>"]
    note = found.note([("text", ["a <mask> b"]), ("source", [None]), ("references", ["<s>", "<pad><pad>"])])
    assert note == "text holds '<mask>', references hold '<s>', '<pad>' (parsed as special tokens, as the original does)"
    many = found.note([("text", ["<s></s><pad><mask>"])])
    assert many == "text holds '<s>', '</s>', '<pad>' and 1 more (parsed as special tokens, as the original does)"


# ----- BARTScore ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bartscore(tiny_models):
    return build_metric("bartscore", {"model": tiny_models["bart"], "directions": ["s_h", "r_h", "h_r", "f"]})


def test_bartscore_names_each_field_and_keeps_the_scores(bartscore):
    rows = [
        {"id": "eos", "text": "The cat sat.</s>", "source": "A cat sat on a mat.", "references": ["The cat sat."]},
        {"id": "many", "text": "The cat sat.<pad>", "source": "A <s>cat sat.", "references": ["A cat.</s>", "The cat."]},
        {"id": "clean", "text": CLEAN, "source": "A cat sat on a mat.", "references": ["The cat sat."]},
        {"id": "lookalike", "text": LOOKALIKE, "source": "A cat sat on a mat.", "references": ["The cat sat."]},
    ]
    out = bartscore.score_rows(rows)
    assert _warnings(out) == [f"text holds '</s>' {PARSED}",
                              "text holds '<pad>', source holds '<s>', references hold '</s>' "
                              "(parsed as special tokens, as the original does)", None, None]
    # the numbers are those of the original call shape (BARTScorer.score: text -> ids as parsed)
    scorer = bartscore.scorer
    for row, result in zip(rows, out):
        assert result["bartscore_s_h"] == pytest.approx(scorer.score([row["source"]], [row["text"]])[0], abs=TOL)
        precision = [scorer.score([ref], [row["text"]])[0] for ref in row["references"]]
        recall = [scorer.score([row["text"]], [ref])[0] for ref in row["references"]]
        assert result["bartscore_r_h"] == pytest.approx(np.mean(precision), abs=TOL)
        assert result["bartscore_h_r"] == pytest.approx(np.mean(recall), abs=TOL)


def test_bartscore_note_follows_truncation_and_crosses_the_stage_boundary(tiny_models):
    metric = build_metric("bartscore", {"model": tiny_models["bart"], "directions": ["s_h"], "max_length": 8})
    rows = [{"id": "a", "text": "The cat sat</s> on the mat and the dog sat on the rug.", "source": "A cat sat on a mat."}]
    table, reasons = metric.prepare_rows(rows)  # the CPU stage finds it; the device stage writes it
    assert reasons == [None] and table.column("parsed_tokens").to_pylist() == [f"text holds '</s>' {PARSED}"]
    assert _warnings(metric.score_prepared_rows(table)) == [f"truncated to max_length=8 tokens; text holds '</s>' {PARSED}"]


# ----- CTRLEval ----------------------------------------------------------------------------
def test_ctrleval_names_text_and_prefix_and_keeps_the_scores(tiny_models):
    metric = build_metric("ctrleval", {"model": tiny_models["pegasus"], "iwf": tiny_models["iwf"],
                                       "aspects": ["coherence", "consistency"]})
    rows = [
        {"id": "eos", "text": "The cat sat. It was happy.</s>", "prefix": "The cat"},
        {"id": "mask", "text": "The <mask_1> cat sat. It was happy.", "prefix": "The <mask_1> cat"},
        {"id": "clean", "text": CLEAN, "prefix": "The cat"},
        {"id": "lookalike", "text": LOOKALIKE, "prefix": "The cat"},
    ]
    out = metric.score_rows(rows)
    assert _warnings(out) == [f"text holds '</s>' {PARSED}", "text holds '<mask_1>', prefix holds '<mask_1>' "
                              "(parsed as special tokens, as the original does)", None, None]
    texts, prefixes = [r["text"] for r in rows], [r["prefix"] for r in rows]
    assert [r["ctrleval_coherence"] for r in out] == pytest.approx(metric.scorer.score("coherence", texts), abs=TOL)
    assert [r["ctrleval_consistency"] for r in out] == pytest.approx(
        metric.scorer.score("consistency", texts, prefix=prefixes), abs=TOL)


# ----- BERTScore ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_roberta(tmp_path_factory):
    from ctgscore.testing.tiny_models import build_roberta

    return str(build_roberta(tmp_path_factory.mktemp("tiny-roberta") / "roberta", seed=4))


def test_bertscore_names_text_and_references_and_keeps_the_scores(tiny_roberta):
    metric = build_metric("bertscore", {"model": tiny_roberta, "layer": 1})
    rows = [
        {"id": "eos", "text": "The cat sat.</s> It was happy.", "references": ["The cat sat on the mat."]},
        {"id": "ref", "text": CLEAN, "references": ["The cat sat.", "A cat<mask> sat."]},
        {"id": "clean", "text": CLEAN, "references": ["The cat sat on the mat."]},
        {"id": "lookalike", "text": LOOKALIKE, "references": ["The cat sat on the mat."]},
    ]
    out = metric.score_rows(rows)
    assert _warnings(out) == [f"text holds '</s>' {PARSED}", f"references hold '<mask>' {PARSED}", None, None]
    expected = metric.scorer.score([r["text"] for r in rows], [r["references"] for r in rows])
    for result, values in zip(out, expected):
        assert [result[c] for c in ("bertscore_p", "bertscore_r", "bertscore_f")] == pytest.approx(values, abs=TOL)


# ----- the classifiers: codi and attribute_accuracy ----------------------------------------
@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    from ctgscore.testing.tiny_classifier import build_tiny_classifier

    return str(build_tiny_classifier(tmp_path_factory.mktemp("cls") / "sen", ["neg", "pos"], init_range=0.5, seed=3))


CLASSIFIER_TEXTS = ["the happy child [SEP] plays with a ball", "the happy child plays with a ball",
                    "the happy child [ SEP] plays with a ball"]


def _direct_probs(classifier_path, texts):
    from scoring.codi.classifiers import SequenceClassifier, softmax

    logits, _ = SequenceClassifier(classifier_path).logits(texts)
    return softmax(logits)


def test_codi_names_the_string_its_classifier_parses_and_keeps_the_scores(classifier):
    metric = build_metric("codi", {"sentiment_model": classifier,
                                   "sentiment_label_map": {"positive sentiment": "pos", "negative sentiment": "neg"}})
    rows = [{"id": str(i), "text": text, "constraint": json.dumps({"task": "sentiment", "label": "positive sentiment"})}
            for i, text in enumerate(CLASSIFIER_TEXTS)]
    out = metric.score_rows(rows)
    assert _warnings(out) == [f"text holds '[SEP]' {PARSED}", None, None]
    probs = _direct_probs(classifier, CLASSIFIER_TEXTS)
    assert [r["codi_score"] for r in out] == pytest.approx(probs[:, 1].tolist(), rel=1e-5)


def test_codi_note_follows_the_truncation_note(classifier):
    metric = build_metric("codi", {"sentiment_model": classifier, "max_length": 16,
                                   "sentiment_label_map": {"positive sentiment": "pos", "negative sentiment": "neg"}})
    rows = [{"id": "0", "text": "the [SEP] dog " * 20, "constraint": json.dumps({"task": "sentiment", "label": "positive sentiment"})}]
    assert _warnings(metric.score_rows(rows)) == [f"sentiment input truncated to 16 tokens; text holds '[SEP]' {PARSED}"]


def test_attribute_accuracy_names_the_string_once_and_keeps_the_scores(classifier):
    # two aspects on the same classifier: the string is named once
    metric = build_metric("attribute_accuracy", {"classifiers": {"sentiment": classifier, "mood": classifier}})
    rows = [{"id": str(i), "text": text, "attributes": {"sentiment": "pos", "mood": "neg"}}
            for i, text in enumerate(CLASSIFIER_TEXTS)]
    out = metric.score_rows(rows)
    assert _warnings(out) == [f"text holds '[SEP]' {PARSED}", None, None]
    predicted = _direct_probs(classifier, CLASSIFIER_TEXTS).argmax(axis=-1)
    assert [r["attribute_accuracy_sentiment"] for r in out] == [float(p == 1) for p in predicted]
    assert [r["attribute_accuracy_mood"] for r in out] == [float(p == 0) for p in predicted]


# ----- summaries ---------------------------------------------------------------------------
def test_score_command_counts_the_rows_with_a_warning(cli, tiny_models, tmp_path):
    rows = [{"id": "eos", "text": "The cat sat.</s>", "source": "A cat sat on a mat."},
            {"id": "pad", "text": "The cat sat.<pad><pad>", "source": "A cat sat."},
            {"id": "clean", "text": CLEAN, "source": "A cat sat on a mat."},
            {"id": "lookalike", "text": LOOKALIKE, "source": "A cat sat on a mat."}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    args = ["score", "-m", "bartscore", "--param", "directions=[s_h]", "--param", f"model={tiny_models['bart']}",
            "-i", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "out.parquet")]
    proc = cli(args + ["--no-progress"])
    assert proc.returncode == 0, proc.stderr
    assert "4 rows, 0 with an error, 0 skipped, 2 with a warning;" in proc.stdout
    summary = json.loads(cli(args + ["--json"]).stdout)
    assert summary["warnings"] == 2
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [r["warning"] for r in out] == [f"text holds '</s>' {PARSED}", f"text holds '<pad>' {PARSED}", None, None]


def test_job_report_counts_the_rows_with_a_warning_of_the_parts_written(tmp_path):
    import types

    import fsspec

    from ray_jobs.entrypoint import run_summary
    from ray_jobs.job.manifest import summary_line
    from ray_jobs.job.plan import MetricPlan, Shard, ShardPlan
    from ray_jobs.job.report import metric_report
    from ray_jobs.job.write import write_part
    from ray_jobs.storage.listing import ShardInfo

    out = str(tmp_path / "out")
    metric = types.SimpleNamespace(label="bart", output_columns=("bartscore_s_h",), digest="d",
                                   spec=types.SimpleNamespace(name="bartscore"), params={}, signature="sig", described_on=None)
    info = ShardInfo(uri=str(tmp_path / "a.parquet"), rel="a.parquet", size=10, etag="e")
    plan = MetricPlan(metric=metric)
    plan.shards["a.parquet"] = shard_plan = ShardPlan(shard=Shard(info, 4, {}, "v"))
    shard_plan.units = [(0, 4)]
    unit = {"uri": info.uri, "rel": "a.parquet", "etag": "e", "size": 10, "start": 0, "stop": 4, "version": "v"}
    results = [{"bartscore_s_h": -1.0, "error": None, "warning": f"text holds '</s>' {PARSED}", "skipped": None},
               {"bartscore_s_h": -1.0, "error": None, "warning": None, "skipped": None},
               {"bartscore_s_h": None, "error": "text has no tokens", "warning": None, "skipped": None},
               {"bartscore_s_h": -1.0, "error": None, "warning": "truncated to max_length=8 tokens", "skipped": None}]
    written = write_part(fsspec.filesystem("file"), out, metric, "sig", unit, ["a", "b", "c", "d"], {},
                         ["k1", "k2", "k3", "k4"], results, 0)
    assert written["warnings"] == 2
    committed = types.SimpleNamespace(covers=[types.SimpleNamespace(rel="a.parquet", uri=info.uri, parts=[1], num_rows=4)],
                                      replaced=0, kept_for_bad_shards=[], orphaned=[], pruned=[])
    verified = types.SimpleNamespace(rows_out=4, rows_error=1, parts={})
    report = metric_report(out, plan, committed, verified, [written],
                           {"started": 0.0, "ended": 1.0, "first_at": None, "rows_after_first": 0}, 0.0)
    assert report["rows_warning"] == 2
    manifest = {"metrics": {"bart": report}, "bad_shards": [], "input": {"files": []}, "wall_s": 1.0}
    assert "bart: 4 in -> 4 out, 4 scored, 0 reused, 1 errors, 2 with a warning" in summary_line(manifest)
    assert run_summary(manifest, out, [])["metrics"]["bart"]["rows_warning"] == 2
    del report["rows_warning"]  # none: not mentioned, as the other optional counts
    assert "warning" not in summary_line(manifest)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_job_warns_through_its_cpu_stage_and_a_reused_row_keeps_its_warning(ray_local, tiny_models, tmp_path):
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job, summary_line
    from tests.job_support import shard_rows

    rows = [{"id": "eos", "text": "The cat sat.</s>", "source": "A cat sat on a mat."},
            {"id": "clean", "text": CLEAN, "source": "A cat sat on a mat."},
            {"id": "pad", "text": "The cat sat.<pad>", "source": "A cat sat."},
            {"id": "lookalike", "text": LOOKALIKE, "source": "A cat sat on a mat."}]
    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in" / "a.parquet")
    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "progress": False,
                           "metrics": [{"name": "bartscore", "params": {"model": tiny_models["bart"], "directions": ["s_h"]}}],
                           "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}})
    expected = [f"text holds '</s>' {PARSED}", None, f"text holds '<pad>' {PARSED}", None]
    manifest = run_job(config)
    assert manifest["metrics"]["bartscore"]["rows_warning"] == 2
    assert "0 errors, 2 with a warning" in summary_line(manifest)
    scored = shard_rows(tmp_path / "out" / "bartscore", "a.parquet")
    assert [r["warning"] for r in scored] == expected
    # a changed shard: its unchanged rows come from the row cache, with the warning they were written with
    pq.write_table(pa.Table.from_pylist([*rows, {"id": "new", "text": "A new text.", "source": "A cat."}]),
                   tmp_path / "in" / "a.parquet")
    again = run_job(config)["metrics"]["bartscore"]
    assert again["rows_cached"] == 4 and again["rows_warning"] == 2
    rescored = shard_rows(tmp_path / "out" / "bartscore", "a.parquet")
    assert [r["warning"] for r in rescored] == [*expected, None]
    assert [r["bartscore_s_h"] for r in rescored[:4]] == [r["bartscore_s_h"] for r in scored]

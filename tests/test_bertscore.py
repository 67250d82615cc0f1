"""BERTScore equals the bert-score package on a tiny RoBERTa built here (same model, same
layer), with and without idf weights, over ragged references, and with baseline rescaling."""

from __future__ import annotations

import json

import pytest

from scoring.registry import build_metric
from tests import baseline_support


@pytest.fixture(scope="module")
def tiny_roberta(tmp_path_factory):
    from ctgscore.testing.tiny_models import build_roberta

    return str(build_roberta(tmp_path_factory.mktemp("tiny-roberta") / "roberta", seed=4))


@pytest.fixture(scope="module")
def ragged_rows(sample_corpus):
    return baseline_support.ragged_rows(sample_corpus, 12, 4)


def _package(rows, model, layer, **kwargs):
    import bert_score

    P, R, F = bert_score.score([r["text"] for r in rows], [r["references"] for r in rows], model_type=model,
                               num_layers=layer, batch_size=8, nthreads=0, **kwargs)
    return list(zip(P.tolist(), R.tolist(), F.tolist()))


def _worst(out, expected):
    return max(abs(r[c] - e) for r, values in zip(out, expected) for c, e in zip(("bertscore_p", "bertscore_r", "bertscore_f"), values))


@pytest.mark.parametrize("layer", [1, 2])
def test_bertscore_equals_the_package(tiny_roberta, ragged_rows, layer):
    out = build_metric("bertscore", {"model": tiny_roberta, "layer": layer, "token_budget": 512}).score_rows(ragged_rows)
    assert all(r["error"] is None for r in out)
    assert _worst(out, _package(ragged_rows, tiny_roberta, layer)) <= 1e-4
    assert len({round(r["bertscore_f"], 5) for r in out}) == len(out)


def test_bertscore_idf_and_baseline_equal_the_package(tiny_roberta, ragged_rows, tmp_path):
    from scoring.bertscore import BERTScorer, idf_table

    scorer = BERTScorer(tiny_roberta, layer=2)
    references = [r for row in ragged_rows for r in row["references"]]  # the package's idf documents
    (tmp_path / "idf.json").write_text(json.dumps(idf_table(scorer.tokenizer, references)))
    baseline = tmp_path / "baseline.csv"
    baseline.write_text("LAYER,P,R,F\n0,0.1,0.1,0.1\n1,0.2,0.25,0.22\n2,0.3,0.35,0.33\n")
    metric = build_metric("bertscore", {"model": tiny_roberta, "layer": 2, "idf": str(tmp_path / "idf.json"), "baseline": str(baseline)})
    out = metric.score_rows(ragged_rows)
    expected = _package(ragged_rows, tiny_roberta, 2, idf=True, rescale_with_baseline=True, baseline_path=str(baseline), lang="en")
    assert _worst(out, expected) <= 1e-4
    plain = build_metric("bertscore", {"model": tiny_roberta, "layer": 2})
    assert plain.signature().digest != metric.signature().digest  # idf and baseline are in the signature
    assert "idf:file:sha256:" in metric.signature_string()
    skipped = plain.score_rows([dict(ragged_rows[0], references=None)])[0]
    assert skipped["skipped"] == "no references" and skipped["error"] is None


def test_sentences_are_encoded_once_as_bert_score_truncates_them(tiny_roberta, sample_corpus):
    """One batched tokenizer call with truncation done on the content ids gives the ids and
    flags of the tokenizer's own right truncation with special tokens kept."""
    from scoring.bertscore import encode_sentences
    from scoring.models import load_tokenizer, resolve_model

    tokenizer = load_tokenizer(resolve_model(tiny_roberta))
    texts = [row["source"] for row in baseline_support.ragged_rows(sample_corpus, 20, 1)] + ["  padded text  ", "Sunday. 'Just", "héllo wörld ✓"]
    for max_length in (512, 40, 5):
        ids, flags = encode_sentences(tokenizer, texts, max_length)
        for text, got, flag in zip(texts, ids, flags):
            full = tokenizer.encode(text.strip(), add_special_tokens=True, add_prefix_space=True, verbose=False)
            expected = tokenizer.encode(text.strip(), add_special_tokens=True, add_prefix_space=True, max_length=max_length,
                                        truncation=True)
            assert got == expected
            assert flag == (len(full) > len(expected))
        assert any(flags) and len(max(ids, key=len)) == max_length

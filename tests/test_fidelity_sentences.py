"""CTRLEval sentence splitting: NLTK's English Punkt (what the original's `sent_tokenize`
does) by default, the regex by name.

Independent expectations: the per-corpus disagreement counts an audit measured with
`nltk.sent_tokenize` and NLTK's own downloaded English model (16 of 360 CTRLEval sentiment
texts, 82 of 960 topic texts, 46 of 1,600 SummEval summaries), and Punkt's documented
abbreviation behaviour on hand-written sentences."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from scoring.sentences import SPLITTERS, punkt_english, split_sentences


def test_punkt_knows_abbreviations_the_regex_does_not():
    text = "Mr. Smith met Dr. Jones at 5 p.m. in Washington. They talked. Then they left!"
    assert split_sentences(text) == ["Mr. Smith met Dr. Jones at 5 p.m. in Washington.", "They talked.", "Then they left!"]
    assert split_sentences(text, "regex")[:2] == ["Mr.", "Smith met Dr."]


def test_punkt_is_nltks_tokenizer_class():
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    tokenizer = punkt_english()
    assert type(tokenizer) is PunktSentenceTokenizer
    params = tokenizer._params
    assert len(params.abbrev_types) == 156 and {"mr", "dr", "u.s", "sen", "jan"} <= params.abbrev_types
    # ortho_context is a defaultdict that tokenizing fills with zeros for unseen words
    trained = {word: flags for word, flags in params.ortho_context.items() if flags}
    assert len(params.sent_starters) == 39 and len(params.collocations) == 37 and len(trained) == 20366
    assert trained["the"] > 0 and params.ortho_context["zzz-unseen"] == 0


def test_unknown_splitter_is_refused():
    assert SPLITTERS == ("punkt", "regex")
    with pytest.raises(ValueError, match="sentence_splitter must be one of"):
        split_sentences("A. B.", "nltk")


@pytest.mark.parametrize("corpus,differ,total", [("ctrleval_senti", 16, 360), ("ctrleval_topic", 82, 960), ("summeval", 46, 1600)])
def test_disagreement_counts_match_nltk_on_the_shipped_corpora(shared_data, corpus, differ, total):
    texts = pq.read_table(shared_data / "corpora" / f"{corpus}.parquet", columns=["text"]).column("text").to_pylist()
    assert len(texts) == total
    assert sum(split_sentences(t) != split_sentences(t, "regex") for t in texts) == differ


def test_ctrleval_signature_names_the_splitter_and_uses_it(tiny_models, monkeypatch):
    from scoring.ctrleval import CTRLEval

    text = "Mr. Smith arrived. He sat down."
    for splitter, signature, n_sources in (("punkt", "punkt-english(nltk)", 2), ("regex", "regex-v1", 3)):
        scorer = CTRLEval(tiny_models["pegasus"], iwf=tiny_models["iwf"], sentence_splitter=splitter)
        assert scorer.signature_params()["sentence_splitter"] == signature
        seen = []
        monkeypatch.setattr(scorer.engine, "pair_nll", lambda sources, targets, groups, seen=seen: seen.extend(
            sources.values[a:b].tolist() for a, b in zip(sources.offsets[:-1], sources.offsets[1:])) or [1.0] * len(targets))
        scorer.coherence([text])
        assert len(seen) == n_sources  # one masked source per sentence

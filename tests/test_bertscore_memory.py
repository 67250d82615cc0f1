"""BERTScore's memory bounds: references are embedded in chunks of `reference_chunk_tokens`
tokens and matched in similarity blocks of `similarity_cells` cells, with the scores of one
similarity matrix over every reference at once (to 1e-6).

Measured with `python -m benchmarks.bench_bertscore_memory` (one row, a text and 1,000 distinct
references of 512 tokens, tiny RoBERTa 64 wide, each side in a fresh process, one run): peak
memory growth 1,374 MiB with every reference embedded at once and one similarity matrix, as
before the chunking, 125 MiB with the default chunks (ratio 0.091, scores identical; 0.065 to
0.091 over four runs, the allocator's reuse varies). The code before the change grew by
1,440 MiB on the same row. Against `_oracle` the chunked scores
differ by at most 1.9e-7 (the embedding batches differ).
"""

from __future__ import annotations

import json

import pytest

from tests import baseline_support

UNBOUNDED = 1 << 62


@pytest.fixture(scope="module")
def tiny_roberta(tmp_path_factory):
    from ctgscore.testing.tiny_models import build_roberta

    return str(build_roberta(tmp_path_factory.mktemp("tiny-roberta") / "roberta", seed=4))


@pytest.fixture(scope="module")
def rows(sample_corpus):
    """Ragged SummEval rows, one row whose 30 references span several chunks, rows sharing
    references and a repeated text."""
    rows = baseline_support.ragged_rows(sample_corpus, 12, 4)
    sentences = [s.strip() + "." for row in rows for s in row["source"].split(".") if len(s.split()) > 4]
    many = {"text": rows[0]["text"], "references": sentences[:30]}
    shared = [{"text": rows[1]["text"], "references": sentences[5:9] + rows[2]["references"]},
              {"text": rows[3]["text"], "references": [sentences[7], rows[0]["references"][0]]}]
    return [*rows, many, *shared, dict(rows[4])]


def _oracle(scorer, rows):
    """Eq. 3/4 per (text, reference) pair on one similarity matrix each, every sentence
    embedded together (the scorer's `embed`), then the maxima over the references."""
    unique = list(dict.fromkeys([r["text"] for r in rows] + [x for r in rows for x in r["references"]]))
    embeddings, weights, _ = scorer.embed(unique)
    at = {text: i for i, text in enumerate(unique)}
    out = []
    for row in rows:
        c = at[row["text"]]
        pairs = []
        for reference in row["references"]:
            r = at[reference]
            sim = embeddings[c] @ embeddings[r].T
            p = float((sim.amax(dim=1) * weights[c]).sum() / weights[c].sum())
            q = float((sim.amax(dim=0) * weights[r]).sum() / weights[r].sum())
            pairs.append((p, q, 2 * p * q / (p + q)))
        best = [max(values) for values in zip(*pairs)]
        if scorer.baseline is not None:
            best = [(value - b) / (1 - b) for value, b in zip(best, scorer.baseline)]
        out.append(best)
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("idf", [False, True])
@pytest.mark.parametrize("baseline", [False, True])
@pytest.mark.parametrize("chunk_tokens, cells", [(UNBOUNDED, UNBOUNDED), (150, 4000), (60, 1)])
def test_chunked_scores_equal_one_matrix_per_pair(tiny_roberta, rows, tmp_path, idf, baseline, chunk_tokens, cells, monkeypatch):
    from scoring.bertscore import BERTScorer, idf_table
    from scoring.models import load_tokenizer, resolve_model

    kwargs = {}
    if idf:
        tokenizer = load_tokenizer(resolve_model(tiny_roberta))
        (tmp_path / "idf.json").write_text(json.dumps(idf_table(tokenizer, [x for r in rows for x in r["references"]])))
        kwargs["idf"] = str(tmp_path / "idf.json")
    if baseline:
        (tmp_path / "baseline.csv").write_text("LAYER,P,R,F\n0,0.1,0.1,0.1\n1,0.2,0.25,0.22\n2,0.3,0.35,0.33\n")
        kwargs["baseline"] = str(tmp_path / "baseline.csv")
    scorer = BERTScorer(tiny_roberta, layer=2, **kwargs)
    scorer.reference_chunk_tokens, scorer.similarity_cells = chunk_tokens, cells
    chunks, groups = [], []
    embed_ids, group = scorer.embed_ids, BERTScorer._greedy_group
    monkeypatch.setattr(scorer, "embed_ids", lambda ids: chunks.append(sum(map(len, ids))) or embed_ids(ids))
    monkeypatch.setattr(BERTScorer, "_greedy_group", staticmethod(lambda c, *a: groups.append((len(c), a[1])) or group(c, *a)))
    got, _ = scorer.score_with_flags([r["text"] for r in rows], [r["references"] for r in rows])
    reference_chunks = chunks[1:]  # the first call embeds the texts
    expected = _oracle(scorer, rows)
    assert max(abs(g - e) for row_got, row_expected in zip(got, expected) for g, e in zip(row_got, row_expected)) <= 1e-6
    assert len({round(r[2], 6) for r in got}) >= len(rows) - 2  # the scores differ: a real comparison
    cells_built = [length * sum(map(len, refs)) for length, refs in groups]
    if chunk_tokens == UNBOUNDED:
        assert len(reference_chunks) == 1 and len(groups) == len(rows)
    else:
        ids, _ = scorer.encode(rows[12]["references"])
        assert len(scorer._reference_chunks([len(s) for s in ids])) > 2  # the 30-reference row spans several chunks
        longest = max(map(len, scorer.encode([x for r in rows for x in r["references"]])[0]))
        assert len(reference_chunks) > 2 and max(reference_chunks) <= max(chunk_tokens, longest)
        assert len(groups) > len(rows) + 2
        # a block holds one reference at least, else at most `cells` cells
        assert all(cells_built[i] <= cells or len(groups[i][1]) == 1 for i in range(len(groups)))


def test_one_row_of_many_long_references_stays_in_its_budgets(tiny_roberta, monkeypatch):
    """A row of 200 long references: no similarity block beyond the cell budget and no
    embedding chunk beyond the token budget, whatever the row holds."""
    from scoring.bertscore import SIMILARITY_CELLS, BERTScorer

    scorer = BERTScorer(tiny_roberta, layer=2, token_budget=2048)
    built, embedded = [], []
    embed_ids, matmul_group = scorer.embed_ids, BERTScorer._greedy_group
    monkeypatch.setattr(scorer, "embed_ids", lambda ids: embedded.append(sum(map(len, ids))) or embed_ids(ids))
    monkeypatch.setattr(BERTScorer, "_greedy_group",
                        staticmethod(lambda c, *a: built.append(len(c) * sum(map(len, a[1]))) or matmul_group(c, *a)))
    words = "the quick brown fox jumps over a lazy dog while seven wizards box nightly".split()
    text = " ".join(words[i % len(words)] for i in range(600))
    references = [" ".join(words[(i * j) % len(words)] for i in range(600)) + f" {j}" for j in range(200)]
    (p, r, f), = scorer.score([text], [references])
    assert 0 < p <= 1 and 0 < r <= 1 and 0 < f <= 1
    assert len(built) > 1 and max(built) <= SIMILARITY_CELLS
    assert sum(embedded[1:]) >= 200 * 500 and max(embedded[1:]) <= scorer.reference_chunk_tokens

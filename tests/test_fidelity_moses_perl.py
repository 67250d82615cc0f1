"""`preprocess: moses_detok_perl` runs Moses' own detokenizer.perl (as the original BARTScore,
through the mosestokenizer package's copy): SummEval s->h equals a reference that runs the
Perl script directly, on rows where sacremoses' port detokenises differently."""

from __future__ import annotations

import subprocess

import pyarrow.parquet as pq

from scoring import preprocess
from scoring.registry import build_metric


def _perl_directly(texts: list[str]) -> list[str]:
    """detokenizer.perl run once over the texts, one per line (`-q -l en`, no wrapper)."""
    done = subprocess.run(["perl", preprocess.perl_script(), "-q", "-l", "en"], input="".join(t + "\n" for t in texts),
                          capture_output=True, text=True, check=True)
    return done.stdout.split("\n")[: len(texts)]


def test_summeval_s_h_with_the_perl_detokenizer_equals_the_direct_reference(repo_root, tiny_models):
    rows = pq.read_table(repo_root / "tests" / "data" / "corpora" / "summeval.parquet").to_pylist()
    rows = rows[::16]  # one row per SummEval document (16 systems share a source)
    perl = _perl_directly([r["source"] for r in rows])
    rows = [r for r, p in zip(rows, perl) if preprocess.moses_detokenize(r["source"]) != p][:6]
    assert len(rows) == 6  # rows where the Python port and the Perl script disagree
    metric = build_metric("bartscore", {"model": tiny_models["bart"], "directions": ["s_h"], "preprocess": "moses_detok_perl"})
    out = metric.score_rows(rows)
    sources, texts = _perl_directly([r["source"] for r in rows]), _perl_directly([r["text"] for r in rows])
    expected = metric.scorer.score(sources, texts)
    assert max(abs(o["bartscore_s_h"] - e) for o, e in zip(out, expected)) <= 1e-6
    sacre = build_metric("bartscore", {"model": tiny_models["bart"], "directions": ["s_h"], "preprocess": "moses_detok"})
    assert max(abs(o["bartscore_s_h"] - s["bartscore_s_h"]) for o, s in zip(out, sacre.score_rows(rows))) > 1e-4
    assert "detokenizer.perl=sha256:" in metric.signature_string()
    assert metric.signature().digest != sacre.signature().digest
    assert preprocess.moses_detokenize_perl("Sunday . 'Just") == _perl_directly(["Sunday . 'Just"])[0]

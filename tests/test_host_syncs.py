"""No host sync inside a scoring call except the final collect (docs/gpu.md): with the engine
planning as on CUDA, `pair_nll` reads the device back once per call. Every read that waits for
a CUDA stream (`Tensor.__bool__`, `.item`, `.tolist`, `.cpu`, `int()`, `float()`) is counted
on CPU, where the same Python runs."""

from __future__ import annotations

import pytest

from ctgscore.testing.host_reads import counted_reads
from scoring.engine import Ragged


def _engine(tiny_models, name):
    from scoring.bartscore import BARTScorer
    from scoring.ctrleval import CTRLEval

    if name == "bart":
        scorer = BARTScorer(tiny_models["bart"], token_budget=256)
    else:
        scorer = CTRLEval(tiny_models["pegasus"], iwf=tiny_models["iwf"], token_budget=256)
    engine = scorer.engine
    engine.on_cuda = True  # plan and collect as on CUDA: one engine call, one collect
    return scorer, engine


@pytest.mark.parametrize("name", ["bart", "pegasus"])
@pytest.mark.parametrize("shape", ["distinct", "grouped"])
def test_one_device_read_per_call(tiny_models, name, shape):
    scorer, engine = _engine(tiny_models, name)
    tokenizer = scorer.tokenizer
    sources = [f"Source number {i} talks about the council and its budget " + "word " * (i % 7) for i in range(12)]
    targets = [f"Target {k} is a summary " + "x " * (k % 5) for k in range(36 if shape == "grouped" else 12)]
    per_source = len(targets) // len(sources)
    source_ids = Ragged.from_lists([tokenizer(s)["input_ids"] for s in sources])
    target_ids = Ragged.from_lists([tokenizer(t)["input_ids"] for t in targets])
    groups = [range(i * per_source, (i + 1) * per_source) for i in range(len(sources))]
    with counted_reads() as seen:
        nll = engine.pair_nll(source_ids, target_ids, groups)
    assert engine.stats["encoder_passes"] >= 2 and engine.stats["decoder_passes"] >= 2  # several forwards in the call
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen
    engine.on_cuda = False
    assert nll == pytest.approx(engine.pair_nll(source_ids, target_ids, groups), abs=1e-5)


def test_gathered_cross_keys_values_count_in_the_chunk_budget(tiny_models):
    """On CUDA a decoder chunk that mixes sources gathers each row's source keys/values: the
    plan bounds rows x source width by twice the token budget (short targets against long
    sources would otherwise gather without limit)."""
    _, engine = _engine(tiny_models, "bart")
    width = 200
    lengths = [[3] * 16 for _ in range(8)]  # 128 three-token targets of 8 long sources
    for chunk in engine._plan(list(range(8)), lengths, width):
        rows = [row for row, _, _ in chunk]
        if len(set(rows)) > 1 and rows != list(range(rows[0], rows[0] + len(rows))):  # not a slice: a gather
            assert len(chunk) * width <= 2 * engine.token_budget
    engine.layout = "by_length"  # every chunk mixes sources
    assert all(len(chunk) * width <= 2 * engine.token_budget for chunk in engine._plan(list(range(8)), lengths, width))
    assert sum(len(chunk) for chunk in engine._plan(list(range(8)), lengths, width)) == 128


def test_perplexity_reads_the_device_once_per_call(tiny_models):
    from scoring.perplexity import Perplexity

    scorer = Perplexity(tiny_models["gpt2"], token_budget=128)
    engine = scorer.engine
    engine.on_cuda = True
    sequences, _ = scorer.encode([f"Text number {i} " + "and more words " * (i % 6) for i in range(20)])
    ragged = Ragged.from_lists(sequences)
    with counted_reads() as seen:
        totals = engine.ragged_nll(ragged)
    assert engine.stats["forward_passes"] >= 2
    assert len(seen) == 1 and seen[0].startswith("tolist at ragged.py"), seen
    engine.on_cuda = False
    assert [t for t, _ in totals] == pytest.approx([t for t, _ in engine.ragged_nll(ragged)], rel=1e-5)


def test_decoder_padding_is_counted_from_host_lengths(tiny_models):
    _, engine = _engine(tiny_models, "bart")
    engine.stats.clear()
    sources = Ragged.from_lists([[0, 10, 11, 12, 2]])
    targets = Ragged.from_lists([[0, 20, 2], [0, 21, 22, 23, 24, 2]])
    engine.pair_nll(sources, targets, [range(0, 2)])
    assert engine.stats["decoder_passes"] == 1  # one chunk: both targets padded to 6
    assert (engine.stats["decoder_tokens_real"], engine.stats["decoder_tokens_padded"]) == (9, 12)

"""CompMCTG reproduction options: kept splits as ordered lists (duplicates of one set weight
averages) and perplexity that skips texts under 10 words.

Independent expectations: the original code's kept lists (derived/reference_code_runs: Yelp
Few-Shot keeps 8 lists of 4 distinct sets) and its evaluation script's rule
`len(text.split(' ')) < 10` worked by hand."""

from __future__ import annotations

import json

import pytest

from splits.aspects import parse_aspects_arg
from splits.divergence import divergence
from splits.protocols import build_splits


@pytest.fixture(scope="module")
def reference_runs(shared_data):
    folder = shared_data / "compmctg" / "derived" / "reference_code_runs"
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in ("Yelp_FewShot", "Mixture_FewShot")}


def test_yelp_fewshot_ordered_lists_match_the_original_counts(reference_runs):
    original = reference_runs["Yelp_FewShot"]["max_splits_kept"]
    original_distinct = {frozenset(s["seen"]) for s in original}
    assert (len(original), len(original_distinct)) == (8, 4)
    universe = parse_aspects_arg("Yelp")
    result = build_splits(universe, "fewshot", seed=0, restarts=200, duplicates="ordered")
    kept = [split.seen for split in result.splits]
    assert len(kept) == 8 and len(set(kept)) == 8  # distinct as ordered lists
    assert len({frozenset(seen) for seen in kept}) == 4  # ... but only 4 distinct sets, like the original
    names = {frozenset(" ".join(universe.combos[i]) for i in seen) for seen in kept}
    assert names == original_distinct
    assert all(round(split.divergence, 3) == 0.628 for split in result.splits)
    assert "duplicates:ordered" in str(result.signature)
    default = build_splits(universe, "fewshot", seed=0)
    assert len(default.splits) == 4  # distinct sets by default


def test_mixture_fewshot_ordered_lists_keep_duplicates(reference_runs):
    original = reference_runs["Mixture_FewShot"]["max_splits_kept"]
    assert (len(original), len({frozenset(s["seen"]) for s in original})) == (10, 7)
    universe = parse_aspects_arg("Mixture")
    result = build_splits(universe, "fewshot", seed=1, restarts=40, max_splits=10, duplicates="ordered")
    kept = [split.seen for split in result.splits]
    assert len(kept) == 10 and len(set(kept)) == 10
    assert all(universe.is_eligible(seen) and divergence(universe, seen) == pytest.approx(1.0) for seen in kept)
    assert result.stats["n_kept_distinct_sets"] == len({frozenset(seen) for seen in kept})


def test_ordered_duplicates_need_a_climb():
    from scoring.errors import UsageError

    with pytest.raises(UsageError, match="search='exhaustive'"):
        build_splits(parse_aspects_arg("Yelp"), "fewshot", search="exhaustive", duplicates="ordered")


def test_perplexity_min_words_skips_like_compmctg(tiny_models):
    from scoring.perplexity import PerplexityMetric

    rows = [
        {"id": "nine", "text": "one two three four five six seven eight nine"},
        {"id": "ten", "text": "one two three four five six seven eight nine ten"},
        {"id": "gap", "text": "one  two three four five six seven eight nine"},  # split(' ') counts 10
    ]
    skipping = PerplexityMetric(model=tiny_models["gpt2"], min_words=10)
    plain = PerplexityMetric(model=tiny_models["gpt2"])
    got, want = skipping.score_rows(rows), plain.score_rows(rows)
    assert got[0]["perplexity"] is None and got[0]["error"] is None and "9 words < min_words=10" in got[0]["warning"]
    assert got[1]["perplexity"] == pytest.approx(want[1]["perplexity"])
    assert got[2]["perplexity"] == pytest.approx(want[2]["perplexity"])
    assert "min_words" in str(skipping.signature()) and "min_words" not in str(plain.signature())

"""`search: original` rebuilds the original CompMCTG code's splits: its seeded draws (ineligible
ones spent), its climb and its kept lists. Oracle: the unmodified original functions run with
random.seed(2023) and 3,000 draws (tests/data/compmctg/derived/reference_code_runs)."""

from __future__ import annotations

import json

import pytest

from splits.aspects import parse_aspects_arg
from splits.protocols import build_splits


@pytest.mark.parametrize("name", ["Fyelp_FewShot", "Yelp_FewShot", "Yelp_ACD"])
def test_original_search_keeps_the_original_lists(shared_data, name):
    reference = json.loads((shared_data / "compmctg" / "derived" / "reference_code_runs" / f"{name}.json").read_text())
    dataset, protocol = name.split("_")
    universe = parse_aspects_arg(dataset)
    assert [" ".join(c) for c in universe.combos] == reference["input_combos_in_order"]
    result = build_splits(universe, {"FewShot": "fewshot", "ACD": "acd"}[protocol], seed=2023,
                          restarts=reference["restarts"], search="original", max_splits=10)
    kept = [[" ".join(universe.combos[i]) for i in split.seen] for split in result.splits]
    assert kept == [s["seen"] for s in reference["max_splits_kept"]]
    assert [s.divergence for s in result.splits] == pytest.approx([s["D"] for s in reference["max_splits_kept"]], abs=1e-9)
    assert "search:original" in str(result.signature)


def test_fyelp_fewshot_original_beside_the_optimum():
    universe = parse_aspects_arg("Fyelp")
    original = build_splits(universe, "fewshot", seed=2023, restarts=3000, search="original")
    assert round(original.splits[0].divergence, 4) == 0.4501  # the paper's code: every move is blocked
    assert original.stats["eligible_draws"] < 3000  # ineligible draws are spent, as in the original
    optimum = build_splits(universe, "fewshot", seed=0)
    assert round(optimum.splits[0].divergence, 4) == 0.5414

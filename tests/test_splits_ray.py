"""Ray fan-out of the climb's restarts: same seed → same splits for any number of tasks."""

from __future__ import annotations

import pytest

from splits.aspects import KNOWN_DATASETS, from_aspects
from splits.protocols import build_splits


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_same_splits_with_one_and_four_ray_tasks(ray_local):
    from ray_jobs.runners import splits_runner

    def build_splits_ray(universe, protocol, tasks, **kwargs):
        return build_splits(universe, protocol, runner=splits_runner(tasks), tasks=tasks, **kwargs)

    fyelp = from_aspects(KNOWN_DATASETS["Fyelp"], name="Fyelp")
    kwargs = dict(seed=123, restarts=160, max_iters=100)  # 5 blocks of 32 restarts over 4 tasks: 2+1+1+1
    one = build_splits_ray(fyelp, "acd", tasks=1, **kwargs).to_json()
    four = build_splits_ray(fyelp, "acd", tasks=4, **kwargs).to_json()
    local = build_splits(fyelp, "acd", **kwargs).to_json()
    assert one["splits"] == four["splits"] == local["splits"]
    assert len(one["splits"]) == 10
    for key in ("restart_best_max", "restart_best_mean", "restart_moves_mean"):
        assert one["stats"][key] == four["stats"][key]
    assert one["signature"]["string"] == four["signature"]["string"]
    # a different seed gives a different search
    other = build_splits_ray(fyelp, "acd", tasks=4, seed=124, restarts=160, max_iters=100).to_json()
    assert other["stats"]["restart_best_mean"] != four["stats"]["restart_best_mean"]

"""The tier rules of `tests/tiers.py` on stand-in test items (each rule, and which wins), and
the markers conftest gave the tests of this run."""

from __future__ import annotations

import pathlib

import pytest

from tests.tiers import TIERS, tier_of


class FakeItem:
    """What `tier_of` reads from a pytest item: markers, file, fixtures, the test function."""

    def __init__(self, path="tests/test_x.py", markers=(), fixtures=(), function=None):
        self.fspath = pathlib.Path("/repo") / path
        self.markers = set(markers)
        self.fixturenames = list(fixtures)
        self.function = function or (lambda: None)

    def __repr__(self) -> str:
        parts = [*sorted(self.markers), *self.fixturenames, self.function.__name__, self.fspath.parent.name]
        return "-".join(p for p in parts if p not in ("<lambda>", "tests"))

    def get_closest_marker(self, name):
        return name if name in self.markers else None


def calls_run_cli():
    return run_cli(["--version"])  # noqa: F821 - only its code object is read


def imports_run_cli():
    from ctgscore.testing.cli import run_cli

    return run_cli


def calls_in_process():
    from ctgscore.testing.cli import run_cli_in_process

    return run_cli_in_process


@pytest.mark.parametrize("item, tier", [
    (FakeItem(), "unit"),
    (FakeItem(fixtures=["tmp_path", "tiny_models", "shared_data"]), "unit"),
    (FakeItem(function=calls_in_process), "unit"),
    (FakeItem(fixtures=["ray_local"]), "integration"),
    (FakeItem(fixtures=["ray_address", "tmp_path"]), "integration"),
    (FakeItem(fixtures=["moto"]), "integration"),
    (FakeItem(fixtures=["s3_bucket"]), "integration"),
    (FakeItem(fixtures=["mounted"]), "integration"),
    (FakeItem(function=calls_run_cli), "integration"),
    (FakeItem(function=imports_run_cli), "integration"),
    (FakeItem(markers=["gpu"]), "integration"),
    (FakeItem(markers=["slow"]), "system"),
    (FakeItem(markers=["slow"], fixtures=["ray_local"]), "integration"),
    (FakeItem(markers=["slow"], fixtures=["ray_address", "moto"]), "integration"),
    (FakeItem(markers=["unit"], fixtures=["ray_local"]), "integration"),  # never below what it uses
    (FakeItem(markers=["integration", "slow"]), "integration"),  # an explicit marker wins over `slow`
    (FakeItem(markers=["system"], fixtures=["moto"]), "system"),
    (FakeItem(markers=["unit", "system"]), "system"),  # the highest of several
    (FakeItem(path="tests/system/test_x.py"), "system"),  # a tier folder
    (FakeItem(path="tests/integration/deep/test_x.py"), "integration"),
    (FakeItem(path="unit/tests/test_x.py", markers=["slow"]), "system"),  # folders above tests/ do not count
], ids=lambda value: repr(value) or "plain" if isinstance(value, FakeItem) else value)
def test_tier_rules(item, tier):
    assert tier_of(item) == tier


def test_every_test_of_this_run_has_one_tier_and_only_unit_is_quick(request):
    """conftest marked every selected test: exactly one tier, and `slow` on every test that is
    not `unit`, so `-m "not slow"` selects the unit tier."""
    items = request.session.items
    assert request.node in items
    for item in items:
        tiers = [t for t in TIERS if any(m.name == t for m in item.iter_markers())]
        assert len(tiers) == 1, (item.nodeid, tiers)
        assert (item.get_closest_marker("slow") is None) == (tiers[0] == "unit"), item.nodeid
    mine = next(i for i in items if i.nodeid == request.node.nodeid)
    assert mine.get_closest_marker("unit") is not None  # this test starts nothing

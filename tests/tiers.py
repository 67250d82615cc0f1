"""The tier of a collected test: `unit`, `integration` or `system` (CONTRIBUTING.md, "Test tiers").

`tests/conftest.py` marks every collected test with its tier (and every test that is not
`unit` with `slow`), so a new test file is tiered by what it uses, without a marker.
"""

from __future__ import annotations

import pathlib

TIERS = ("unit", "integration", "system")
#: fixtures that share something expensive (a Ray, a server, a mount): a test using one is integration
SHARED_FIXTURES = frozenset({"ray_local", "ray_address", "ray_head", "demo_run", "moto", "s3_bucket", "mounted"})
#: names whose use in a test's own code means a subprocess (a real `python -m ctgscore`)
SUBPROCESS_NAMES = frozenset({"run_cli"})


def tier_of(item) -> str:
    """The tier of one collected test item. What it uses sets a floor: a shared fixture, a call
    of `run_cli` in its own body or the `gpu` marker make it at least `integration`. An explicit
    tier marker or a folder named after a tier then names the tier (the highest if several, never
    below the floor); else a `slow` test is `integration` when it uses a shared fixture and
    `system` when it starts its own; else the floor."""
    shared = bool(set(getattr(item, "fixturenames", ())) & SHARED_FIXTURES)
    code = getattr(getattr(item, "function", None), "__code__", None)
    names = set(getattr(code, "co_names", ())) | set(getattr(code, "co_varnames", ()))  # globals, local imports
    floor = "integration" if shared or names & SUBPROCESS_NAMES or item.get_closest_marker("gpu") else "unit"
    named = [t for t in TIERS if item.get_closest_marker(t) is not None]
    folders = set(_folders_under_tests(pathlib.Path(str(item.fspath))))
    named += [t for t in TIERS if t in folders]
    if named:
        return max([*named, floor], key=TIERS.index)
    if item.get_closest_marker("slow") is not None:
        return "integration" if shared else "system"
    return floor


def _folders_under_tests(path: pathlib.Path) -> tuple[str, ...]:
    """The folders between the last `tests` folder and the file (none outside `tests/`)."""
    parts = path.parts[:-1]
    if "tests" not in parts:
        return ()
    return parts[len(parts) - parts[::-1].index("tests"):]

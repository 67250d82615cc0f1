"""Count the test suite: tests pytest collects and `assert` statements in the test files.

    python scripts/count_tests.py            # collected tests (pytest --collect-only) and asserts
    python scripts/count_tests.py --no-collect   # asserts only (no imports, instant)

`assert` statements are counted on the syntax tree (`ast.Assert` nodes) of every `tests/**/*.py`
and of the test helpers in `ctgscore/testing/`, so a merged or moved test keeps its count.
Calls of assertion helpers (`assert_user_error`, ...) are listed separately: each stands for
the asserts in the helper, run once per call.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def assert_counts(paths) -> dict[str, int]:
    """`ast.Assert` nodes per file."""
    counts = {}
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        counts[str(path.relative_to(REPO))] = sum(isinstance(node, ast.Assert) for node in ast.walk(tree))
    return counts


def helper_calls(paths) -> int:
    """Calls of functions named `assert_*` (assertion helpers) in the test files."""
    calls = 0
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None) or ""
                calls += name.startswith("assert_")
    return calls


def collected_tests() -> int:
    """Tests pytest collects (every tier, no marker filter)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=REPO, capture_output=True, text=True)
    found = re.search(r"(\d+) tests? collected", done.stdout) or re.search(r"^(\d+) tests?", done.stdout, re.M)
    if not found:
        raise SystemExit(f"pytest --collect-only gave no count:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-collect", action="store_true", help="skip pytest --collect-only")
    parser.add_argument("--per-file", action="store_true", help="list the asserts of every file")
    args = parser.parse_args(argv)
    test_files = sorted((REPO / "tests").rglob("*.py"))
    helpers = sorted((REPO / "ctgscore" / "testing").rglob("*.py"))
    in_tests, in_helpers = assert_counts(test_files), assert_counts(helpers)
    if args.per_file:
        for name, count in {**in_tests, **in_helpers}.items():
            print(f"{count:6d}  {name}")
    print(f"assert statements in tests/: {sum(in_tests.values())}")
    print(f"assert statements in ctgscore/testing/: {sum(in_helpers.values())}")
    print(f"calls of assert_* helpers in tests/: {helper_calls(test_files)}")
    if not args.no_collect:
        print(f"tests collected: {collected_tests()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

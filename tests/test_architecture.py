"""The package layering holds, with no import cycles, and the repository stands alone.

Layers, lowest first: `scoring` (metrics) <- `meta_eval`, `splits` (statistics on stored
numbers; siblings, neither imports the other) <- `ray_jobs` (all Ray code) <- `ctgscore` (the
CLI). A module may import its own package and lower layers, anywhere in its body; only
`ray_jobs` imports `ray`. No exception for `if __name__ == "__main__":` blocks: a script entry
point of a lower layer (`python -m ray_jobs.score_corpus`) must not import the CLI either.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYER = {"scoring": 0, "meta_eval": 1, "splits": 1, "ray_jobs": 2, "ctgscore": 3}
RAY_PACKAGES = {"ray_jobs"}


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for package in LAYER:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(module: str, path: pathlib.Path, module_level_only: bool) -> list[tuple[str, int]]:
    """(imported module, line) for the module's imports, skipping TYPE_CHECKING blocks (and
    counting `__main__` blocks); with `module_level_only`, also skipping function and class bodies."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []

    def visit(nodes, top: bool) -> None:
        for node in nodes:
            if _is_type_checking(node):
                continue
            if isinstance(node, ast.Import):
                found.extend((alias.name, node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                found.append((target, node.lineno))
                for alias in node.names:  # `from pkg import submodule`
                    found.append((f"{target}.{alias.name}", node.lineno))
            nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
            if nested and module_level_only:
                continue
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    visit(children, top and not nested)

    visit(tree.body, True)
    return found


MODULES = _modules()


def test_the_packages_exist_and_are_parsed():
    assert {name.split(".")[0] for name in MODULES} == set(LAYER)
    assert len(MODULES) > 30


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_respect_the_layers(module):
    own = module.split(".")[0]
    bad = []
    for target, line in _imports(module, MODULES[module], module_level_only=False):
        top = target.split(".")[0]
        if top == "ray" and own not in RAY_PACKAGES:
            bad.append(f"line {line}: imports ray (only ray_jobs may)")
        if top in LAYER and top != own and LAYER[top] >= LAYER[own]:
            bad.append(f"line {line}: imports {target} ({top} is not below {own})")
    assert not bad, f"{module}: " + "; ".join(bad)


def _import_graph(module_level_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = set()
        for target, _ in _imports(module, path, module_level_only=module_level_only):
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def _first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (a list of modules, first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = walk(module)
            if found:
                return found
    return None


def test_no_import_cycles_between_modules():
    """Module-level imports, and also the imports inside functions and `__main__` blocks: a
    lazy import hides a circle from the interpreter, not from a reader."""
    for module_level_only in (True, False):
        cycle = _first_cycle(_import_graph(module_level_only))
        where = "module-level imports" if module_level_only else "imports anywhere (functions included)"
        assert cycle is None, f"import cycle through {where}: " + " -> ".join(cycle)


def test_a_cycle_through_a_function_level_import_is_found():
    graph = {"a": {"b"}, "b": set(), "c": {"a"}}
    assert _first_cycle(graph) is None
    graph["b"] = {"c"}  # e.g. `def main(): from a import run` in b
    assert _first_cycle(graph) == ["a", "b", "c", "a"]


def test_a_cycle_is_detected_by_the_walker(tmp_path, monkeypatch):
    """The import parser sees relative and `from pkg import mod` imports (guards the test)."""
    path = tmp_path / "x.py"
    path.write_text("from . import schema\nfrom scoring.metric import RowMetric\nimport ray\n"
                    "def f():\n    import ray_jobs.io\nif __name__ == '__main__':\n    import ctgscore\n")
    found = {t for t, _ in _imports("scoring.x", path, module_level_only=False)}
    assert {"scoring.schema", "scoring.metric", "ray", "ray_jobs.io"} <= found
    assert "ctgscore" in found  # a __main__ block is not exempt
    top = {t for t, _ in _imports("scoring.x", path, module_level_only=True)}
    assert "ray_jobs.io" not in top


OUTSIDE = re.compile(r"shared/spec|\.\./shared|issue [0-9]", re.IGNORECASE)


def test_library_code_points_at_nothing_outside_the_repository():
    hits = []
    for path in MODULES.values():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not hits, "\n".join(hits)


def test_docs_cited_by_the_code_exist():
    cited = set()
    for path in MODULES.values():
        cited.update(re.findall(r"docs/[A-Za-z0-9_.-]+\.md", path.read_text()))
    missing = sorted(doc for doc in cited if not (ROOT / doc).is_file())
    assert not missing, f"docstrings cite missing docs: {missing}"


def test_the_job_entry_point_needs_no_cli():
    """`python -m ray_jobs.score_corpus` (what `ray job submit` runs) imports nothing of the
    CLI package, its `__main__` block and lazy imports included: the module it hands over to,
    `ray_jobs.entrypoint`, lives in `ray_jobs`."""
    seen, todo = set(), ["ray_jobs.score_corpus"]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        tree = ast.parse(MODULES[module].read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                assert not name.startswith("ctgscore"), f"{module} imports {name}"
                while name and name not in MODULES:
                    name = name.rpartition(".")[0]
                if name.startswith("ray_jobs"):
                    todo.append(name)
    assert "ray_jobs.entrypoint" in seen

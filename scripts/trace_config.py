"""Follow the job's config through the calls of one run (the driver's side) and count how
the path moves between modules.

    python scripts/trace_config.py [--metrics text_stats,bleu,...] [--verbose]

Runs the job on `data/sample` with the `make demo` metrics (tiny models built into a temporary
folder) under `sys.setprofile`. A call is *followed* when one of its arguments is the config,
one of its sections, a metric's spec, or a per-metric object derived from them (anything whose
attributes hold one of those, e.g. a resolved metric or a plan). Consecutive followed calls are
counted as

* stay: the same module as the followed call before it;
* return: a module the path already left earlier (it goes back and forth);
* enter: a module not seen before;
* climb (of the returns and enters): a module that imports the module before it (the path
  goes back up, to the module that called into the one it leaves).

Only the project's own modules count (not pydantic, Ray or the standard library).

Measured on the sample (2-core machine): before the job's stages were reorganised, 155 followed
calls in 9 modules, 63 returns to a module already left, 34 climbs; after, 87 calls in 12
modules, 7 returns, 4 climbs (each metric resolved once, stages called in order)."""

from __future__ import annotations

import argparse
import ast
import os
import pathlib
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("ray_jobs", "scoring", "meta_eval", "splits", "ctgscore")


def module_of(filename: str) -> str | None:
    try:
        rel = pathlib.Path(filename).resolve().relative_to(REPO)
    except ValueError:
        return None
    if not rel.parts or rel.parts[0] not in PACKAGES or rel.suffix != ".py":
        return None
    return ".".join(rel.with_suffix("").parts).removesuffix(".__init__")


def imports_of(module: str) -> set[str]:
    """Our modules `module` imports (anywhere in the file, functions included)."""
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = REPO / module.replace(".", "/") / "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in PACKAGES}


class Follower:
    def __init__(self, config) -> None:
        self.tracked: set[int] = set()
        self.types: set[type] = set()
        self._track(config, depth=0)
        self.path: list[tuple[str, str]] = []

    def _track(self, value, depth: int) -> None:
        """The config and its sections and metric specs (pydantic models inside it)."""
        if id(value) in self.tracked or depth > 3:
            return
        from pydantic import BaseModel

        if isinstance(value, BaseModel):
            self.tracked.add(id(value))
            self.types.add(type(value))
            for name in type(value).model_fields:
                self._track(getattr(value, name), depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self._track(item, depth + 1)

    def holds(self, value, depth: int = 0) -> bool:
        if id(value) in self.tracked or type(value) in self.types:
            return True
        if depth >= 2:
            return False
        if isinstance(value, (list, tuple)) and value:
            return self.holds(value[0], depth + 1)
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, dict) and not isinstance(value, type) and type(value).__module__.split(".")[0] in PACKAGES:
            return any(self.holds(v, depth + 1) for v in list(attrs.values())[:12])
        return False

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        module = module_of(frame.f_code.co_filename)
        if module is None:
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        try:
            if any(self.holds(frame.f_locals.get(name)) for name in names):
                self.path.append((module, code.co_name))
        except Exception:  # noqa: BLE001 - a tracing aid: an odd object is not followed
            pass


def count(path: list[tuple[str, str]]) -> dict[str, int]:
    counts = {"calls": len(path), "stays": 0, "returns": 0, "climbs": 0, "enters": 0}
    seen: set[str] = set()
    imports: dict[str, set[str]] = {}
    previous = None
    for module, _ in path:
        if previous is None:
            counts["enters"] += 1
        elif module == previous:
            counts["stays"] += 1
        else:
            if module not in imports:
                imports[module] = imports_of(module)
            if previous in imports[module] or any(name.startswith(previous + ".") for name in imports[module]):
                counts["climbs"] += 1
            counts["returns" if module in seen else "enters"] += 1
        seen.add(module)
        previous = module
    counts["modules"] = len(seen)
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print every followed call")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    sys.path.insert(0, str(REPO))
    from ctgscore.demo import demo_config
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job

    with tempfile.TemporaryDirectory() as tmp:
        data = demo_config(pathlib.Path(tmp, "models"), pathlib.Path(tmp, "out"), REPO / "data" / "sample")
        data["progress"] = False
        data["ray"] = {"num_cpus": 2, "temp_dir": str(pathlib.Path(tmp, "ray"))}
        config = parse_config(data)
        follower = Follower(config)
        sys.setprofile(follower)
        try:
            run_job(config)
        finally:
            sys.setprofile(None)
    if args.verbose:
        for module, name in follower.path:
            print(f"{module}.{name}")
    counts = count(follower.path)
    print(" ".join(f"{key}={value}" for key, value in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The wheels carried to the GPU machine (`make gpu-wheels`) are versions ctgscore accepts."""

import re
from pathlib import Path

from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (pyproject's requires-python): pytest's own TOML reader
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "benchmarks" / "gpu_wheels.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.]*)", line).groups()
            pins[name.lower()] = version
    return pins


def _dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    for text in project["dependencies"]:
        requirement = Requirement(text)
        found[requirement.name.lower()] = requirement
    return found


def test_every_carried_wheel_is_pinned_to_one_version():
    pins = _pins()
    assert {"transformers", "nltk"} <= set(pins), pins


def test_carried_wheels_satisfy_the_project_requirements():
    dependencies = _dependencies()
    checked = 0
    for name, version in _pins().items():
        requirement = dependencies.get(name)
        if requirement is not None:
            assert requirement.specifier.contains(version), f"{name}=={version} is outside pyproject's {requirement}"
            checked += 1
    assert checked >= 2  # transformers and nltk are the product's own dependencies

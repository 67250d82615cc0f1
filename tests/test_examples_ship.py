"""Every job config in `examples/` runs on what a clone ships (the repository's files, plus the
tiny models `make demo` builds into `.cache/tiny-models/`), or says in its first line what else
it needs: each S3 bucket, model id and file it names that a clone does not have."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ray_jobs.config import load_config

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
BUILT_BY_DEMO = REPO / ".cache" / "tiny-models"


def _unmet(value: str, base: pathlib.Path) -> str | None:
    """What a clone lacks for one input, output, model or file value (None when it has it)."""
    if value.startswith("s3://"):
        return "s3://" + value[len("s3://"):].split("/", 1)[0]  # the bucket must be named
    path = (base / value).resolve() if not value.startswith("/") else pathlib.Path(value)
    if path.exists() or path.is_relative_to(BUILT_BY_DEMO) or path.is_relative_to(REPO / "out"):
        return None
    if not value.startswith((".", "/")) and value.count("/") == 1:
        return value  # a hub id such as facebook/bart-large-cnn
    return path.name  # a local file the clone lacks: its name must be given


def requirements(path: pathlib.Path) -> list[str]:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    values = [raw["input"], raw["output"]]
    for metric in raw.get("metrics", []):
        params = metric.get("params") or {}
        values += [str(params[key]) for key in ("model", "iwf") if key in params]
    return [need for need in (_unmet(v, path.parent) for v in values) if need]


def test_there_are_examples():
    assert len(EXAMPLES) >= 15


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_on_the_clone_or_names_what_it_needs(path):
    load_config(path)  # a valid config in the first place
    first = path.read_text(encoding="utf-8").splitlines()[0]
    needs = requirements(path)
    if needs:
        assert first.startswith("# Needs:"), f"{path.name}: needs {needs}, but its first line is {first!r}"
        missing = [need for need in needs if need not in first]
        assert not missing, f"{path.name}: the first line does not name {missing}"
    else:  # runs on the clone: its local input is a shipped file or folder
        local_input = (path.parent / yaml.safe_load(path.read_text())["input"]).resolve()
        assert local_input.is_relative_to(REPO) and local_input.exists()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_metric_params_are_ones_the_metric_takes(path):
    """The schema leaves `params` open; the metric's constructor does not: a misspelled or
    missing parameter fails here, not when a cluster builds the metric."""
    from ray_jobs.job.metrics import metric_params
    from scoring.registry import check_params

    config = load_config(path)
    for spec in config.metrics:
        check_params(spec.name, metric_params(config, spec))


def test_the_check_sees_what_a_clone_lacks(tmp_path):
    """The rule itself: a config reading data/corpora/ (absent from a clone) and a hub model needs both named."""
    config = tmp_path / "examples" / "x.yaml"
    config.parent.mkdir()
    config.write_text("input: ../data/corpora/summeval.parquet\noutput: s3://bucket/out\n"
                      "metrics:\n  - name: bartscore\n    params: {model: facebook/bart-large-cnn}\n")
    assert requirements(config) == ["summeval.parquet", "s3://bucket", "facebook/bart-large-cnn"]

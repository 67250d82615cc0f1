"""The library snippets of the docs run as written: each fenced ```python block of
docs/metrics.md, docs/load_scores.md, docs/plugins.md and the README is executed statement by
statement in a scratch folder, with a hub model id (or a paper's file the repository does not
ship) swapped for the tiny local model only. The README's "Scoring your own dump" commands
give a dump every metric of `examples/demo.yaml` applies to, and docs/schema.md's example
output row has the keys and signature form a run writes."""

from __future__ import annotations

import ast
import json
import math
import pathlib
import re
import shlex
import shutil

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


def python_blocks(doc: str) -> list[str]:
    """The fenced ```python blocks of a doc, in order."""
    text = (REPO / doc).read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def substituted(block: str, swaps: dict[str, str]) -> str:
    """`block` with each quoted hub id or file name of `swaps` replaced; each must occur."""
    for name, local in swaps.items():
        assert f'"{name}"' in block, f"the snippet no longer names {name!r}: update this test's swaps"
        block = block.replace(f'"{name}"', repr(local))
    return block


def run_statements(code: str, cwd: pathlib.Path, monkeypatch) -> tuple[dict, list[tuple[str, object]]]:
    """Execute `code` in `cwd` one top-level statement at a time; returns the namespace and,
    per statement, its source and its value (an expression's result, or what it assigned)."""
    monkeypatch.chdir(cwd)
    namespace: dict = {"__name__": "doc_snippet"}
    results = []
    for node in ast.parse(code).body:
        source = ast.get_source_segment(code, node)
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), "<doc>", "eval"), namespace)
        else:
            exec(compile(ast.Module([node], type_ignores=[]), "<doc>", "exec"), namespace)
            targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            value = namespace[targets[0]] if targets else None
        results.append((source, value))
    return namespace, results


def test_metrics_library_snippet_runs_on_the_tiny_models(tiny_models, tmp_path, monkeypatch):
    """docs/metrics.md, "Using a metric": every call returns one finite float per row, on a
    machine without CUDA too (the block asked for `device="cuda"` and used names it never set)."""
    [block] = python_blocks("docs/metrics.md")
    code = substituted(block, {"facebook/bart-large-cnn": tiny_models["bart"], "google/pegasus-large": tiny_models["pegasus"],
                               "gpt2-large": tiny_models["gpt2"], "iwf_full.txt": tiny_models["iwf"]})
    namespace, results = run_statements(code, tmp_path, monkeypatch)
    scores = [(source, value) for source, value in results if re.match(r"(bart|ctrl|Perplexity\().*score", source)]
    assert len(scores) == 7, [source for source, _ in results]
    for source, value in scores:
        rows = 1 if source.startswith("bart.score([") else 2
        assert isinstance(value, list) and len(value) == rows, (source, value)
        assert all(isinstance(v, float) and math.isfinite(v) for v in value), (source, value)


def metric_run(rows: list[dict], name: str, params: dict) -> "object":
    """One metric's output table over `rows` (what a job writes per shard)."""
    from scoring.registry import build_metric

    return build_metric(name, params).output_table(rows)


@pytest.fixture(scope="module")
def job_outputs(tmp_path_factory, tiny_models):
    """A scratch folder holding what the load_scores snippets read: `out/sample` and
    `out/demo` (a job's layout, one folder per metric and shard, as a crashed run leaves it:
    no manifest) with text_stats and perplexity, and `scores.parquet` (one `ctgscore score`
    output)."""
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("doc-snippets")
    shards = {path.stem: pq.read_table(path).slice(0, 12).to_pylist() for path in sorted(SAMPLE.glob("*.parquet"))[:2]}
    for metric, params in (("text_stats", {}), ("perplexity", {"model": tiny_models["gpt2"]})):
        for shard, rows in shards.items():
            folder = root / "out" / "sample" / metric / shard
            folder.mkdir(parents=True)
            pq.write_table(metric_run(rows, metric, params), folder / "part-0.parquet")
    shutil.copytree(root / "out" / "sample", root / "out" / "demo")
    pq.write_table(metric_run(next(iter(shards.values())), "text_stats", {}), root / "scores.parquet")
    return root, sum(len(rows) for rows in shards.values())


def test_load_scores_snippets_run_on_local_outputs(job_outputs, monkeypatch):
    """docs/load_scores.md (its local lines) and the README's `load_scores("out/demo")`."""
    root, rows = job_outputs
    [block] = python_blocks("docs/load_scores.md")
    local = "\n".join(line for line in block.splitlines() if "s3://" not in line)
    [readme] = [b for b in python_blocks("README.md") if "load_scores" in b]
    _, results = run_statements(local + "\n" + readme, root, monkeypatch)
    frames = {source: value for source, value in results if source.startswith("frame")}
    assert len(frames) == 4
    for source, frame in frames.items():
        expected = 12 if "scores.parquet" in source else rows
        assert len(frame) == expected and frame["id"].is_unique, source
        assert {"error", "skipped"} <= set(frame.columns), source
    perplexity_only = next(frame for source, frame in frames.items() if "metrics=" in source)
    assert "perplexity" in perplexity_only.columns and "text_stats_words" not in perplexity_only.columns


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_load_scores_s3_line_reads_a_prefix(job_outputs, moto, s3_bucket, monkeypatch):
    """docs/load_scores.md's `s3://` line against the suite's local S3 server (the AWS
    environment variables, as the doc says; the bucket name swapped for this test's own)."""
    import s3fs

    root, rows = job_outputs
    [block] = python_blocks("docs/load_scores.md")
    [line] = [line for line in block.splitlines() if "s3://" in line]
    prefix = re.search(r'"s3://([^"]+)"', line).group(1)
    bucket, key = prefix.split("/", 1)
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": moto}, skip_instance_cache=True)
    fs.put(str(root / "out" / "sample") + "/", f"{s3_bucket}/{key}/", recursive=True)
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": moto,
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    code = "import ctgscore\n" + line.replace(f"s3://{bucket}/", f"s3://{s3_bucket}/")
    frame = run_statements(code, root, monkeypatch)[0]["frame"]
    assert len(frame) == rows and {"perplexity", "text_stats_words"} <= set(frame.columns)


def test_plugin_snippet_is_a_working_row_metric():
    """docs/plugins.md: the example class scores rows as its docstring says."""
    [block] = python_blocks("docs/plugins.md")
    namespace: dict = {"__name__": "my_metrics.length"}
    exec(compile(block, "<plugins.md>", "exec"), namespace)
    metric = namespace["CharCount"](scale=2)
    results = metric.score_rows([{"id": "a", "text": "four"}, {"id": "b", "text": "sixsix"}])
    assert [r["char_count"] for r in results] == [8.0, 12.0] and all(r["error"] is None for r in results)
    assert metric.signature().params == {"scale": 2}


def readme_commands(prefix: str) -> list[list[str]]:
    """The README's command lines (continuations joined, comments dropped) that start with `prefix`."""
    text = (REPO / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip().startswith(prefix)]


def test_readme_own_dump_convert_gives_every_demo_metric_rows(cli, tiny_models, tmp_path):
    """README, "Scoring your own dump": the dump its `convert` line writes is one that the
    `ctgscore run examples/demo.yaml` line after it can score: every metric of the demo applies
    to its rows (before, the dump had no references, and the run exited 2 on BLEU)."""
    import pyarrow.parquet as pq
    import yaml

    from scoring.applicability import score_needs_by_label, unmet_message
    from scoring.registry import build_metric

    [convert] = [args for args in readme_commands("ctgscore convert") if "generations.jsonl" in args]
    fields = [value.split("=", 1)[1] for flag, value in zip(convert, convert[1:]) if flag == "--map"]
    record = {field: f"some {field} text" for field in fields}
    (tmp_path / "generations.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    proc = cli(convert[1:], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    present = pq.read_schema(tmp_path / "dump.parquet").names
    [run] = [args for args in readme_commands("ctgscore run examples/demo.yaml")]
    config = yaml.safe_load((REPO / run[2]).read_text(encoding="utf-8"))
    local = {"tiny-bart": tiny_models["bart"], "tiny-gpt2": tiny_models["gpt2"], "tiny-pegasus": tiny_models["pegasus"],
             "tiny-pegasus-iwf.txt": tiny_models["iwf"]}
    for spec in config["metrics"]:
        params = {key: local.get(pathlib.PurePosixPath(str(value)).name, value) for key, value in (spec.get("params") or {}).items()}
        metric = build_metric(spec["name"], params)
        assert unmet_message(spec["name"], score_needs_by_label(metric), present, "absent from dump.parquet") is None, spec


def test_schema_example_output_row_has_the_keys_a_run_writes(tiny_models):
    """docs/schema.md's example output row (bartscore, directions s_h and f, on the first
    SummEval row of data/sample) has exactly the columns of that run's output, in order, and
    a signature of the form stored ones have."""
    import pyarrow.parquet as pq

    text = (REPO / "docs" / "schema.md").read_text(encoding="utf-8")
    example = text.split("Its output row from `bartscore`", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    row = json.loads(example)
    first = pq.read_table(SAMPLE / "summeval-00000.parquet").slice(0, 1).to_pylist()
    table = metric_run(first, "bartscore", {"model": tiny_models["bart"], "directions": ["s_h", "f"]})
    assert list(row) == table.schema.names
    written = table.to_pylist()[0]
    assert row["id"] == written["id"]
    shown = [part for part in row["signature"].split("|") if part != "..."]
    stored = written["signature"].split("|")
    assert shown[0] == stored[0]  # metric:bartscore
    assert {part.split(":", 1)[0] for part in shown} <= {part.split(":", 1)[0] for part in stored}, (shown, stored)


def test_gpu_md_benchmark_commands_write_the_results_they_cite():
    """docs/gpu.md: each `python -m benchmarks.bench_decoder_padding ...` writes the results
    file the doc cites for it (the 32k traffic command wrote the default file instead,
    overwriting the two-budget counts the doc cites next)."""
    from benchmarks.bench_decoder_padding import RESULTS

    text = " ".join((REPO / "docs" / "gpu.md").read_text(encoding="utf-8").split())
    commands = list(re.finditer(r"`(python -m benchmarks\.bench_decoder_padding[^`]*)`", text))
    assert len(commands) == 2, [m.group(1) for m in commands]
    for match in commands:
        args = shlex.split(match.group(1))
        if "--out" in args:  # the command names its file itself
            written = cited = args[args.index("--out") + 1]
        else:  # the default file, and the first results file the doc names after the command
            written = str((RESULTS / "bench_decoder_padding.json").relative_to(REPO))
            cited = re.search(r"benchmarks/results/[\w.-]+\.json", text[match.end():]).group(0)
        assert written == cited, match.group(1)
        assert (REPO / cited).is_file()


def test_metrics_md_parabank_conversion_runs_on_a_tied_bart_state_dict(tiny_models, tmp_path, monkeypatch):
    """docs/metrics.md's one-line conversion of `bart_score.pth` to safetensors, on a state dict
    saved as the original's is (`torch.save(model.state_dict())`: tied embeddings sharing
    memory), then `BARTScorer.load` of the result (a plain `save_file(torch.load(path))`
    refused the shared tensors)."""
    import safetensors.torch
    import torch

    from scoring.bartscore import BARTScorer

    text = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    [expression] = re.findall(r"`(safetensors\.torch\.save_file\([^`]*\))`", text)
    scorer = BARTScorer(tiny_models["bart"])
    torch.save(scorer.model.state_dict(), tmp_path / "bart_score.pth")
    monkeypatch.chdir(tmp_path)
    namespace = {"torch": torch, "safetensors": safetensors, "path": str(tmp_path / "bart_score.pth")}
    eval(expression, namespace)
    converted = re.search(r'"([\w.]+\.safetensors)"', expression).group(1)
    before = scorer.score(["a short source"], ["a target"])
    scorer.load(str(tmp_path / converted))
    assert scorer.state_dict_digest and scorer.score(["a short source"], ["a target"]) == before  # the same weights back

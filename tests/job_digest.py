"""A digest of a job's output folder: what the job wrote, independent of where and when.

Every Parquet file (by its path under the output) contributes its schema, its footer key-value
metadata and its rows; `manifest.json` contributes every field except those that depend on the
run (clock times, durations, rates, absolute paths, request counts, local files'
modification times), which are left out or have
the input/output roots replaced by placeholders."""

from __future__ import annotations

import hashlib
import json
import math
import pathlib
from typing import Any

import pyarrow.parquet as pq

# manifest keys whose values depend on the run, not on what was computed
RUN_DEPENDENT = {"started_at", "finished_at", "wall_s", "rows_per_s", "steady_rows_per_s", "requests", "storage",
                 "described_on", "manifest", "ray", "mtime"}


def _canonical(value: Any, roots: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _canonical(v, roots) for k, v in sorted(value.items()) if k not in RUN_DEPENDENT}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, roots) for v in value]
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, str):
        if value.startswith("mtime:"):  # a local output file's etag is its modification time
            return "<mtime>"
        for root, name in roots.items():
            value = value.replace(root, name)
        return value
    return value


def output_digest(output: pathlib.Path, roots: dict[str, str]) -> tuple[str, dict[str, str]]:
    """(digest of the whole folder, digest per file) of a job's output folder; `roots` maps
    run-dependent paths (the output, the input, the models' folder) to placeholders."""
    roots = {str(output): "<output>", **roots}
    files: dict[str, str] = {}
    for path in sorted(output.rglob("*")):
        if not path.is_file():
            continue
        rel = str(path.relative_to(output))
        if path.suffix == ".parquet":
            handle = pq.ParquetFile(path)
            table = handle.read()
            meta = {k.decode(): v.decode() for k, v in (handle.metadata.metadata or {}).items() if not k.startswith(b"ARROW")}
            schema_meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items() if k != b"pandas"}
            content = {"schema": [f"{f.name}:{f.type}" for f in table.schema], "metadata": meta,
                       "schema_metadata": schema_meta, "rows": table.to_pylist()}
        elif path.name == "manifest.json":
            content = json.loads(path.read_text())
        else:
            content = {"bytes": path.read_bytes()}
        text = json.dumps(_canonical(content, roots), sort_keys=True)
        files[rel] = hashlib.sha256(text.encode()).hexdigest()
    whole = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return whole, files


def demo_digest(output: pathlib.Path, models_dir: pathlib.Path, sample: pathlib.Path) -> dict[str, str]:
    """The per-file digest of the demo's output folder (`python -m ctgscore.demo -o output
    --cache models_dir` on `sample`), with its run-dependent roots replaced."""
    return output_digest(output, {str(sample.resolve()): "<input>", str(models_dir): "<models>"})[1]


if __name__ == "__main__":  # record anew, after a deliberate change: python -m tests.job_digest
    import subprocess
    import sys
    import tempfile

    repo = pathlib.Path(__file__).resolve().parents[1]
    recorded = repo / "tests" / "data" / "job_sample_digest.json"
    work = pathlib.Path(tempfile.mkdtemp(prefix="digest-"))
    subprocess.run([sys.executable, "-m", "ctgscore.demo", "-o", str(work / "demo"), "--cache", str(work / "models"),
                    "--no-progress", "--no-report"], cwd=repo, check=True)
    got = demo_digest(work / "demo", work / "models", repo / "data" / "sample")
    old = json.loads(recorded.read_text())
    print("changed:", [k for k in old if got.get(k) != old[k]], "added/removed:", sorted(set(got) ^ set(old)))
    recorded.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")

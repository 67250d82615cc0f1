"""A digest of a job's output folder: what the job wrote, independent of where, when and on
which CPU or GPU.

Reproducible means: bit-exact on the same hardware with the same library versions; across
CPUs and GPUs (other vector units, other kernels), every score within `REL_TOL` relative and
everything else exact. So each file contributes two things:

* `files`: a hash of everything but the score values: every Parquet file's schema, footer
  key-value metadata and rows, with each score value (a float score column,
  `scoring.schema.is_score_column`) replaced by whether it is null; `manifest.json` less what
  depends on the run (clock times, durations, rates, absolute paths, request counts, local
  files' modification times) and less each part's byte size and md5 (compressed float bytes). Row
  order, ids, errors, skip reasons, signatures (the tiny models' digests among them) and
  counts are compared exactly;
* `scores`: the non-null score values per file and column, in row order, compared within
  `REL_TOL` (`compare`); perplexity as its logarithm, the mean NLL the model computes (exp()
  multiplies float32 rounding in the NLL by the NLL itself: ~9.5 nats here).

Measured on this repository's demo (AMD EPYC, AVX-512 kernels against torch's scalar kernels,
`ATEN_CPU_CAPABILITY=default`, same torch): 975 of 2,440 score values differ in their bits;
the largest relative differences are 6.2e-7 (BARTScore s->h), 3.5e-7 (CTRLEval), 3.3e-7 (log
perplexity; 3.1e-6 on perplexity itself); BLEU and text_stats agree bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import math
import pathlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from scoring.schema import is_score_column

REL_TOL = 1e-6  # scores across machines: float kernels differ in the last bits, never by this much
LOG_SPACE_COLUMNS = ("perplexity",)  # compared as log(value): exp(mean NLL) amplifies the NLL's rounding
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


BYTE_DEPENDENT = ("size", "md5")  # a part record's fields that follow its score bytes


def _without_part_sizes(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest less each committed part's byte size and md5 (they follow the score bytes)."""
    for report in (manifest.get("metrics") or {}).values():
        for record in (report.get("parts") or {}).values():
            for entry in (record.get("parts") or {}).values():
                for field in BYTE_DEPENDENT:
                    entry.pop(field, None)
    return manifest


def _parquet_content(path: pathlib.Path) -> tuple[dict[str, Any], dict[str, list]]:
    handle = pq.ParquetFile(path)
    table = handle.read()
    meta = {k.decode(): v.decode() for k, v in (handle.metadata.metadata or {}).items() if not k.startswith(b"ARROW")}
    schema_meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items() if k != b"pandas"}
    score_columns = [f.name for f in table.schema if pa.types.is_floating(f.type) and is_score_column(f.name)]
    scores = {name: [v for v in table.column(name).to_pylist() if v is not None] for name in score_columns}
    for name in score_columns:  # nullness stays exact, the values go to `scores`
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, pa.array([None if v is None else "<score>" for v in table.column(name).to_pylist()],
                                                         type=pa.string()))
    content = {"schema": [f"{f.name}:{f.type}" for f in handle.schema_arrow], "metadata": meta,
               "schema_metadata": schema_meta, "rows": table.to_pylist()}
    return content, scores


def output_digest(output: pathlib.Path, roots: dict[str, str]) -> dict[str, dict]:
    """`{"files": {path: hash of all but the scores}, "scores": {path: {column: [values]}}}` of
    a job's output folder; `roots` maps run-dependent paths (the output, the input, the
    models' folder) to placeholders."""
    roots = {str(output): "<output>", **roots}
    files: dict[str, str] = {}
    scores: dict[str, dict[str, list]] = {}
    for path in sorted(output.rglob("*")):
        if not path.is_file():
            continue
        rel = str(path.relative_to(output))
        if path.suffix == ".parquet":
            content, found = _parquet_content(path)
            if found:
                scores[rel] = {name: ["nan" if math.isnan(v) else v for v in values] for name, values in found.items()}
        elif path.name == "manifest.json":
            content = _without_part_sizes(json.loads(path.read_text()))
        else:
            content = {"bytes": path.read_bytes()}
        text = json.dumps(_canonical(content, roots), sort_keys=True)
        files[rel] = hashlib.sha256(text.encode()).hexdigest()
    return {"files": files, "scores": scores}


def compare(got: dict[str, dict], recorded: dict[str, dict], rel_tol: float = REL_TOL) -> list[str]:
    """What differs between two digests: files added or removed, files whose non-score
    content differs, and score columns with a value further than `rel_tol` relative (or a NaN
    where the other has a number); empty when they agree."""
    problems = []
    if sorted(got["files"]) != sorted(recorded["files"]):
        problems.append(f"files added or removed: {sorted(set(got['files']) ^ set(recorded['files']))}")
    problems += [f"{name}: differs besides its scores" for name in sorted(recorded["files"])
                 if name in got["files"] and got["files"][name] != recorded["files"][name]]
    for name in sorted(set(got["scores"]) | set(recorded["scores"])):
        mine, theirs = got["scores"].get(name, {}), recorded["scores"].get(name, {})
        for column in sorted(set(mine) | set(theirs)):
            a, b = mine.get(column), theirs.get(column)
            if a is None or b is None or len(a) != len(b):
                problems.append(f"{name}: column {column} has other rows")
                continue
            log = column in LOG_SPACE_COLUMNS
            far = [i for i, (x, y) in enumerate(zip(a, b)) if not _close(x, y, rel_tol, log)]
            if far:
                i = far[0]
                problems.append(f"{name}: {column}: {len(far)} value(s) beyond {rel_tol:g} relative (row {i}: {a[i]!r} vs {b[i]!r})")
    return problems


def _close(a: Any, b: Any, rel_tol: float, log: bool = False) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b  # "nan" only equals "nan"
    if log and a > 0 and b > 0:
        a, b = math.log(a), math.log(b)
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0)


def demo_digest(output: pathlib.Path, models_dir: pathlib.Path, sample: pathlib.Path,
                written_at: pathlib.Path | None = None) -> dict[str, dict]:
    """`output_digest` of the demo's output folder (`python -m ctgscore.demo -o output --cache
    models_dir` on `sample`), with its run-dependent roots replaced; `written_at`: the folder
    the job wrote, when `output` is a copy of it (its manifest names the original)."""
    roots = {str(sample.resolve()): "<input>", str(models_dir): "<models>"}
    if written_at is not None:
        roots = {str(written_at): "<output>", **roots}
    return output_digest(output, roots)


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
    if recorded.exists():
        old = json.loads(recorded.read_text())
        print("differences from the recorded run:", compare(got, old) if "files" in old else "(old format)")
    recorded.write_text(json.dumps(got, sort_keys=True, separators=(",", ":")) + "\n")

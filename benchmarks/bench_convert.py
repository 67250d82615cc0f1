"""`ctgscore convert` peak memory, batches vs the whole file, and the bounds on what one hostile
file can make it hold: `python -m benchmarks.bench_convert [--part batches|bounds]`.

Each conversion runs in a process of its own; its peak resident memory (`ru_maxrss`) less its
peak on a one-row file (the interpreter, pyarrow, the CLI) is the conversion's own peak.

`batches` (results/convert.md): `ctgscore convert` on files of about `--mb` MB (default 200):
* JSON Lines and CSV of many rows of about 1 kB (SummEval-sized texts with two references
  and a rating): memory follows the batch, so the ratio is large;
* JSON Lines and CSV of one 200 MB row: memory follows the largest row, in both (the record
  cap is raised past the row for this run).
"Before" is the same command at `--before` (a git revision of this repository, default the
last commit that read the whole file), unpacked with `git archive`; without git it is the
in-tree whole-file path (the list readers, then one table). Both outputs are compared.

`bounds` (results/convert_bounds.md): `convert.write_file` / `write_aligned` at `--before-bounds`
(the streamed revision before the bounds) and in this tree, on hostile files of about
`--bounds-mb` MB (default 40), with the batch budget and the record cap both scaled down to 4 MB
as the files are (32 MB and 64 MB by default, for files of gigabytes): Parquet rows of 5 MB cells
in one row group (a page a value); CSV and
JSON Lines whose lines end in a bare `\r`; a CSV quote never closed; JSON Lines of many short
rows with distinct ids (the duplicate-id set); line-aligned files (read four times before, twice
now: CPU time). Outputs, or the failure, are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile

from benchmarks.data import publish

REPO = pathlib.Path(__file__).resolve().parents[1]
BEFORE = "7672c93"  # the last revision whose convert read the whole file
BEFORE_BOUNDS = "63ddacd"  # the last streamed revision without the bounds (record cap, Parquet bytes, compact ids)

_PEAK = ("import resource, subprocess, sys\n"
         "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
         "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
         "print(code, usage.ru_maxrss, usage.ru_utime + usage.ru_stime)")

_WHOLE = """
import sys
from ctgscore import convert
from ctgscore.cli import common
src, out = sys.argv[1:3]
fmt = convert.detect_format(src)
report = convert.ConversionReport(inputs=[src], format=fmt)
read = {"jsonl": convert.read_jsonl, "csv": convert.read_csv}[fmt]
table = convert.rows_to_table(convert.canonical_rows(read(src, report), report))
common.write_parquet_atomic(table, common.check_output_file(out))
"""


def _measure(args: list[str], pythonpath: str) -> tuple[int, float, float]:
    """(exit status, peak resident MB, CPU seconds) of `args` run in a process of its own."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    # run in `pythonpath`: `python -m` puts the working folder first on the path
    line = subprocess.run([sys.executable, "-c", _PEAK, *args], env=env, cwd=pythonpath, check=True, capture_output=True,
                          text=True).stdout.split()
    return int(line[0]), int(line[1]) / 1024, float(line[2])  # kB on Linux


def _peak_mb(args: list[str], pythonpath: str) -> float:
    code, peak, _ = _measure(args, pythonpath)
    if code:
        raise SystemExit(f"{' '.join(args)} failed with exit status {code}")
    return peak


def _write_rows(folder: pathlib.Path, mb: int) -> tuple[pathlib.Path, pathlib.Path]:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    jsonl, csv_path = folder / "rows.jsonl", folder / "rows.csv"
    import csv

    with open(jsonl, "w", encoding="utf-8") as j, open(csv_path, "w", newline="", encoding="utf-8") as c:
        writer = csv.writer(c)
        writer.writerow(["id", "text", "references", "human_overall", "system"])
        size, i = 0, 0
        while size < mb << 20:
            text = " ".join(rng.choices(words, k=150))
            refs = [" ".join(rng.choices(words, k=12)) for _ in range(2)]
            row = {"id": f"r{i}", "text": text, "references": refs, "human_overall": rng.random() * 5, "system": "s1"}
            line = json.dumps(row) + "\n"
            j.write(line)
            writer.writerow([row["id"], text, json.dumps(refs), row["human_overall"], "s1"])
            size += len(line)
            i += 1
    return jsonl, csv_path


def _write_one_row(folder: pathlib.Path, mb: int) -> tuple[pathlib.Path, pathlib.Path]:
    text = "a" * (mb << 20)
    jsonl, csv_path = folder / "one.jsonl", folder / "one.csv"
    jsonl.write_text(json.dumps({"id": "1", "text": text}) + "\n", encoding="utf-8")
    csv_path.write_text(f"id,text\n1,{text}\n", encoding="utf-8")
    return jsonl, csv_path


def _unpack(revision: str, folder: pathlib.Path) -> pathlib.Path:
    """This repository at `revision`, unpacked into `folder` with `git archive`."""
    folder.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["batches", "bounds", "all"], default="all")
    parser.add_argument("--mb", type=int, default=200, help="size of each input file in MB (batches)")
    parser.add_argument("--before", default=BEFORE, help="git revision of the whole-file convert ('' for the in-tree path)")
    parser.add_argument("--bounds-mb", type=int, default=40, help="size of each hostile file in MB (bounds)")
    parser.add_argument("--before-bounds", default=BEFORE_BOUNDS, help="git revision of the convert without the bounds")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    if args.part in ("bounds", "all"):
        from benchmarks import bench_convert_bounds

        bench_convert_bounds.run(args.bounds_mb, args.before_bounds, write=not args.no_write)
    if args.part == "bounds":
        return 0
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        before_tree, before_name = None, "whole file (in-tree list readers)"
        if args.before:
            before_tree = _unpack(args.before, folder / "before")
            before_name = f"whole file (revision {args.before})"
        cli = ["-m", "ctgscore", "convert"]
        tiny = folder / "tiny.jsonl"
        tiny.write_text('{"id": "1", "text": "a"}\n')
        base = _peak_mb([sys.executable, *cli, "-i", str(tiny), "-o", str(folder / "tiny.parquet")], str(REPO))
        rows = [f"Peak memory of `ctgscore convert` above its peak on a one-row file ({base:.0f} MB); "
                f"before: {before_name}; files of {args.mb} MB.", "",
                "| input | before | batches | before / batches |", "|---|---|---|---|"]
        inputs = [*zip(("JSONL, ~1 kB rows", "CSV, ~1 kB rows"), _write_rows(folder, args.mb)),
                  *zip(("JSONL, one row", "CSV, one row"), _write_one_row(folder, args.mb))]
        for name, path in inputs:
            old_out, new_out = folder / "old.parquet", folder / "new.parquet"
            if before_tree is not None:
                old = _peak_mb([sys.executable, *cli, "-i", str(path), "-o", str(old_out)], str(before_tree))
            else:
                old = _peak_mb([sys.executable, "-c", _WHOLE, str(path), str(old_out)], str(REPO))
            # a row past the record cap (64 MB) is refused unless the cap is raised past it
            cap = ["--max-record-bytes", str(path.stat().st_size + 1)] if "one row" in name else []
            new = _peak_mb([sys.executable, *cli, "-i", str(path), "-o", str(new_out), *cap], str(REPO))
            assert pq.read_table(old_out).equals(pq.read_table(new_out)), f"{name}: outputs differ"
            old_out.unlink()
            new_out.unlink()
            rows.append(f"| {name} | {old - base:,.0f} MB | {new - base:,.0f} MB | {(old - base) / (new - base):.1f}x |")
            print(rows[-1], flush=True)
    return publish(rows, REPO / "benchmarks" / "results" / "convert.md", write=not args.no_write)


if __name__ == "__main__":
    raise SystemExit(main())

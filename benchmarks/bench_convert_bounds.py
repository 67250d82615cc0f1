"""The `bounds` part of `benchmarks.bench_convert` (see its docstring): what one hostile file makes
`ctgscore convert` hold, the revision before the bounds against this tree, each conversion in a
process of its own. Writes benchmarks/results/convert_bounds.md."""

from __future__ import annotations

import json
import pathlib
import random
import sys
import tempfile

from benchmarks.bench_convert import REPO, _measure, _unpack
from benchmarks.data import publish

BUDGET = 4 << 20  # the batch budget and the record cap of these runs: the defaults scaled down with the files

# one conversion: writes {"ok": true, "report": ...} or {"ok": false, "error": ...} to OUT.json; the
# record cap is passed only to a revision that has it
_RUN = """
import inspect, json, sys
import pyarrow.parquet
from ctgscore import convert
kind, out, budget, *files = sys.argv[1:]
if kind == "imports":  # the baseline: the interpreter and what a conversion imports
    sys.exit(0)
write = convert.write_aligned if kind == "aligned" else convert.write_file
kwargs = {"max_bytes": int(budget)}
if "max_record_bytes" in inspect.signature(write).parameters:
    kwargs["max_record_bytes"] = int(budget)
try:
    if kind == "aligned":
        report = write(out, files[0], files[1:-1], files[-1], **kwargs)
    else:
        report = write(files[0], out, **kwargs)
    result = {"ok": True, "report": {k: v for k, v in vars(report).items() if k != "output"}}
except Exception as exc:
    result = {"ok": False, "error": type(exc).__name__ + ": " + str(exc)}
with open(out + ".json", "w") as handle:
    json.dump(result, handle)
"""


def _words(rng: random.Random, count: int) -> str:
    return " ".join(f"w{rng.randrange(5000)}" for _ in range(count))


def _inputs(folder: pathlib.Path, mb: int) -> list[tuple[str, str, list[pathlib.Path]]]:
    """(name, kind, files) of each hostile input of about `mb` MB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(0)
    size = mb << 20
    out = []
    cell = 5 << 20
    rows = max(2, size // cell)
    plain = folder / "cells.parquet"
    texts = [f"{i:03d} " + "".join(rng.choices("abcdefghij ", k=cell)) for i in range(rows)]
    # a page a value (as writers that check the page size every few rows write them): pyarrow
    # decodes a page whole, so pyarrow's own default of up to 1,024 values a page would bound
    # the read by the page, not the batch
    pq.write_table(pa.table({"id": [str(i) for i in range(rows)], "text": texts}), plain, use_dictionary=False,
                   row_group_size=rows, write_batch_size=1)
    del texts
    out.append((f"Parquet, {rows} rows of 5 MB cells, one row group", "file", [plain]))

    cr_csv, lf_csv, cr_jsonl, quote, ids = (folder / name for name in
                                            ("cr.csv", "lf.csv", "cr.jsonl", "quote.csv", "ids.jsonl"))
    with (open(cr_csv, "w", newline="", encoding="utf-8") as c, open(lf_csv, "w", newline="", encoding="utf-8") as n,
          open(cr_jsonl, "w", newline="", encoding="utf-8") as j):
        c.write("id,text\r")
        n.write("id,text\n")
        i = 0
        while c.tell() < size:
            text = _words(rng, 150)
            c.write(f"r{i},{text}\r")
            n.write(f"r{i},{text}\n")
            j.write(json.dumps({"id": f"r{i}", "text": text}) + "\r")
            i += 1
    out.append(("CSV, ~1 kB rows, bare \\r line ends", "file", [cr_csv]))
    out.append(("CSV, the same rows, \\n line ends (for reference)", "file", [lf_csv]))
    out.append(("JSON Lines, ~1 kB rows, bare \\r line ends", "file", [cr_jsonl]))
    with open(quote, "w", encoding="utf-8") as q:
        q.write('id,text\n1,fine\n2,"a quote never closed\n')
        while q.tell() < size:
            q.write(_words(rng, 150) + "\n")
    out.append(("CSV, a quote never closed on line 3", "file", [quote]))
    with open(ids, "w", encoding="utf-8") as f:
        i = 0
        while f.tell() < size:
            f.write(json.dumps({"id": f"system-a:document-{i:09d}", "text": "t"}) + "\n")
            i += 1
    out.append((f"JSON Lines, {i:,} rows of distinct ids", "file", [ids]))

    aligned = [folder / f"{name}.txt" for name in ("cands", "refs", "srcs")]
    handles = [open(path, "w", encoding="utf-8") for path in aligned]
    try:
        while handles[0].tell() < size // 3:
            for handle in handles:
                handle.write(_words(rng, 100) + "\n")
    finally:
        for handle in handles:
            handle.close()
    out.append(("line-aligned, candidates, references, sources", "aligned", aligned))
    return out


def _convert(kind: str, files: list[pathlib.Path], output: pathlib.Path, tree: pathlib.Path) -> tuple[dict, float, float]:
    """(result, peak MB, CPU seconds) of one conversion in `tree`."""
    _, peak, cpu = _measure([sys.executable, "-c", _RUN, kind, str(output), str(BUDGET), *map(str, files)], str(tree))
    result_file = pathlib.Path(f"{output}.json")
    result = json.loads(result_file.read_text())
    result_file.unlink()
    return result, peak, cpu


def run(mb: int, before: str, write: bool = True) -> int:
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        before_tree = _unpack(before, folder / "before")
        trees = {"before": before_tree, "now": REPO}
        base = {name: _measure([sys.executable, "-c", _RUN, "imports", "-", "0"], str(tree))[1:] for name, tree in trees.items()}
        rows = [f"What one hostile file makes `convert` hold: peak memory above the interpreter with pyarrow and "
                f"ctgscore.convert imported ({base['now'][0]:.0f} MB), "
                f"revision {before} (before) vs this tree (now), files of about {mb} MB, batch budget and record "
                f"cap {BUDGET >> 20} MB (the defaults, 32 and 64 MB, scaled down as the files are); "
                f"line-aligned: CPU seconds above that process's ({base['now'][1]:.1f} s).", "",
                "| input | before | now | before / now | outcome |", "|---|---|---|---|---|"]
        for name, kind, files in _inputs(folder, mb):
            results, peaks, cpus = {}, {}, {}
            for label, tree in trees.items():
                output = folder / f"{label}.parquet"
                results[label], peaks[label], cpus[label] = _convert(kind, files, output, tree)
            before_result, now_result = results["before"], results["now"]
            if before_result["ok"] and now_result["ok"]:
                same = pq.read_table(folder / "before.parquet").equals(pq.read_table(folder / "now.parquet"))
                assert same and before_result["report"] == now_result["report"], f"{name}: outputs differ"
                outcome = "same rows and report"
            else:
                outcome = f"before: {_short(before_result)}; now: {_short(now_result)}"
            for label in trees:
                (folder / f"{label}.parquet").unlink(missing_ok=True)
            if kind == "aligned":
                old, new = cpus["before"] - base["before"][1], cpus["now"] - base["now"][1]
                rows.append(f"| {name} | {old:.1f} s | {new:.1f} s | {old / new:.1f}x | {outcome} |")
            else:
                old, new = peaks["before"] - base["before"][0], peaks["now"] - base["now"][0]
                rows.append(f"| {name} | {old:,.0f} MB | {new:,.0f} MB | {old / max(new, 1):.1f}x | {outcome} |")
            print(rows[-1], flush=True)
    return publish(rows, REPO / "benchmarks" / "results" / "convert_bounds.md", write=write)


def _short(result: dict) -> str:
    if result["ok"]:
        return f"{result['report']['rows_written']:,} rows written"
    return result["error"].split(": ", 1)[-1].split("/")[-1][:110].replace("|", "/")

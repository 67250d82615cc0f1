"""`make demo` (`python -m ctgscore.demo`): the scoring job of `examples/demo.yaml` (local Ray,
the sample corpus in `data/sample/`, tiny models built into `.cache/tiny-models/` when missing),
then a meta-evaluation report of the stored scores.

Metrics: text_stats, the BLEU baseline, perplexity (tiny GPT-2), BARTScore s->h and
h<->r (tiny BART) and CTRLEval coherence + consistency (tiny PEGASUS + its IWF table). Each metric
skips the rows it does not apply to (CTRLEval rows have no references, SummEval rows no prefix). The tiny models are random:
the demo shows the machinery (outputs, manifest, reuse on a second run), not meaningful scores.
An unchanged re-run reuses every scored shard and the report (`report_key`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO_CONFIG = REPO_ROOT / "examples" / "demo.yaml"


def demo_config(cache_dir: pathlib.Path, output: pathlib.Path, sample: pathlib.Path) -> dict:
    """`examples/demo.yaml` (the one definition of the demo's job), with its input, output and
    tiny-model paths pointed at `sample`, `output` and `cache_dir` (the models built there)."""
    import yaml

    from ctgscore.testing.tiny_models import build_tiny_models

    build_tiny_models(cache_dir)
    data = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    data["input"], data["output"] = str(sample), str(output)
    for metric in data["metrics"]:
        params = metric.get("params") or {}
        for key in ("model", "iwf"):
            if key in params:  # ../.cache/tiny-models/<name> -> <cache_dir>/<name>
                params[key] = str(pathlib.Path(cache_dir) / pathlib.PurePosixPath(params[key]).name)
    return data


REPORT_ARGS = ["--tasks", "0", "--level", "sample", "system"]  # resamples: the one default (meta_eval.defaults)
REPORT_KEY = ".demo-report-key"


def report_key(scores: pathlib.Path, meta_args: list[str]) -> str:
    """What the demo's report is computed from: every score file under `scores` (name, size,
    modification time; an unchanged re-run leaves them untouched), the meta arguments and the
    statistics code. The same key means the report on disk is current."""
    digest = hashlib.sha256(json.dumps(meta_args).encode())
    for path in sorted(scores.rglob("*.parquet")):
        stat = path.stat()
        digest.update(f"{path.relative_to(scores)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    for path in sorted((REPO_ROOT / "meta_eval").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def write_report(scores: pathlib.Path) -> int:
    """`ctgscore meta` on the demo's scores into `<scores>-report/`, unless the report there was
    computed from the same files, arguments and code (then it is reused)."""
    from ctgscore.cli.main import main as ctgscore_main

    report_dir = scores.parent / (scores.name + "-report")
    meta_args = ["meta", "--scores", str(scores), "--output", str(report_dir), *REPORT_ARGS]
    key, stamp = report_key(scores, meta_args), report_dir / REPORT_KEY
    if stamp.is_file() and stamp.read_text().strip() == key and (report_dir / "report.html").is_file():
        print(f"\nreport unchanged (same scores, options and code): {report_dir / 'report.html'}, reused")
        return 0
    print("\nmeta-evaluation of the stored scores (random tiny models: the numbers only show the machinery)")
    code = ctgscore_main(meta_args)
    if code == 0:
        stamp.write_text(key + "\n")
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctgscore.demo", description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=str(REPO_ROOT / "out" / "demo"))
    parser.add_argument("--cache", default=str(REPO_ROOT / ".cache" / "tiny-models"))
    parser.add_argument("-i", "--input", default=str(REPO_ROOT / "data" / "sample"))
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-report", action="store_true", help="skip the meta-evaluation report of the scores")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from transformers.utils import logging as transformers_logging

    from ctgscore.cli.common import print_error, progress_bars
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import error_rate_exceeded, run_job, summary_line
    from scoring.console_text import console_line
    from scoring.errors import CtgscoreError

    transformers_logging.disable_progress_bar()

    data = demo_config(pathlib.Path(args.cache), pathlib.Path(args.output), pathlib.Path(args.input))
    data["progress"] = progress_bars(args)  # bars on a terminal only: a redirected log stays clean
    try:
        manifest = run_job(parse_config(data))
    except CtgscoreError as exc:
        print_error(exc)
        return exc.exit_code
    print(console_line(summary_line(manifest)))
    print(f"\nresults: {args.output}/<metric>/, one row per input row and metric; "
          f"read them as one table with ctgscore.load_scores({args.output!r})")
    for label, report in manifest["metrics"].items():
        print(f"  {label:<11} {report['rows_out']:>4} rows, {report['rows_error']:>3} with an error, "
              f"{report.get('rows_skipped', 0):>3} skipped, {report.get('rows_partial', 0):>3} with some scores left out, "
              f"signature {report['signature'][:80]}")
    print("a row gets each score whose columns it has: CTRLEval rows have no BARTScore source or references, so "
          "BARTScore skips them; SummEval rows get CTRLEval coherence (the text alone) but no consistency (no prefix). "
          "What a row lacked is in its `skipped` column; skipped scores are null, not errors.")
    print(f"manifest: {manifest['manifest']}")
    problems = error_rate_exceeded(manifest)  # the exit code `ctgscore run` gives the same run
    for problem in problems:
        print_error(problem)
    if problems:
        return 1
    if not args.no_report:
        code = write_report(pathlib.Path(args.output))
        if code:
            return code
    print("run `make demo` again: every shard and the report are reused, nothing is computed twice.")
    print("put `ctgscore` on your PATH with `. .venv/bin/activate`, then e.g. "
          "`ctgscore leaderboard examples/demo.yaml -o out/leaderboard --columns bartscore_s_h`.")
    return 0


if __name__ == "__main__":
    from scoring.console_text import escape_what_the_console_cannot_encode

    escape_what_the_console_cannot_encode(sys.stdout, sys.stderr)
    sys.exit(main())

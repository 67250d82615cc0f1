"""`make demo` (`python -m ctgscore.demo`): the scoring job on the embedded default (local Ray,
the sample corpus in `data/sample/`, tiny models built into `.cache/tiny-models/` when missing),
then a meta-evaluation report of the stored scores.

Metrics: text_stats, the BLEU baseline, perplexity (tiny GPT-2), BARTScore s->h and
h<->r (tiny BART) and CTRLEval coherence + consistency (tiny PEGASUS + its IWF table). Each metric
skips the rows it does not apply to (CTRLEval rows have no references, SummEval rows no prefix). The tiny models are random:
the demo shows the machinery (outputs, manifest, reuse on a second run), not meaningful scores.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def demo_config(cache_dir: pathlib.Path, output: pathlib.Path, sample: pathlib.Path) -> dict:
    from ctgscore.testing.tiny_models import build_tiny_models

    models = build_tiny_models(cache_dir)
    return {
        "input": str(sample),
        "output": str(output),
        "metrics": [
            {"name": "text_stats"},
            {"name": "bleu"},  # a baseline: sentence BLEU, and corpus BLEU per system in the report
            {"name": "perplexity", "params": {"model": models["gpt2"]}},
            {"name": "bartscore", "params": {"model": models["bart"], "directions": ["s_h", "r_h", "h_r"],
                                        "preprocess": "moses_detok"}},  # the original detokenises SummEval
            {
                "name": "ctrleval",
                "params": {"model": models["pegasus"], "iwf": models["iwf"], "aspects": ["coherence", "consistency"]},
            },
        ],
        "dtype": "float32",
        "token_budget": 4096,
        "batch_size": 32,
        # the five metrics' pools run side by side on one read: a fifth of a CPU per actor leaves
        # room for Ray Data's read tasks on a 2-core machine
        "pool": {"min_size": 1, "max_size": 2, "num_cpus": 0.2},
        "ray": {"temp_dir": "/tmp/ctgscore-ray"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctgscore.demo", description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=str(REPO_ROOT / "out" / "demo"))
    parser.add_argument("--cache", default=str(REPO_ROOT / ".cache" / "tiny-models"))
    parser.add_argument("-i", "--input", default=str(REPO_ROOT / "data" / "sample"))
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-report", action="store_true", help="skip the meta-evaluation report of the scores")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from transformers.utils import logging as transformers_logging

    from ctgscore.cli.common import progress_bars
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import error_rate_exceeded, run_job, summary_line
    from scoring.errors import CtgscoreError

    transformers_logging.disable_progress_bar()

    data = demo_config(pathlib.Path(args.cache), pathlib.Path(args.output), pathlib.Path(args.input))
    data["progress"] = progress_bars(args)  # bars on a terminal only: a redirected log stays clean
    try:
        manifest = run_job(parse_config(data))
    except CtgscoreError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.exit_code
    print(summary_line(manifest))
    print(f"\nresults: {args.output}/<metric>/, one row per input row and metric; "
          f"read them as one table with ctgscore.load_scores({args.output!r})")
    for label, report in manifest["metrics"].items():
        print(f"  {label:<11} {report['rows_out']:>4} rows, {report['rows_error']:>3} with an error, "
              f"{report.get('rows_skipped', 0):>3} skipped, signature {report['signature'][:80]}")
    print("skipped rows are rows a metric does not apply to (SummEval rows have no CTRLEval prefix, CTRLEval rows "
          "no BARTScore source): null scores, their reason in the `skipped` column, not errors.")
    print(f"manifest: {manifest['manifest']}")
    problems = error_rate_exceeded(manifest)  # the exit code `ctgscore run` gives the same run
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 1
    if not args.no_report:
        from ctgscore.cli.main import main as ctgscore_main

        report_dir = pathlib.Path(args.output).parent / (pathlib.Path(args.output).name + "-report")
        print("\nmeta-evaluation of the stored scores (random tiny models: the numbers only show the machinery)")
        code = ctgscore_main(["meta", "--scores", args.output, "--output", str(report_dir), "--resamples", "200",
                              "--tasks", "0", "--level", "sample", "system"])
        if code:
            return code
    print("run `make demo` again: every shard is reused and nothing is scored twice.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The job's own command line, for `ray job submit` (no CLI package needed on the cluster):

    python -m ray_jobs.score_corpus --config JOB.yaml [--set KEY=VALUE ...] [--prune]
        [--max-error-rate R] [--no-progress] [--json] [--debug]

The same flags as `ctgscore run` and the same summary (`run_summary`, which `ctgscore run` uses too):
one summary line (or one JSON object with `--json`); a failure is one `error: ...` line on
stderr with the error's exit code (2 for a bad config, 1 otherwise), exit 1 when a metric's
error rate is above `max_error_rate`.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any, Sequence

from scoring.console_text import console_json, console_line, console_lines
from scoring.error_rate import is_fraction
from scoring.errors import CtgscoreError, UsageError, one_line
from scoring.redact import redact_values


def run_summary(manifest: dict[str, Any], output: str | None, problems: list[str]) -> dict[str, Any]:
    """What a run reports to its caller: per-metric row counts, bad shards, input files named
    like Parquet that were not read (as the summary line says), pruned files."""
    from ray_jobs.job.manifest import pruned_outputs

    metrics = {
        label: {key: report.get(key) for key in ("rows_in", "rows_out", "rows_scored", "rows_cached", "rows_error",
                                                 "rows_skipped", "rows_partial", "rows_warning", "skip_reasons", "error_reasons",
                                                 "reused_by_content", "orphaned_outputs")}
        for label, report in manifest.get("metrics", {}).items()
    }
    return {"ok": not problems, "command": "run", "output": manifest.get("output") or output,
            "manifest": manifest.get("manifest"), "metrics": metrics, "wall_s": manifest.get("wall_s"),
            "bad_shards": manifest.get("bad_shards", []), "inputs_not_read": manifest.get("inputs_not_read", []),
            "errors": problems, "pruned": pruned_outputs(manifest)}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ray_jobs.score_corpus", description="Run the Ray scoring job.")
    parser.add_argument("config_path", nargs="?", metavar="JOB.yaml")
    parser.add_argument("--config", dest="config_flag", metavar="JOB.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    parser.add_argument("--prune", action="store_true")
    parser.add_argument("--max-error-rate", type=float, default=None, metavar="R")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--debug", action="store_true")
    return parser.parse_args(list(argv))


def overrides(args: argparse.Namespace) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in args.overrides:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {pair!r}: expected KEY=VALUE")
        values[key.strip()] = value
    if args.prune:
        values["prune"] = "true"
    if args.max_error_rate is not None:
        if not is_fraction(args.max_error_rate):
            raise UsageError(f"--max-error-rate {args.max_error_rate}: expected a fraction between 0 and 1")
        values["max_error_rate"] = repr(args.max_error_rate)
    if args.no_progress or args.json:
        values["progress"] = "false"
    return values


def main(argv: Sequence[str] | None = None) -> int:
    from ray_jobs.config import load_config
    from ray_jobs.job.manifest import error_rate_exceeded, summary_line
    from ray_jobs.job.run import run_job

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        given = [p for p in (args.config_path, args.config_flag) if p]
        if len(set(given)) != 1:
            raise UsageError("a job config is required: --config JOB.yaml" if not given else "two configs given; pass one")
        config = load_config(given[0], overrides=overrides(args))
        manifest = run_job(config)
    except (CtgscoreError, OSError) as exc:
        if args.debug:
            print("\n".join(console_lines(traceback.format_exc().rstrip("\n"))), file=sys.stderr)
        code = exc.exit_code if isinstance(exc, CtgscoreError) else 1
        line = console_line(one_line(exc) or type(exc).__name__)  # the console rule: docs/security.md
        print(f"error: {line}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, "exit_code": code, "error": line}))
        return code
    problems = error_rate_exceeded(manifest)
    summary = run_summary(manifest, config.output, problems)
    print(console_json(json.dumps(redact_values(summary), default=lambda value: redact_values(str(value)))) if args.json else console_line(summary_line(manifest)))
    sys.stdout.flush()
    if problems:
        print(f"error: {console_line(one_line('; '.join(problems)))}", file=sys.stderr)
        return 1
    return 0

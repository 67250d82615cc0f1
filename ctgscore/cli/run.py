"""`ctgscore run JOB.yaml` (or `--config JOB.yaml`): the Ray scoring job of a YAML config.

`--set key.path=value` overrides config keys (values read as YAML), `--prune` removes outputs
whose input shard is gone, `--max-error-rate R` overrides the config's `max_error_rate`.
`python -m ray_jobs.score_corpus --config JOB.yaml` takes the same flags (for `ray job submit`; `ray_jobs.entrypoint`).
"""

from __future__ import annotations

import argparse

from ctgscore.cli import common
from scoring.errors import UsageError


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "run", parents=[parent], help="run the Ray scoring job described by a YAML config",
        description="Score Parquet shards (local or s3://) with one or more metrics on Ray; resumable and "
                    "incremental. See examples/*.yaml and docs/job.md.",
    )
    parser.add_argument("config_path", nargs="?", metavar="JOB.yaml", help="job config")
    parser.add_argument("--config", dest="config_flag", metavar="JOB.yaml",
                        help="job config (same as the positional argument)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override a config key, e.g. --set pool.max_size=4 --set output=s3://b/out; repeatable")
    parser.add_argument("--prune", action="store_true",
                        help="remove outputs whose input shard no longer exists (each removal is printed)")
    common.add_error_rate_option(parser, None, "default: the config's max_error_rate")
    parser.set_defaults(handler=handle)


def config_path(args: argparse.Namespace) -> str:
    given = [p for p in (args.config_path, args.config_flag) if p]
    if not given:
        raise UsageError("ctgscore run: a job config is required (ctgscore run JOB.yaml)")
    if len(given) == 2 and given[0] != given[1]:
        raise UsageError(f"ctgscore run: two configs given ({given[0]} and {given[1]}); pass one")
    return given[0]


def overrides(args: argparse.Namespace) -> dict[str, str]:
    """`--set` pairs plus the flags that are config keys (`prune`, `max_error_rate`, `progress`)."""
    values = common.parse_assignments(args.overrides, "--set")
    if args.prune:
        values["prune"] = "true"
    if args.max_error_rate is not None:
        common.check_rate(args.max_error_rate)
        values["max_error_rate"] = repr(args.max_error_rate)
    if not common.progress_bars(args):  # no bars off a terminal, nor under --no-progress
        values["progress"] = "false"
    return values


def error_reason_lines(metrics: dict) -> list[str]:
    """The most frequent error reasons of each metric run that has error rows."""
    lines = []
    for label, report in metrics.items():
        reasons = dict(sorted((report.get("error_reasons") or {}).items(), key=lambda item: -item[1]))
        lines += [line.replace("  errors:", f"  {label} errors:", 1) for line in common.reason_lines(reasons)]
    return lines


def handle(args: argparse.Namespace) -> int:
    from ray_jobs import score_corpus
    from ray_jobs.entrypoint import run_summary

    config = score_corpus.load_config(config_path(args), overrides=overrides(args))
    manifest = score_corpus.run_job(config)
    problems = score_corpus.error_rate_exceeded(manifest)
    summary = run_summary(manifest, getattr(config, "output", None), problems)
    metrics = summary["metrics"]
    lines = [score_corpus.summary_line(manifest)]
    if common.progress_enabled(args):  # --no-progress: the summary line only
        lines += error_reason_lines(metrics)
    common.emit(args, summary, lines)
    if problems:
        common.print_error("; ".join(problems))
        return 1
    return 0

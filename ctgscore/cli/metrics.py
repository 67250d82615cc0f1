"""`ctgscore metrics`: every registered metric (built-in and plugins) with the columns it reads,
the columns a row needs for it to apply, its score columns and its parameters with their defaults, read from the constructors."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from ctgscore.cli import common


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "metrics", parents=[parent], help="list the metrics with their parameters and defaults",
        description="Every metric `score`, `run` and job configs can name, with its parameters (from the "
                    "constructor's signature). Plugins register under the `ctgscore.metrics` entry point group.",
    )
    parser.add_argument("names", nargs="*", metavar="METRIC", help="only these metrics (default: all)")
    parser.set_defaults(handler=handle)


def _format_default(value) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return repr(value) if isinstance(value, str) else str(value)


def text_lines(infos) -> list[str]:
    lines: list[str] = []
    for info in infos:
        origin = "" if info.source == "builtin" else f" (plugin {info.target})"
        lines.append(f"{info.name}{origin}")
        if info.problem:
            lines.append(f"  cannot be loaded: {info.problem}")
            lines.append("")
            continue
        if info.doc:
            lines.append(f"  {info.doc}")
        if info.columns:
            lines.append(f"  reads: {', '.join(info.columns)}")
        if info.columns_by_score:
            lines.append("  reads, per direction or aspect (a row gets each score whose columns it has):")
            width = max(len(key) for key in info.columns_by_score)
            lines += [f"    {key:<{width}}  {', '.join(columns)}" for key, columns in info.columns_by_score.items()]
        if info.needs:
            note = "" if info.needs == "text" else " (a row without a column besides text is skipped, not an error)"
            lines.append(f"  needs: {info.needs}{note}")
        if info.outputs:
            lines.append(f"  scores: {', '.join(info.outputs)}")
        if info.params:
            width = max(len(p.name) for p in info.params)
            lines.append("  params:")
            for p in info.params:
                default = "(required)" if p.required else f"= {_format_default(p.default)}"
                lines.append(f"    {p.name:<{width}}  {default}")
        else:
            lines.append("  params: (none)")
        lines.append("")
    return lines


def handle(args: argparse.Namespace) -> int:
    from scoring.errors import UsageError
    from scoring.registry import METRICS, describe_metric, metric_names

    for name in args.names:
        if name not in METRICS:
            raise UsageError(f"unknown metric {name!r}; known metrics: {', '.join(metric_names())}")
    names = args.names or metric_names()
    infos = [describe_metric(name) for name in names]
    summary = {"ok": True, "command": "metrics",
               "metrics": [{**asdict(info), "params": [asdict(p) for p in info.params]} for info in infos]}
    common.emit(args, summary, text_lines(infos))
    return 0

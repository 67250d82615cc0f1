"""The `ctgscore` command line. Each subcommand mirrors one library entry point.

Every area registers its own subcommands through a `register(subparsers)` function in its
`cli` module, so the parsers live next to the code they call and heavy imports (torch, ray)
happen only when a subcommand runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module that owns the subcommands -> one line shown when it cannot be imported
COMMAND_MODULES = [
    "scoring.cli",  # score, make-tiny-models
    "scoring.codi.cli",  # constraints
    "ray_jobs.cli",  # run
    "meta_eval.cli",  # meta
    "splits.cli",  # splits
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctgscore", description="Batch scoring and meta-evaluation for controllable text generation."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(module_name)
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result = args.handler(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())

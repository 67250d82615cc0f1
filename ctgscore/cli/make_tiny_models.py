"""`ctgscore make-tiny-models DIR`: build the seeded tiny test models into DIR (for tests, the
demo and example configs; random weights, never meaningful scores)."""

from __future__ import annotations

import argparse

from ctgscore.cli import common


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "make-tiny-models", parents=[parent],
        help="build the tiny test models (PEGASUS, BART, GPT-2, IWF table) into DIR",
    )
    parser.add_argument("directory", metavar="DIR")
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from transformers.utils import logging as transformers_logging

    from ctgscore.testing.tiny_models import build_tiny_models

    transformers_logging.disable_progress_bar()  # no "Writing model shards" bars: only the summary
    folder = common.prepare_output_dir(args.directory, "models folder")
    paths = build_tiny_models(folder, force=args.force)
    common.emit(args, {"ok": True, "command": "make-tiny-models", "models": paths},
                [f"{name}: {path}" for name, path in paths.items()])
    return 0

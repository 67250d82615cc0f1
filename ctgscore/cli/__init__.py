"""The `ctgscore` command line: `main(argv) -> exit code` and `build_parser()`, one module per
subcommand. Nothing in the library packages imports this package."""

from ctgscore.cli.main import build_parser, main

__all__ = ["build_parser", "main"]

"""`ctgscore`: the command line. One module per subcommand; each has `register(subparsers,
common)` (its flags) and a handler that imports the heavy libraries (torch, ray) only when it runs.

Exit codes: 0 success, 1 failure while running (bad input data, storage, too many error rows),
2 usage or configuration error. A user mistake prints one `error: ...` line on stderr, never a
traceback (`--debug` shows it). See docs/cli.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from ctgscore import __version__
from ctgscore.cli.common import common_flags, print_error, print_traceback
from scoring.errors import CtgscoreError, UsageError

#: subcommand modules, in the order `ctgscore --help` lists them
COMMAND_MODULES = (
    "ctgscore.cli.score",
    "ctgscore.cli.run",
    "ctgscore.cli.metrics",
    "ctgscore.cli.convert",
    "ctgscore.cli.meta",
    "ctgscore.cli.compare",
    "ctgscore.cli.leaderboard",
    "ctgscore.cli.splits",
    "ctgscore.cli.compmctg",
    "ctgscore.cli.constraints",
    "ctgscore.cli.make_tiny_models",
)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose mistakes raise `UsageError` (one line, exit code 2) instead of printing
    the usage block and exiting."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def build_parser() -> ArgumentParser:
    common = common_flags()
    parser = ArgumentParser(
        prog="ctgscore",
        description="Batch scoring and meta-evaluation for controllable text generation.",
        parents=[common],
        epilog="Exit codes: 0 success, 1 failure while running, 2 usage or configuration error.",
    )
    parser.add_argument("--version", action="version", version=f"ctgscore {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers, common)
    return parser


def _os_error_line(exc: OSError) -> str:
    if exc.filename is not None:
        reason = exc.strerror or type(exc).__name__
        return f"{exc.filename}: {reason}"
    return str(exc) or type(exc).__name__


def _storage_failure(exc: Exception, argv: Sequence[str]) -> CtgscoreError | None:
    """A storage failure no library call turned into a `StorageError` (an S3 client's own
    exception: no credentials, an endpoint that refuses connections) as one, naming the first
    `s3://` argument; None when `exc` is no storage failure."""
    from ray_jobs.storage.failures import storage_error

    # by the raising library only: a bug whose message mentions a timeout stays an internal error
    if not type(exc).__module__.startswith(("botocore", "aiobotocore", "s3fs", "aiohttp")):
        return None
    uri = next((arg for arg in argv if arg.startswith("s3://")), None)
    return storage_error(exc, uri or "S3", "access")


def _report(message: str, code: int, as_json: bool) -> int:
    line = print_error(message)  # one line, by the console rule (docs/security.md)
    if as_json:
        import json

        print(json.dumps({"ok": False, "exit_code": code, "error": line}))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run `ctgscore` with `argv` (default: `sys.argv[1:]`); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    as_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        return _report(str(exc), exc.exit_code, as_json)
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return _report("interrupted", 130, as_json)
    except BrokenPipeError:  # `ctgscore metrics | head`: the reader left, nothing to report
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except CtgscoreError as exc:
        if debug:
            print_traceback()
        return _report(str(exc) or type(exc).__name__, exc.exit_code, as_json)
    except OSError as exc:
        if debug:
            print_traceback()
        return _report(_os_error_line(exc), 1, as_json)
    except Exception as exc:  # noqa: BLE001 - anything else is a bug in ctgscore
        if debug:
            print_traceback()
        storage = _storage_failure(exc, argv)
        if storage is not None:
            return _report(str(storage), storage.exit_code, as_json)
        if debug:
            return _report(f"internal error: {type(exc).__name__}: {exc}", 1, as_json)
        return _report(f"internal error: {type(exc).__name__}: {exc}; rerun with --debug for the traceback", 1,
                       as_json)


def entry_point() -> None:
    """The `ctgscore` console script."""
    from scoring.console_text import escape_what_the_console_cannot_encode

    escape_what_the_console_cannot_encode(sys.stdout, sys.stderr)
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

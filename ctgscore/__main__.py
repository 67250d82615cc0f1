"""`python -m ctgscore ...` is the `ctgscore` command."""

from ctgscore.cli.main import entry_point

entry_point()

"""`python -m ray_jobs.meta_eval ARGS` runs `ctgscore meta ARGS` (kept for `ray job submit`)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from ctgscore.cli.main import main as ctgscore_main

    return ctgscore_main(["meta", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

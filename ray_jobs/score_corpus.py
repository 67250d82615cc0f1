"""The scoring job: Parquet shards (local or `s3://`) -> Ray Data actor pools -> Parquet.

    python -m ray_jobs.score_corpus --config JOB.yaml       # or: ctgscore run JOB.yaml
    ray job submit --working-dir . -- python -m ray_jobs.score_corpus --config JOB.yaml

This module is the job's documented entry: `run_job` (`ray_jobs/job/run.py`) runs the stages
of `ray_jobs/job/` in order, and `python -m` hands over to the job's own command line
(`ray_jobs/entrypoint.py`). Stages, layout and guarantees: `docs/job.md`.
"""

from __future__ import annotations

import sys

from ray_jobs.config import ConfigError, load_config
from ray_jobs.job.errors import JobError
from ray_jobs.job.manifest import error_rate_exceeded, summary_line
from ray_jobs.job.run import run_job

__all__ = ["ConfigError", "JobError", "error_rate_exceeded", "load_config", "run_job", "summary_line"]


if __name__ == "__main__":  # for `ray job submit`: the flags of `ctgscore run`, without the CLI package
    from ray_jobs.entrypoint import main
    from scoring.console_text import escape_what_the_console_cannot_encode

    escape_what_the_console_cannot_encode(sys.stdout, sys.stderr)
    sys.exit(main())

"""The job's own failure type (an exit-coded `scoring.errors.CtgscoreError`)."""

from __future__ import annotations

from scoring.errors import CtgscoreError


class JobError(CtgscoreError):
    """The job cannot finish correctly: bad shards without `skip_bad_shards`, lost rows, a
    worker failure outside any row. Exit code 1."""

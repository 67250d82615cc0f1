"""`ctgscore run JOB.yaml`: the scoring job (`ray_jobs.score_corpus`) from the main CLI."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the Ray scoring job described by a YAML config",
        description="Score Parquet shards (local or s3://) with one or more metrics on Ray; "
        "resumable and incremental. See examples/*.yaml.",
    )
    parser.add_argument("config", help="job YAML")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(handler=_run)


def _run(args) -> int:
    from ray_jobs.score_corpus import run_from_path  # ray is imported only when running

    return run_from_path(args.config, progress=not args.no_progress)

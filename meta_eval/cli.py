"""`ctgscore meta ...`: the meta-evaluation job from the unified command line (see ray_jobs.meta_eval)."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("--scores", required=True,
                        help="score Parquet (file, folder or s3:// prefix) or a checklist CSV")
    parser.add_argument("--human-columns", nargs="*", default=None,
                        help="human aspects (default: every human_* column)")
    parser.add_argument("--metrics", nargs="*", default=None,
                        help="metric score columns (default: every numeric non-human column)")
    parser.add_argument("--out", required=True, help="output folder for results.json, report and PNGs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (0 = none)")
    parser.add_argument("--tasks", type=int, default=2, help="Ray tasks for the bootstrap (0 = no Ray)")
    parser.add_argument("--level", nargs="+", default=["sample"], choices=["sample", "document", "system"],
                        help="bootstrap level(s): rows (sample) or documents (document/system) are resampled")
    parser.add_argument("--methods", nargs="+", default=["pearson", "spearman", "kendall"],
                        choices=["pearson", "spearman", "kendall"], help="correlations to report")
    parser.add_argument("--boot-method", default="spearman", choices=["pearson", "spearman", "kendall"])
    parser.add_argument("--kendall-variant", default="b", choices=["b", "c"])
    parser.add_argument("--pairs", default="given", choices=["given", "ranking"],
                        help="checklist Easy/Hard pairs: stored ones when known, or from the human ranking")
    parser.add_argument("--easy-pairs", nargs="*", default=None, metavar="SYS_A::SYS_B",
                        help="given Easy system pairs (overrides stored/ranking pairs), e.g. 'M11::M0'")
    parser.add_argument("--hard-pairs", nargs="*", default=None, metavar="SYS_A::SYS_B")
    parser.add_argument("--lower-is-better", nargs="*", default=None,
                        help="metric columns where lower is better (default: perplexity)")
    parser.add_argument("--format", default="md", choices=["md", "html", "both"])
    parser.add_argument("--num-cpus", type=float, default=0.5, help="CPUs per Ray task")


def handler(args) -> int:
    from ray_jobs.meta_eval import run

    return run(args)


def register(subparsers) -> None:
    parser = subparsers.add_parser("meta", help="correlations, paired bootstrap, checklist, report")
    add_arguments(parser)
    parser.set_defaults(handler=handler)

"""`python -m ray_jobs.meta_eval ARGS` runs `ctgscore meta ARGS` (kept for `ray job submit`;
the meta-evaluation itself is `meta_eval`, its Ray runner `ray_jobs.runners`)."""

if __name__ == "__main__":
    import sys

    from ctgscore.cli.main import main

    sys.exit(main(["meta", *sys.argv[1:]]))

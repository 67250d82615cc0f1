"""Meta-evaluation on stored per-row scores (spec `meta-eval.md`); never re-scores.

Modules: `io` (score Parquet / checklist CSV readers), `correlation` (three levels + WMT DARR tau),
`bootstrap` (paired bootstrap, Ray-chunked, seeded), `checklist` (metric preference checklist),
`pipeline` (every number for a table, per dataset), `report` (JSON, Markdown/HTML, PNG plots),
`cli` (the `ctgscore meta` subcommand; the job is `python -m ray_jobs.meta_eval`).
"""

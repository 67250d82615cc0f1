"""Meta-evaluation on stored per-row scores (`docs/meta_eval.md`); never re-scores, never imports Ray.

Modules: `io` (score Parquet / checklist CSV readers), `correlation` (three levels + WMT DARR tau),
`bootstrap` (paired bootstrap between metrics), `subsample` (the BARTScore paper's significance
test), `checklist` (metric preference checklist), `compare` (systems compared: paired bootstrap,
approximate randomisation, leaderboard), `codi` (CoDI-Eval corpus statistics and report),
`pipeline` (every number for a table, per dataset), `results` (the typed results and their JSON),
`report` (plots, Markdown, self-contained HTML), `runner` (how work units fan out; the Ray runner
is `ray_jobs.runners`).
"""

"""The scoring job's stages, in the order `ray_jobs.score_corpus.run_job` runs them:

1. `plan`     (driver) list shards, read their footers, describe each metric, decide per metric
              which output parts are committed and which row ranges (units) are still to do;
2. `check`    (workers) per-shard row checks (ids non-null, unique, valid UTF-8) and the
              cross-shard duplicate-id note, as small results; with the id index beside the
              output, only the ids of shards it does not know are read;
3. `score`    (workers) read each unit's rows once, pass them through every metric's actor
              pool in turn; each pool scores its rows and writes that metric's part atomically;
              only small per-part reports come back to the driver;
4. `commit`   (driver) per shard, pick the parts that cover its rows, remove superseded parts,
              keep or prune outputs of shards that are bad or gone;
5. `verify`   (driver) rows out == rows in, from the workers' reports and one listing;
6. `manifest` (driver) `OUT/manifest.json`, written last; summary line; error-rate check.

`layout` names the output files; `ray_jobs.incremental` holds the reuse rules and the row
cache; `ray_jobs.session` starts or joins Ray. The layout is documented in `docs/job.md`.
"""

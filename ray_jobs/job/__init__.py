"""The scoring job's stages, in the order `ray_jobs.job.run.run_job` runs them (`docs/job.md`):

0. `metrics`  (driver) each metric resolved once: class, checked params, effective pool, signature;
1. `plan`     (driver) list shards, read the input footers the manifest does not vouch for and
              every part's footer (`part_check`: against itself and the manifest), decide per
              metric which output parts are committed and which row ranges (units) are still to do;
2. `check`    (workers) per-shard id checks and the cross-shard duplicate-id note (id index);
3. score      (workers) `pipeline` declares and runs the steps over the `units`:
              `read` -> per metric [`prepare` (CPU task)] -> `scorer` (its actor pool), which
              settles rows (`rows`) and writes the metric's part (`write`); `cluster` sizes pools;
4. `commit`   (driver) per shard, the parts that cover its rows; superseded parts removed;
5. `verify`, `report` (driver) rows out == rows in, the manifest's entry per metric;
6. `manifest` (driver) `OUT/manifest.json`, written last.

`layout` names the output files; `ray_jobs.incremental` holds the reuse rules and the row
cache; `ray_jobs.session` starts or joins Ray.
"""

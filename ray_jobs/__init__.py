"""The Ray scoring job: Parquet shards (local or s3://) -> actor pools -> Parquet + manifest.

`run_job(config)` in `score_corpus`, config in `config`, storage in `io`, reuse/resume in
`incremental`, the `ctgscore run` subcommand in `cli`, `make demo` in `demo`.
"""

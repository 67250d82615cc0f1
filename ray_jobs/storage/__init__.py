"""The job's storage layer, one module per job (paths are URIs: a local path or `s3://bucket/key`):

* `uris`          URI helpers (is it S3, the filesystem path, joining);
* `clients`       the driver's fsspec filesystem and Ray Data's pyarrow filesystem, from one
                  set of S3 options (`scoring.s3_options`), with request counting attached;
* `metering`      counts the requests a run makes (LIST, HEAD, GET, PUT, DELETE) and the time
                  the driver waits on storage;
* `parallel`      bounded-concurrency map for listings and footer reads;
* `failures`      classify storage failures (transient or not) into one-line `StorageError`s;
* `listing`       list input shards and output files (one paged LIST per prefix) with sizes
                  and etags;
* `shard_checks`  the footer check of one input shard;
* `writes`        atomic writes, the write probe, temp-file cleanup, removal;
* `reads`         Parquet footers (one ranged GET each) and whole files;
* `worker_errors` rebuild a ctgscore error from a Ray worker's traceback text.
"""

"""Rebuild the shipped sample corpus from `../shared/data/corpora` (run from the repo root).

SummEval: the first 10 documents x 16 systems (160 rows, 2 shards); CTRLEval sentiment and
topic: the first 60 rows of each (5 prefix/label blocks of 12). Rows are copied unchanged.
"""

import pathlib

import pyarrow.compute as pc
import pyarrow.parquet as pq

CORPORA = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "corpora"
OUT = pathlib.Path(__file__).resolve().parent


def main() -> None:
    summeval = pq.read_table(CORPORA / "summeval.parquet")
    docs = sorted(set(summeval.column("doc_id").to_pylist()))[:10]
    summeval = summeval.filter(pc.is_in(summeval.column("doc_id"), value_set=__import__("pyarrow").array(docs)))
    half = summeval.num_rows // 2
    pq.write_table(summeval.slice(0, half), OUT / "summeval-00000.parquet")
    pq.write_table(summeval.slice(half), OUT / "summeval-00001.parquet")
    for name in ("ctrleval_senti", "ctrleval_topic"):
        table = pq.read_table(CORPORA / f"{name}.parquet").slice(0, 60)
        pq.write_table(table, OUT / f"{name}-00000.parquet")


if __name__ == "__main__":
    main()

"""Token lengths of real rows for the GPU benchmark, written once to `gpu_lengths.json` so
that `bench_gpu.py` needs neither pyarrow nor a tokenizer on the GPU machine.

A byte-level BPE with BART's vocabulary size (50,265) is trained on the committed corpora
(`tests/data/corpora`, no hub); SummEval gives (document, summary) lengths with their
`doc_id` (16 systems per document), CTRLEval (sentiment + topic) gives (prefix, text)
lengths. Sources are cut to 1,024 tokens like the models' position tables.

Run: `.venv/bin/python -m benchmarks.gpu_lengths` (rewrites benchmarks/gpu_lengths.json)
"""

from __future__ import annotations

import json
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
CORPORA = REPO / "tests" / "data" / "corpora"
OUT = REPO / "benchmarks" / "gpu_lengths.json"
BART_VOCABULARY = 50_265
MAX_POSITIONS = 1024


def corpus_texts() -> dict[str, list[dict]]:
    import pyarrow.parquet as pq

    summeval = pq.read_table(CORPORA / "summeval.parquet", columns=["doc_id", "source", "text"]).to_pylist()
    ctrleval = []
    for name in ("ctrleval_senti", "ctrleval_topic"):
        ctrleval += pq.read_table(CORPORA / f"{name}.parquet", columns=["prefix", "text"]).to_pylist()
    return {"summeval": summeval, "ctrleval": ctrleval}


def train_bpe(texts: dict[str, list[dict]]):
    """A byte-level BPE of BART's vocabulary size trained on these corpora (no download)."""
    from tokenizers import ByteLevelBPETokenizer

    lines = sorted({row["source"] for row in texts["summeval"]}) + [row["text"] for row in texts["summeval"]]
    lines += [row["text"] for row in texts["ctrleval"]]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines, vocab_size=BART_VOCABULARY, min_frequency=2,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
    return bpe


def main() -> None:
    texts = corpus_texts()
    bpe = train_bpe(texts)

    def length(text: str) -> int:
        return min(len(bpe.encode(text).ids) + 2, MAX_POSITIONS)  # <s> ... </s>

    data = {
        "tokenizer": f"byte-level BPE, vocabulary {bpe.get_vocab_size()} (trained on tests/data/corpora)",
        "summeval": [[row["doc_id"], length(row["source"]), length(row["text"])] for row in texts["summeval"]],
        "ctrleval": [[length(row["prefix"]), length(row["text"])] for row in texts["ctrleval"]],
    }
    OUT.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({len(data['summeval'])} SummEval pairs, {len(data['ctrleval'])} CTRLEval rows)")


if __name__ == "__main__":
    main()

"""Rebuild the committed test-data slice from the full project data.

    python tests/data/build_slice.py /path/to/full/data

The full data (the original projects' files in the canonical layout) is not part of this
repository; this script records exactly how the slice under `tests/data/` was cut from it, so
the slice can be rebuilt or extended. Rows are copied unchanged; only whole documents are
kept for grouped corpora, so document- and system-level statistics stay meaningful.
"""

from __future__ import annotations

import pathlib
import shutil
import sys

import pandas as pd

HERE = pathlib.Path(__file__).resolve().parent

# corpus -> number of leading documents (doc_id groups) kept; None keeps the file whole
CORPUS_DOCS = {
    "summeval": None,  # whole: the sentence-splitter audit counts all 1,600 summaries
    "realsumm": 8,
    "newsroom": 30,
    "qags_cnn": 120,
    "qags_xsum": 120,
    "rank19": 100,
    "bagel": 150,
    "sfhot": 150,
    "sfres": 150,
    "ctrleval_senti": None,
    "ctrleval_topic": None,
}
CORPUS_ROWS = {"wmt19_darr_kk_en": 2000}  # leading rows kept (pairs of one segment stay together)
CHECKLIST_WHOLE = ("usr_persona_chat.csv", "ctrl_topic.csv")  # notebook oracles need every row
CHECKLIST_ROWS = 100  # leading rows kept of the other checklist tables
WHOLE_FILES = (
    "codi-eval/instructions",
    "compmctg/derived",
    "compmctg/map_dict.json",
    "compmctg/LICENSE",
    "checklist/LICENSE",
    "bartscore/LICENSE",
)


def first_documents(frame: pd.DataFrame, documents: int | None) -> pd.DataFrame:
    if documents is None:
        return frame
    keep = list(dict.fromkeys(frame["doc_id"]))[:documents]
    return frame[frame["doc_id"].isin(keep)].reset_index(drop=True)


def build(full: pathlib.Path) -> None:
    (HERE / "corpora").mkdir(exist_ok=True)
    for name, documents in CORPUS_DOCS.items():
        frame = pd.read_parquet(full / "corpora" / f"{name}.parquet")
        first_documents(frame, documents).to_parquet(HERE / "corpora" / f"{name}.parquet", index=False)
    for name, rows in CORPUS_ROWS.items():
        frame = pd.read_parquet(full / "corpora" / f"{name}.parquet")
        frame.iloc[:rows].to_parquet(HERE / "corpora" / f"{name}.parquet", index=False)
    (HERE / "checklist").mkdir(exist_ok=True)
    for path in sorted((full / "checklist").glob("*.csv")):
        if path.name in CHECKLIST_WHOLE:
            shutil.copyfile(path, HERE / "checklist" / path.name)
        else:
            pd.read_csv(path).iloc[:CHECKLIST_ROWS].to_csv(HERE / "checklist" / path.name, index=False)
    for relative in WHOLE_FILES:
        source, target = full / relative, HERE / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)


if __name__ == "__main__":
    build(pathlib.Path(sys.argv[1]))

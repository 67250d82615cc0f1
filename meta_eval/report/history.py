"""The leaderboard's `history.jsonl`: one line per refresh (`docs/meta_eval.md`, "History").

A line is `{"format": 2, "refreshed", "job", "rows", "leaders": [{"dataset", "column",
"system"}, ...]}`: one record per (dataset, column), so a dataset or column with a `/` in its
name stays apart (`a/b` + `c` and `a` + `b/c` are two records). Lines written before format 2
keyed `leaders` by `"dataset/column"`; `read_history` still reads them, splitting a key by the
(dataset, column) pairs it is told about, else at its only `/`; a key it cannot split for sure
keeps `dataset` and `column` None and the key as `key`.
"""

from __future__ import annotations

import json
from typing import Iterable

FORMAT = 2


def history_record(comparisons, refreshed: str, job: dict, rows: int) -> dict:
    """The history line of one refresh (its leaders: rank 1 of each comparison)."""
    leaders = [{"dataset": c.dataset, "column": c.column, "system": c.systems[0].system} for c in comparisons]
    return {"format": FORMAT, "refreshed": refreshed, "job": job, "rows": rows, "leaders": leaders}


def _split(key: str, known: set[tuple[str, str]]) -> tuple[str | None, str | None]:
    matches = [pair for pair in known if f"{pair[0]}/{pair[1]}" == key]
    if len(matches) == 1:
        return matches[0]
    if not matches and key.count("/") == 1:
        dataset, column = key.split("/")
        return dataset, column
    return None, None


def read_history(path, known: Iterable[tuple[str, str]] = ()) -> list[dict]:
    """Every line of a `history.jsonl` (old or new format) as a format-2 record; `known`:
    (dataset, column) pairs that resolve old `"dataset/column"` keys. A line that is not a JSON
    object, or whose `leaders` is neither a list nor an old-format object, is skipped and named
    in the record list as `{"line": n, "problem": ...}`."""
    known = set(known)
    records = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                records.append({"line": number, "problem": f"not UTF-8 (byte {exc.start + 1})"})
                continue
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError as exc:  # JSONDecodeError, or a number past the reader's digit limit
                records.append({"line": number, "problem": f"not JSON ({getattr(exc, 'msg', exc)})"})
                continue
            except RecursionError:
                records.append({"line": number, "problem": "not JSON (nested deeper than the reader goes)"})
                continue
            if not isinstance(record, dict):
                records.append({"line": number, "problem": "not a JSON object"})
                continue
            leaders = record.get("leaders")
            if leaders is not None and not isinstance(leaders, (list, dict)):  # would fail `leader_since`
                records.append({"line": number, "problem": "leaders is not a list"})
                continue
            if isinstance(leaders, dict):  # before format 2: {"dataset/column": system}
                converted = []
                for key, system in leaders.items():
                    dataset, column = _split(key, known)
                    entry = {"dataset": dataset, "column": column, "system": system}
                    if dataset is None:
                        entry["key"] = key
                    converted.append(entry)
                record = {**record, "format": 1, "leaders": converted}
            records.append(record)
    return records


def leader_since(records: list[dict], dataset: str, column: str, system: str) -> tuple[str | None, int]:
    """(the first refresh, how many refreshes) of the run of latest refreshes in which `system`
    led (`dataset`, `column`); (None, 0) when it did not lead in the latest one."""
    since, count = None, 0
    for record in reversed(records):
        leaders = record.get("leaders") or []
        lead = [e.get("system") for e in leaders if isinstance(e, dict)
                and (e.get("dataset"), e.get("column")) == (dataset, column)]
        if lead != [system]:
            break
        since, count = record.get("refreshed"), count + 1
    return since, count

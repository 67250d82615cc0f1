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
MAX_TIME = 64  # characters of a line's `refreshed` (an ISO time has 25); it is printed as "leader since T"


def history_record(comparisons, refreshed: str, job: dict, rows: int) -> dict:
    """The history line of one refresh (its leaders: rank 1 of each comparison)."""
    leaders = [{"dataset": c.dataset, "column": c.column, "system": c.systems[0].system} for c in comparisons]
    return {"format": FORMAT, "refreshed": refreshed, "job": job, "rows": rows, "leaders": leaders}


def _split(key: str, known: dict[str, list[tuple[str, str]]]) -> tuple[str | None, str | None]:
    """(dataset, column) of an old `"dataset/column"` key; `known` maps each joined key to the
    pairs that join to it (built once per file: a line of 10,000 keys against 10,000 pairs was
    10^8 joins, 48 s a line)."""
    matches = known.get(key, []) if isinstance(key, str) else []
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
    joined: dict[str, list[tuple[str, str]]] = {}
    for pair in set(known):
        joined.setdefault(f"{pair[0]}/{pair[1]}", []).append(pair)
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
            refreshed = record.get("refreshed")
            if refreshed is not None and (not isinstance(refreshed, str) or len(refreshed) > MAX_TIME):
                records.append({"line": number, "problem": "refreshed is not a time (a string of at most "
                                                           f"{MAX_TIME} characters)"})
                continue
            if isinstance(leaders, dict):  # before format 2: {"dataset/column": system}
                converted = []
                for key, system in leaders.items():
                    dataset, column = _split(key, joined)
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
    leader, since, count = leader_streaks(records, [(dataset, column)]).get((dataset, column), (None, None, 0))
    return (since, count) if leader == system and count else (None, 0)


def _leaders_of(record: dict) -> dict:
    """(dataset, column) -> the systems a record names as leading it (entries of other types skipped)."""
    out: dict = {}
    for entry in record.get("leaders") or []:
        if isinstance(entry, dict):
            key = (entry.get("dataset"), entry.get("column"))
            if all(part is None or isinstance(part, str) for part in key):
                out.setdefault(key, []).append(entry.get("system"))
    return out


def leader_streaks(records: list[dict], pairs: Iterable[tuple[str, str]]) -> dict:
    """For each (dataset, column) of `pairs`: (the system that led it in the latest record, the
    first refresh of the run of latest records in which it led, how many); a pair the latest
    record gives no single leader is left out. One pass over the records, each indexed once
    (asked per pair, a board of 3,000 columns and 50 refreshes scanned 4.5 x 10^8 entries)."""
    wanted = set(pairs)
    open_runs: dict = {}
    done: dict = {}
    for position, record in enumerate(reversed(records)):
        leaders = _leaders_of(record)
        if position == 0:
            open_runs = {pair: [lead[0], None, 0] for pair in wanted
                         if len(lead := leaders.get(pair, [])) == 1 and isinstance(lead[0], str)}
        for pair in list(open_runs):
            run = open_runs[pair]
            if leaders.get(pair, []) != [run[0]]:
                done[pair] = tuple(open_runs.pop(pair))
                continue
            run[1], run[2] = record.get("refreshed"), run[2] + 1
        if not open_runs:
            break
    done.update({pair: tuple(run) for pair, run in open_runs.items()})
    return done

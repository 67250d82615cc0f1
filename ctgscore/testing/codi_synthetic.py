"""A generated CoDI-Eval response dump (all six tasks) for tests, benchmarks and demos.

`write_responses` writes `<out>/<task>.jsonl` in the original generate.py layout (the
instruction row's fields plus `text`). With probability `skill` a response is built to meet
its rule constraint (length inside the interval, every keyword present, anti-keyword
absent), otherwise to miss it; classifier tasks get filler text. Seeded.
"""

from __future__ import annotations

import json
import pathlib
import random
from typing import Any

from scoring.codi import TASKS, convert

FILLER = (
    "people often talk about the weather the city the river music food travel and the small things "
    "that make a day feel good or bad while others prefer to read write walk and think quietly"
).split()


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(FILLER) for _ in range(max(n, 0))]


def response_for(task: str, row: dict[str, Any], rng: random.Random, skill: float) -> str:
    good = rng.random() < skill
    preamble = "Sure, here is the text:\n\n" if rng.random() < 0.3 else ""
    if task == "length":
        lo, hi = int(row["label"][0]), int(min(row["label"][1], 400))
        n = rng.randint(lo, hi) if good else (hi + rng.randint(1, 5) if rng.random() < 0.5 or lo <= 1 else lo - 1)
        return preamble + " ".join(_words(rng, n))
    if task == "keyword":
        words = _words(rng, rng.randint(8, 20))
        items = [item.split(" or ")[rng.randrange(len(item.split(" or ")))] for item in row["label"]]
        if not good:
            items = items[1:]
        words[1:1] = items
        if not good and "anti_label" in row and rng.random() < 0.5:
            words.append(row["anti_label"])
        return preamble + " ".join(words)
    if task == "detoxic":
        return " ".join(_words(rng, rng.randint(5, 25)))
    return preamble + " ".join(_words(rng, rng.randint(10, 40)))


def write_responses(instructions_dir: str | pathlib.Path, out_dir: str | pathlib.Path, seed: int = 0,
                    skill: float = 0.7, tasks=TASKS, limit: int | None = None) -> pathlib.Path:  # fmt: skip
    """Responses for every instruction of `tasks` (the first `limit` per task if given)."""
    rng = random.Random(seed)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        rows = convert.read_jsonl(convert.instruction_file(pathlib.Path(instructions_dir), task))
        if limit is not None:
            rows = rows[:limit]
        with open(out / f"{task}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps({**row, "text": response_for(task, row, rng, skill)}) + "\n")
    return out

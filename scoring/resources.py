"""Shipped prompt and verbaliser files, addressable by short names or by path."""

from __future__ import annotations

import pathlib

RESOURCES = pathlib.Path(__file__).resolve().parent / "resources"

BARTSCORE_PROMPTS = {
    "src_hypo": RESOURCES / "bartscore" / "src_hypo_prompt.txt",
    "ref_hypo": RESOURCES / "bartscore" / "ref_hypo_prompt.txt",
    "tiny_ref_hypo": RESOURCES / "bartscore" / "tiny_ref_hypo_prompt.txt",
}
CTRLEVAL_TASKS = {
    "sentiment": (RESOURCES / "ctrleval" / "prompt_senti.txt", RESOURCES / "ctrleval" / "verbal_senti.txt"),
    "topic": (RESOURCES / "ctrleval" / "prompt_topic.txt", RESOURCES / "ctrleval" / "verbal_topic.txt"),
}
CTRLEVAL_TASK_ALIASES = {"senti": "sentiment"}


def bartscore_prompt_path(name_or_path: str) -> pathlib.Path:
    return BARTSCORE_PROMPTS.get(name_or_path, pathlib.Path(name_or_path))


def ctrleval_task_paths(task: str) -> tuple[pathlib.Path, pathlib.Path]:
    task = CTRLEVAL_TASK_ALIASES.get(task, task)
    if task not in CTRLEVAL_TASKS:
        raise ValueError(f"unknown CTRLEval task '{task}'; shipped: {', '.join(CTRLEVAL_TASKS)} (or pass prompt/verbaliser paths)")
    return CTRLEVAL_TASKS[task]

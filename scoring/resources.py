"""Shipped resources (prompt sets, verbalisers, Punkt parameters), addressable by name or path
from any working directory.

A name such as `tiny_ref_hypo`, `src_hypo`, `sentiment` or a shipped file name
(`prompt_senti.txt`, or a path ending in one, like `scoring/resources/ctrleval/prompt_senti.txt`)
resolves to the file inside the installed package; any other string is a path of your own.
"""

from __future__ import annotations

import pathlib

from scoring.errors import UsageError

RESOURCES = pathlib.Path(__file__).resolve().parent / "resources"
PUNKT_ENGLISH_DIR = RESOURCES / "punkt_tab" / "english"

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
# every shipped text file by its file name and by its stem (prompt_senti, src_hypo_prompt, ...)
SHIPPED_FILES = {
    key: path
    for folder in ("bartscore", "ctrleval")
    for path in sorted((RESOURCES / folder).glob("*.txt"))
    for key in (path.name, path.stem)
}


def resource_path(name_or_path: str | pathlib.Path, names: dict[str, pathlib.Path] | None = None) -> pathlib.Path:
    """The file behind a resource argument: a short name from `names`, an existing path, or a
    shipped file named by its file name (whatever folder the path put in front of it)."""
    text = str(name_or_path)
    if names and text in names:
        return names[text]
    path = pathlib.Path(text).expanduser()
    if path.exists():
        return path
    shipped = SHIPPED_FILES.get(path.name) if path.suffix else SHIPPED_FILES.get(text)
    return shipped if shipped is not None else path


def bartscore_prompt_path(name_or_path: str | pathlib.Path) -> pathlib.Path:
    """A BARTScore prompt set: `src_hypo` (70 prompts), `ref_hypo` (34), `tiny_ref_hypo`, a
    shipped file name, or your own file (one prompt per line)."""
    return resource_path(name_or_path, BARTSCORE_PROMPTS)


def ctrleval_task_paths(task: str) -> tuple[pathlib.Path, pathlib.Path]:
    """Prompt and verbaliser files of a shipped CTRLEval task (`sentiment`/`senti`, `topic`)."""
    task = CTRLEVAL_TASK_ALIASES.get(task, task)
    if task not in CTRLEVAL_TASKS:
        raise UsageError(f"unknown CTRLEval task '{task}'; shipped: {', '.join(CTRLEVAL_TASKS)} (or pass prompt/verbaliser paths)")
    return CTRLEVAL_TASKS[task]

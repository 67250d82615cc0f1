"""CoDI-Eval instruction sets (+ responses) -> canonical rows with a `constraint` JSON column.

Field layouts of the released CoDI-Eval instruction sets (docs/codi-eval.md):
sentiment/topic `{instruction, label: str}`; multi `{instruction, label1, label2}`;
length `{instruction, mode, label: [lo, hi]}`; keyword easy `{instruction, label: [..]}`,
hard `{.. , anti_label}`; detoxic `{instruction, context_id, context}`.

Constraint JSON per task (the `constraint` column, docs/schema.md):
  {"task": "sentiment"|"topic", "label": str}
  {"task": "multi", "label1": topic, "label2": sentiment-or-emotion}
  {"task": "length", "mode": str, "label": [lo, hi]}
  {"task": "keyword", "level": "easy"|"hard", "label": [..], "anti_label": str (hard only)}
  {"task": "detoxic", "context_id": int, "context": str}
`instruction_row(canonical_row)` inverts the conversion (round trip over every shipped row).

Responses: a JSONL per task, `<dir>/<task>.jsonl` or `<dir>/<task>/generation.jsonl` (the
original generate.py layout: the instruction row's fields plus `text`), aligned with the
instruction set by line (or by an `index` field) and checked against its `instruction`.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any, Iterable, Sequence

from scoring.cell_types import lone_surrogate
from scoring.codi import TASKS
from scoring.codi.rules import keyword_alternatives
from scoring.errors import InputError
from scoring.local_files import refuse_device
from scoring.strict_json import DuplicateKey, unique_keys
from scoring.utf8_text import decode_utf8

DATASET = "codi-eval"
TASK_ALIASES = {"toxicity": "detoxic", "detox": "detoxic", "keywords": "keyword"}


class ConvertError(InputError):
    """Bad instruction or response input; the message names file, row and field."""


def canonical_task(task: str) -> str:
    task = TASK_ALIASES.get(task, task)
    if task not in TASKS:
        raise ValueError(f"unknown CoDI task {task!r}; known: {', '.join(TASKS)}")
    return task


def detect_task(row: dict[str, Any]) -> str:
    """Task from a row's field layout alone (used when the file name does not say)."""
    if "context_id" in row:
        return "detoxic"
    if "label1" in row or "label2" in row:
        return "multi"
    if "mode" in row:
        return "length"
    label = row.get("label")
    if "anti_label" in row or isinstance(label, list):
        return "keyword"
    if isinstance(label, str):
        from scoring.codi.classifiers import EMOTION_LABELS, SENTIMENT_LABELS

        return "sentiment" if label in SENTIMENT_LABELS or label in EMOTION_LABELS else "topic"
    raise ValueError(f"cannot tell the CoDI task from fields {sorted(row)}")


def _need(row: dict[str, Any], key: str, kind: type | tuple, where: str) -> Any:
    if key not in row:
        raise ConvertError(f"{where}: missing field '{key}'")
    value = row[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConvertError(f"{where}: field '{key}' has type {type(value).__name__}")
    return value


def _need_label(row: dict[str, Any], key: str, where: str) -> str:
    """A class label: a string, not empty (the metric reads an empty one as none)."""
    value = _need(row, key, str, where)
    if not value:
        raise ConvertError(f"{where}: field '{key}' is empty")
    return value


def constraint_from_instruction(row: dict[str, Any], task: str, where: str = "row") -> dict[str, Any]:
    """The constraint dict of one instruction-set row (see module docstring); a row whose
    constraint the `codi` metric would refuse (`scoring.codi.metric.parse_constraint`: an empty
    label, a negative length bound, a keyword item with no word) is refused here already."""
    task = canonical_task(task)
    if task in ("sentiment", "topic"):
        return {"task": task, "label": _need_label(row, "label", where)}
    if task == "multi":
        return {"task": task, "label1": _need_label(row, "label1", where), "label2": _need_label(row, "label2", where)}
    if task == "length":
        label = _need(row, "label", list, where)
        if len(label) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                      for v in label) or label[0] > label[1]:
            raise ConvertError(f"{where}: field 'label' must be [lo, hi], finite numbers with lo <= hi, got {label!r}")
        if label[0] < 0:
            raise ConvertError(f"{where}: field 'label' {label!r} has a negative lower bound")
        return {"task": task, "mode": _need(row, "mode", str, where), "label": list(label)}
    if task == "keyword":
        label = _need(row, "label", list, where)
        if not label or not all(isinstance(v, str) and keyword_alternatives(v) for v in label):
            raise ConvertError(f"{where}: field 'label' must be a non-empty list of keywords (an item holds a word)")
        constraint: dict[str, Any] = {"task": task, "level": "easy", "label": list(label)}
        if "anti_label" in row:
            constraint["level"] = "hard"
            constraint["anti_label"] = _need(row, "anti_label", str, where)
        return constraint
    return {
        "task": task,
        "context_id": _need(row, "context_id", int, where),
        "context": _need(row, "context", str, where),
    }


def _attribute(constraint: dict[str, Any]) -> str | None:
    task = constraint["task"]
    if task in ("sentiment", "topic"):
        return constraint["label"]
    if task == "multi":
        return f"{constraint['label1']}|{constraint['label2']}"
    if task == "length":
        return constraint["mode"]
    if task == "keyword":
        return constraint["level"]
    return None


def row_id(task: str, index: int, system: str | None) -> str:
    base = f"{task}-{index:05d}"
    return f"{system}/{base}" if system else base


def doc_id(constraint: dict[str, Any], task: str, index: int) -> str:
    """Rows sharing one input: the instruction, or for detoxic the context (CoDI rule)."""
    if task == "detoxic":
        return f"detoxic-context-{constraint['context_id']}"
    return f"{task}-{index:05d}"


def canonical_row(
    task: str, index: int, instruction: dict[str, Any], text: str | None, system: str | None, where: str
) -> dict[str, Any]:
    constraint = constraint_from_instruction(instruction, task, where)
    return {
        "id": row_id(task, index, system),
        "dataset": DATASET,
        "doc_id": doc_id(constraint, task, index),
        "system": system,
        "source": _need(instruction, "instruction", str, where),
        "attribute": _attribute(constraint),
        "constraint": json.dumps(constraint, ensure_ascii=False),
        "text": text,
    }


def instruction_row(row: dict[str, Any]) -> dict[str, Any]:
    """Invert `canonical_row`: the original instruction-set row."""
    constraint = json.loads(row["constraint"])
    task = constraint["task"]
    out: dict[str, Any] = {"instruction": row["source"]}
    if task in ("sentiment", "topic"):
        out["label"] = constraint["label"]
    elif task == "multi":
        out["label1"], out["label2"] = constraint["label1"], constraint["label2"]
    elif task == "length":
        out["mode"], out["label"] = constraint["mode"], constraint["label"]
    elif task == "keyword":
        out["label"] = constraint["label"]
        if "anti_label" in constraint:
            out["anti_label"] = constraint["anti_label"]
    else:
        out["context_id"], out["context"] = constraint["context_id"], constraint["context"]
    return out


# ----- files -------------------------------------------------------------------------------
def read_jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, one per non-blank line (a BOM at a line's start
    allowed). A file that is not UTF-8, or a line that is no JSON object, names a key twice
    (one value would vanish), holds a number past 4,300 digits, nests past the reader or holds
    a lone surrogate escape (`"\\ud800"`, which no Parquet string can hold) fails the
    conversion naming the file and line: an instruction set is used whole or not at all."""
    refuse_device(path, error=ConvertError)
    text = decode_utf8(pathlib.Path(path).read_bytes(), path, ConvertError)
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removeprefix("\ufeff")
        if not line.strip():
            continue
        try:
            value = json.loads(line, object_pairs_hook=unique_keys)
        except DuplicateKey as exc:
            raise ConvertError(f"{path} line {number}: the key {exc.args[0]!r} is given twice in one object") from None
        except json.JSONDecodeError as exc:
            raise ConvertError(f"{path} line {number}: not JSON ({exc})") from None
        except (ValueError, RecursionError) as exc:  # a number past 4,300 digits; nesting past the reader
            reason = "nested too deep" if isinstance(exc, RecursionError) else "a number too long to read"
            raise ConvertError(f"{path} line {number}: not readable JSON ({reason})") from None
        if not isinstance(value, dict):
            raise ConvertError(f"{path} line {number}: expected a JSON object")
        found = _lone_surrogate_in(value)
        if found is not None:
            raise ConvertError(f"{path} line {number}: not valid UTF-8 text ({found})")
        rows.append(value)
    return rows


def _lone_surrogate_in(value: Any) -> str | None:
    """Where a string of the JSON value `value` (keys included) holds a lone surrogate
    (`scoring.cell_types.lone_surrogate`), or None; walked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = lone_surrogate(item)
            if found is not None:
                return found
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def instruction_file(directory: pathlib.Path, task: str) -> pathlib.Path:
    for name in (f"{task}_lite.jsonl", f"{task}.jsonl"):
        if (directory / name).is_file():
            return directory / name
    raise ConvertError(f"no instruction set for task '{task}' in {directory} ({task}_lite.jsonl or {task}.jsonl)")


def response_file(directory: pathlib.Path, task: str) -> pathlib.Path | None:
    for candidate in (directory / f"{task}.jsonl", directory / task / "generation.jsonl"):
        if candidate.is_file():
            return candidate
    return None


def align_responses(
    instructions: Sequence[dict[str, Any]], responses: Sequence[dict[str, Any]], path: Any
) -> list[str | None]:
    """Response text per instruction row: by `index` when given, else by position; every
    response that carries `instruction` must match its instruction-set row."""
    texts: list[str | None] = [None] * len(instructions)
    for number, response in enumerate(responses):
        where = f"{path} row {number}"
        index = response.get("index", number)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(instructions):
            raise ConvertError(f"{where}: index {index!r} outside the instruction set (0..{len(instructions) - 1})")
        if "text" not in response or not isinstance(response["text"], str):
            raise ConvertError(f"{where}: missing or non-string field 'text'")
        expected = instructions[index].get("instruction")
        if "instruction" in response and response["instruction"] != expected:
            raise ConvertError(f"{where}: field 'instruction' does not match instruction-set row {index}")
        if texts[index] is not None:
            raise ConvertError(f"{where}: a second response for instruction-set row {index}")
        texts[index] = response["text"]
    return texts


def convert_task(
    task: str,
    instructions: Sequence[dict[str, Any]],
    texts: Sequence[str | None] | None = None,
    system: str | None = None,
    source: Any = "instructions",
) -> list[dict[str, Any]]:
    task = canonical_task(task)
    if texts is not None and len(texts) != len(instructions):
        raise ConvertError(f"{source}: {len(texts)} responses for {len(instructions)} instructions")
    return [
        canonical_row(task, i, row, None if texts is None else texts[i], system, f"{source} row {i}")
        for i, row in enumerate(instructions)
    ]


def convert_dir(
    instructions_dir: str | pathlib.Path,
    responses_dir: str | pathlib.Path | None = None,
    system: str | None = None,
    tasks: Iterable[str] = TASKS,
    require_all: bool = True,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Canonical rows for every task; with `responses_dir`, each row gets its response text.
    Missing responses for a task are an error unless `require_all` is False (rows then
    keep text None). `limit` keeps the first N instructions of each task."""
    instructions_dir = pathlib.Path(instructions_dir)
    rows: list[dict[str, Any]] = []
    for task in tasks:
        task = canonical_task(task)
        path = instruction_file(instructions_dir, task)
        instructions = read_jsonl(path)
        if limit is not None:
            instructions = instructions[:limit]
        texts = None
        if responses_dir is not None:
            rpath = response_file(pathlib.Path(responses_dir), task)
            if rpath is None:
                if require_all:
                    raise ConvertError(f"no responses for task '{task}' in {responses_dir}")
            else:
                responses = read_jsonl(rpath)
                if limit is not None:
                    responses = [r for n, r in enumerate(responses) if isinstance(r.get("index", n), int) and r.get("index", n) < limit]
                texts = align_responses(instructions, responses, rpath)
                if require_all and any(t is None for t in texts):
                    missing = sum(t is None for t in texts)
                    raise ConvertError(f"{rpath}: {missing} instructions have no response")
        rows.extend(convert_task(task, instructions, texts, system, path))
    return rows


PARQUET_COLUMNS = ("id", "dataset", "doc_id", "system", "source", "attribute", "constraint", "text")


def write_parquet(rows: Sequence[dict[str, Any]], path: str | pathlib.Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.string()) for name in PARQUET_COLUMNS])
    table = pa.Table.from_pylist([{k: row.get(k) for k in PARQUET_COLUMNS} for row in rows], schema=schema)
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)

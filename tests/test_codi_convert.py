"""CoDI-Eval converter: every shipped instruction round-trips through a canonical row."""

from __future__ import annotations

import json
import re
from collections import Counter

import pyarrow.parquet as pq
import pytest

from scoring.codi import TASKS, convert

# rows per task, from ../shared/data/codi-eval/SOURCE.md
EXPECTED = {"sentiment": 1000, "topic": 1000, "multi": 1000, "length": 1000, "keyword": 1000, "detoxic": 4060}


@pytest.fixture(scope="module")
def instructions(shared_data):
    return shared_data / "codi-eval" / "instructions"


def test_round_trip_every_shipped_instruction(instructions, tmp_path):
    rows = convert.convert_dir(instructions)
    assert Counter(json.loads(r["constraint"])["task"] for r in rows) == EXPECTED
    # through Parquet and back
    path = tmp_path / "rows.parquet"
    convert.write_parquet(rows, path)
    back = pq.read_table(path).to_pylist()
    assert len(back) == sum(EXPECTED.values())
    i = 0
    for task in TASKS:
        lines = (instructions / f"{task}_lite.jsonl").read_text().splitlines()
        for line in lines:
            original = json.loads(line)
            rebuilt = convert.instruction_row(back[i])
            # same keys, same values, same JSON types (e.g. 32.0 stays a float)
            assert json.dumps(rebuilt, sort_keys=True) == json.dumps(original, sort_keys=True), (task, i)
            assert convert.detect_task(original) == task
            i += 1
    assert len({r["id"] for r in back}) == len(back)


def test_keyword_levels_and_detoxic_contexts(instructions):
    rows = convert.convert_dir(instructions, tasks=["keyword", "detoxic"])
    keyword = [json.loads(r["constraint"]) for r in rows if r["id"].startswith("keyword")]
    assert [c["level"] for c in keyword] == ["easy"] * 500 + ["hard"] * 500
    assert all("anti_label" in c for c in keyword[500:])
    detox = [r for r in rows if r["id"].startswith("detoxic")]
    groups = Counter(r["doc_id"] for r in detox)
    assert len(groups) == 203 and set(groups.values()) == {20}
    for i, row in enumerate(detox):
        assert json.loads(row["constraint"])["context_id"] == i // 20


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_responses_aligned_and_checked(tmp_path):
    inst = tmp_path / "inst"
    _write(inst / "sentiment_lite.jsonl", [{"instruction": "Write joy.", "label": "joy"}, {"instruction": "Write fear.", "label": "fear"}])
    # original generate.py layout: <dir>/<task>/generation.jsonl with the instruction fields + text
    _write(tmp_path / "a" / "sentiment" / "generation.jsonl",
           [{"instruction": "Write joy.", "label": "joy", "text": "yay"}, {"instruction": "Write fear.", "label": "fear", "text": "eek"}])  # fmt: skip
    rows = convert.convert_dir(inst, tmp_path / "a", "sysA", tasks=["sentiment"])
    assert [(r["id"], r["text"], r["system"]) for r in rows] == [("sysA/sentiment-00000", "yay", "sysA"), ("sysA/sentiment-00001", "eek", "sysA")]
    # by index, out of order
    _write(tmp_path / "b" / "sentiment.jsonl", [{"index": 1, "text": "eek"}, {"index": 0, "text": "yay"}])
    rows = convert.convert_dir(inst, tmp_path / "b", "sysB", tasks=["sentiment"])
    assert [r["text"] for r in rows] == ["yay", "eek"]
    # a mismatching instruction names the file and the row
    _write(tmp_path / "c" / "sentiment.jsonl", [{"instruction": "Write joy.", "text": "x"}, {"instruction": "Other", "text": "y"}])
    with pytest.raises(convert.ConvertError, match=r"c/sentiment.jsonl row 1: field 'instruction'"):
        convert.convert_dir(inst, tmp_path / "c", "sysC", tasks=["sentiment"])
    # a missing response
    _write(tmp_path / "d" / "sentiment.jsonl", [{"text": "x"}])
    with pytest.raises(convert.ConvertError, match="1 instructions have no response"):
        convert.convert_dir(inst, tmp_path / "d", "sysD", tasks=["sentiment"])


def test_bad_instruction_rows_name_file_row_field(tmp_path):
    inst = tmp_path / "inst"
    _write(inst / "length_lite.jsonl", [{"instruction": "x", "mode": "around", "label": [1, 2]}, {"instruction": "y", "mode": "around"}])
    with pytest.raises(convert.ConvertError, match=r"length_lite.jsonl row 1: missing field 'label'"):
        convert.convert_dir(inst, tasks=["length"])
    _write(inst / "keyword_lite.jsonl", [{"instruction": "x", "label": "ball"}])
    with pytest.raises(convert.ConvertError, match=r"keyword_lite.jsonl row 0: field 'label' has type str"):
        convert.convert_dir(inst, tasks=["keyword"])
    (inst / "topic_lite.jsonl").write_text('{"instruction": "x", "label": "music"}\nnot json\n')
    with pytest.raises(convert.ConvertError, match=r"topic_lite.jsonl line 2: not JSON"):
        convert.convert_dir(inst, tasks=["topic"])


def test_lone_surrogate_escape_is_one_line_naming_file_and_line(tmp_path, cli):
    # found by fuzzing: a JSON escape "\\ud800" decodes to a lone surrogate, which the Parquet
    # writer could not encode: `constraints convert` ended in "internal error: UnicodeEncodeError"
    inst = tmp_path / "inst"
    inst.mkdir()
    (inst / "sentiment_lite.jsonl").write_text(
        '{"instruction": "Write joy.", "label": "joy"}\n{"instruction": "Write \\ud800.", "label": "joy"}\n')
    proc = cli(["constraints", "convert", "--instructions", str(inst), "--codi-tasks", "sentiment",
                "-o", str(tmp_path / "out.parquet")])
    assert proc.returncode == 1, proc.stderr
    assert "internal error" not in proc.stderr
    assert "sentiment_lite.jsonl line 2: not valid UTF-8 text (a lone surrogate \\ud800 at character 6)" in proc.stderr
    assert not (tmp_path / "out.parquet").exists()
    # a response's text, and a key, are checked the same way
    (inst / "sentiment_lite.jsonl").write_text('{"instruction": "Write joy.", "label": "joy"}\n')
    _write(tmp_path / "r" / "sentiment.jsonl", [{"text": "yay \udc80"}])
    with pytest.raises(convert.ConvertError, match=r"r/sentiment.jsonl line 1: not valid UTF-8 text \(a lone surrogate \\udc80"):
        convert.convert_dir(inst, tmp_path / "r", "s", tasks=["sentiment"])
    _write(tmp_path / "k" / "sentiment.jsonl", [{"text": "yay", "x\udbff": 1}])
    with pytest.raises(convert.ConvertError, match=r"k/sentiment.jsonl line 1: not valid UTF-8 text"):
        convert.convert_dir(inst, tmp_path / "k", "s", tasks=["sentiment"])


@pytest.mark.parametrize(("task", "row", "refusal"), [
    ("sentiment", {"label": ""}, "field 'label' is empty"),
    ("topic", {"label": ""}, "field 'label' is empty"),
    ("multi", {"label1": "", "label2": "joy"}, "field 'label1' is empty"),
    ("length", {"mode": "around", "label": [-1, 5]}, "field 'label' [-1, 5] has a negative lower bound"),
    ("keyword", {"label": ["ball", " or "]}, "field 'label' must be a non-empty list of keywords"),
])
def test_instruction_the_metric_would_refuse_is_refused_by_convert(tmp_path, task, row, refusal):
    # found by fuzzing: convert wrote these constraints, and the codi metric then refused every
    # such row ("constraint of task 'sentiment' lacks 'label'"); a set is used whole or not at all
    from scoring.codi.metric import parse_constraint

    _write(tmp_path / f"{task}_lite.jsonl", [{"instruction": "Write.", **row}])
    with pytest.raises(convert.ConvertError, match=rf"{task}_lite.jsonl row 0: {re.escape(refusal)}"):
        convert.convert_dir(tmp_path, tasks=[task])
    with pytest.raises(ValueError):  # the metric's own rule, which convert now applies too
        parse_constraint({"task": task, **row})


def test_limit_trims_instructions_and_responses(tmp_path):
    inst = tmp_path / "inst"
    _write(inst / "topic_lite.jsonl", [{"instruction": f"Write {t}.", "label": t} for t in ("music", "gaming", "family")])
    _write(tmp_path / "r" / "topic.jsonl", [{"text": "a"}, {"text": "b"}, {"text": "c"}])
    rows = convert.convert_dir(inst, tmp_path / "r", "s", tasks=["topic"], limit=2)
    assert [(r["text"], json.loads(r["constraint"])["label"]) for r in rows] == [("a", "music"), ("b", "gaming")]

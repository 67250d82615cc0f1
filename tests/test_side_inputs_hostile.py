"""Hostile files beside the dumps: job configs and `--params` files, `convert` inputs, and the
files a later run reads back. Each test is an attack that once misbehaved (a traceback, a
blow-up, rows lost or a value changed without a word); the refusal must be one line naming the
file and, where there is one, the line or field (docs/security.md)."""

from __future__ import annotations

import json
import pathlib
import re

import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli_in_process
from ray_jobs.config import ConfigError, load_config
from scoring.errors import UsageError

BASE = "input: in\noutput: out\nmetrics: [{name: bleu}]\n"


def alias_bomb(levels: int = 6, width: int = 10) -> str:
    """A YAML flow value of a few hundred bytes that expands to width**levels strings."""
    value = "&a0 [" + ", ".join(["lol"] * width) + "]"
    for level in range(1, levels + 1):
        value = f"&a{level} [{value}, " + ", ".join([f"*a{level - 1}"] * (width - 1)) + "]"
    return value


def _config(tmp_path, text: str):
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# ----- job configs ------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["batch_size: {bomb}\n", "pool: {bomb}\n", "zzz: {bomb}\n"])
def test_config_alias_bomb_is_refused_before_anything_walks_it(tmp_path, where):
    # a million strings from 300 bytes: the old loader built the value, then validation printed
    # its repr (10**9 with a few more lines: gigabytes and minutes)
    path = _config(tmp_path, BASE + where.format(bomb=alias_bomb()))
    with pytest.raises(ConfigError, match=r"job\.yaml, line 4: its aliases expand to more than 100,000 values"):
        load_config(path)


def test_config_alias_bomb_in_metric_params(tmp_path):
    path = _config(tmp_path, f"input: in\noutput: out\nmetrics:\n  - name: bleu\n    params: {{tokenize: {alias_bomb()}}}\n")
    with pytest.raises(ConfigError, match=r"line 5: its aliases expand"):
        load_config(path)


def test_config_small_aliases_still_work(tmp_path):
    # sharing a parameter block between two metrics is what anchors are for
    text = ("input: in\noutput: out\nmetrics:\n  - name: bleu\n    params: &p {lowercase: true}\n"
            "  - name: bleu\n    label: bleu2\n    params: *p\n")
    config = load_config(_config(tmp_path, text))
    assert [m.params for m in config.metrics] == [{"lowercase": True}, {"lowercase": True}]


@pytest.mark.parametrize("text", [
    "input: in\noutput: out\nmetrics: &m [{name: bleu}, *m]\n",
    "input: in\noutput: out\nmetrics: [{name: bleu, params: &p {x: *p}}]\n",
])
def test_config_alias_cycle_is_refused(tmp_path, text):
    with pytest.raises(ConfigError, match=r"line 3: an alias refers to a value that contains it"):
        load_config(_config(tmp_path, text))


@pytest.mark.parametrize(("text", "key", "lines"), [
    (BASE + "batch_size: 4\nbatch_size: 8\n", "batch_size", "lines 4 and 5"),
    (BASE + "metrics: [{name: chrf}]\n", "metrics", "lines 3 and 4"),  # the first list would never run
    ("input: in\noutput: out\nmetrics:\n  - name: bleu\n    params: {lowercase: true, lowercase: false}\n", "lowercase",
     "lines 5 and 5"),
])
def test_config_key_given_twice_is_refused(tmp_path, text, key, lines):
    with pytest.raises(ConfigError, match=rf"key '{key}' is given twice \({lines}\)"):
        load_config(_config(tmp_path, text))


def test_config_merge_key_may_still_be_overridden(tmp_path):
    text = BASE + "pool:\n  <<: {num_cpus: 0.25, max_size: 1}\n  max_size: 3\n"
    config = load_config(_config(tmp_path, text))
    assert (config.pool.num_cpus, config.pool.max_size) == (0.25, 3)


def test_config_deep_nesting_is_one_line(tmp_path):
    deep = "[" * 70 + "]" * 70
    with pytest.raises(ConfigError, match=r"line 3: nested deeper than 64 levels"):
        load_config(_config(tmp_path, f"input: in\noutput: out\nmetrics: [{{name: bleu, params: {{x: {deep}}}}}]\n"))


def test_config_integer_past_python_limit_is_one_line(tmp_path):
    # int() refuses more than 4,300 digits with a bare ValueError: it was an internal error
    with pytest.raises(ConfigError, match=r"job\.yaml: a value cannot be read \(Exceeds the limit"):
        load_config(_config(tmp_path, BASE + "batch_size: " + "9" * 5000 + "\n"))


@pytest.mark.parametrize(("field", "value"), [
    ("pool: {num_cpus: .inf}", "pool.num_cpus"), ("limits: {max_inflation: .inf}", "limits.max_inflation"),
    ("pool: {unit_timeout_s: .inf}", "pool.unit_timeout_s"), ("max_error_rate: .nan", "max_error_rate"),
])
def test_config_non_finite_numbers_are_refused(tmp_path, field, value):
    # `.inf` CPUs reached Ray; an infinite `max_inflation` switched the cap off without a word
    with pytest.raises(ConfigError, match=rf"'{value}': Input should be a finite number"):
        load_config(_config(tmp_path, BASE + field + "\n"))


def test_config_python_tags_stay_refused_with_their_line(tmp_path):
    with pytest.raises(ConfigError, match=r"line 4: not valid YAML: could not determine a constructor"):
        load_config(_config(tmp_path, BASE + "x: !!python/object/apply:os.system ['echo PWNED']\n"))


@pytest.mark.parametrize(("value", "refusal"), [
    ("!!int ''", "'' is no valid !!int value"),  # was IndexError: string index out of range
    ("!!float _", "'_' is no valid !!float value"),  # IndexError too
    ("!!bool x", "'x' is no valid !!bool value"),  # was KeyError: 'x'
    ("[!!timestamp 1]", "'1' is no valid !!timestamp value"),  # was AttributeError on None.groupdict
])
def test_config_tagged_scalar_its_tag_cannot_read_is_one_line(tmp_path, value, refusal):
    # found by fuzzing scoring.config_yaml.load: PyYAML's constructors raised bare exceptions
    with pytest.raises(ConfigError, match=rf"job\.yaml, line 4: {re.escape(refusal)}"):
        load_config(_config(tmp_path, BASE + f"batch_size: {value}\n"))


def test_set_override_with_a_byte_that_is_not_utf8_is_one_line(tmp_path):
    # argv decodes a byte that is not UTF-8 to a lone surrogate (`--set x=$'\xff'`); libyaml
    # raised a bare UnicodeEncodeError on it (found by fuzzing scoring.config_yaml.load)
    from scoring import config_yaml

    with pytest.raises(config_yaml.YamlSyntaxError, match=r"--set x, line 2: not valid YAML: it holds a byte that is not UTF-8"):
        config_yaml.load("a: 1\nb: caf\udce9\n", "--set x")


def test_set_override_alias_bomb_is_refused(tmp_path):
    path = _config(tmp_path, BASE)
    with pytest.raises(ConfigError, match=r"--set batch_size, line 1: its aliases expand"):
        load_config(path, overrides={"batch_size": alias_bomb()})


def test_params_file_key_twice_and_bomb(tmp_path, cli):
    dump = tmp_path / "in.parquet"
    dump.write_bytes(b"")
    twice = tmp_path / "p.yaml"
    twice.write_text("lowercase: true\nlowercase: false\n", encoding="utf-8")
    proc = cli(["score", "-m", "bleu", "-i", str(dump), "-o", str(tmp_path / "o.parquet"), "--params", f"@{twice}"])
    assert_user_error(proc, 2, "p.yaml, line 2: key 'lowercase' is given twice")
    bomb = tmp_path / "b.json"
    bomb.write_text(f"{{tokenize: {alias_bomb()}}}", encoding="utf-8")
    proc = cli(["score", "-m", "bleu", "-i", str(dump), "-o", str(tmp_path / "o.parquet"), "--params", f"@{bomb}"])
    assert_user_error(proc, 2, "b.json, line 1: its aliases expand")


def test_param_value_keeps_plain_text_but_refuses_a_bomb():
    from ctgscore.cli.common import _yaml_value

    assert _yaml_value("[s_h, f") == "[s_h, f"  # no YAML: the text itself, as before
    with pytest.raises(UsageError, match="--param x, line 1: its aliases expand"):
        _yaml_value(alias_bomb(), "--param x")


def test_yaml_loader_is_libyaml_when_installed():
    # the pure-Python reader took 18 s for a 20 MB label; libyaml reads it in well under a second
    import yaml

    from scoring import config_yaml

    assert issubclass(config_yaml._Loader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))


# ----- convert inputs ---------------------------------------------------------------------
def _convert(tmp_path, name: str, data: bytes, *extra: str):
    src = tmp_path / name
    src.write_bytes(data)
    out = tmp_path / "out.parquet"
    proc = run_cli_in_process(["convert", "-i", str(src), "-o", str(out), "--json", *extra])
    return proc, (pq.read_table(out).to_pylist() if proc.returncode == 0 else None)


def test_csv_cell_over_python_field_limit_is_read(tmp_path):
    # the csv module's default cap (131,072 characters) was an internal error
    import csv

    big = "x" * 200_000
    before = csv.field_size_limit()
    assert before < 200_000  # the module's cap, as every other reader in the process has it
    proc, rows = _convert(tmp_path, "d.csv", f'id,text\n1,"{big}"\n2,{big}\n3,b\n'.encode())
    assert proc.returncode == 0, proc.stderr
    assert [len(r["text"]) for r in rows] == [200_000, 200_000, 1]
    assert csv.field_size_limit() == before  # the cap is restored for everyone else


def test_csv_unterminated_quote_fails_naming_its_line(tmp_path):
    # the old reader made lines 3-6 one cell of row 3: one row read, three lost without a word
    proc, _ = _convert(tmp_path, "d.csv", b'id,text\n1,a\n2,"abc\n3,b\n4,c\n5,d\n')
    assert_user_error(proc, 1, "d.csv: the quote opened in the row starting on line 3 is never closed", "lines 3-6")


def test_csv_stray_quote_drops_its_row_with_the_reason(tmp_path):
    # `"ab"c` was read as `abc`; now the row is dropped, counted, and the next rows are read
    proc, rows = _convert(tmp_path, "d.csv", b'id,text\n1,"ab"c\n2,b\n3,c\n')
    assert proc.returncode == 0, proc.stderr
    assert [r["id"] for r in rows] == ["2", "3"]
    report = json.loads(proc.stdout)
    assert report["rows_read"] == 3 and report["rows_written"] == 2
    assert list(report["dropped"]) == ["row is not valid CSV (',' expected after '\"')"]


@pytest.mark.parametrize(("line", "reason"), [
    ('{"id": ' + "9" * 5000 + ', "text": "a"}', "line holds a number too long to read"),
    ('{"id": "1", "text": "a", "constraint": ' + "[" * 5000 + "]" * 5000 + "}", "line nests arrays or objects too deep"),
])
def test_jsonl_number_or_nesting_past_the_reader_is_a_dropped_line(tmp_path, line, reason):
    proc, rows = _convert(tmp_path, "d.jsonl", (line + '\n{"id": "2", "text": "b"}\n').encode())
    assert proc.returncode == 0, proc.stderr
    assert [r["id"] for r in rows] == ["2"]
    assert any(key.startswith(reason) for key in json.loads(proc.stdout)["dropped"])


def test_jsonl_deep_json_text_in_a_list_column_stays_text(tmp_path):
    deep = "[" * 5000 + "]" * 5000
    proc, rows = _convert(tmp_path, "d.jsonl", json.dumps({"id": "1", "text": "a", "references": deep}).encode() + b"\n")
    assert proc.returncode == 0, proc.stderr
    assert rows[0]["references"] == [deep]


def test_jsonl_bom_at_the_start_of_a_joined_file_is_no_lost_row(tmp_path):
    # `cat a.jsonl b.jsonl` of two files saved with a BOM: line 2 started with U+FEFF and was dropped
    proc, rows = _convert(tmp_path, "d.jsonl", '\ufeff{"id": "1", "text": "a"}\n\ufeff{"id": "2", "text": "b"}\n'.encode())
    assert proc.returncode == 0, proc.stderr
    assert [r["id"] for r in rows] == ["1", "2"]


@pytest.mark.parametrize(("name", "data"), [
    ("d.jsonl", b'{"id": "1", "text": "a", "human_x": NaN}\n{"id": "2", "text": "b", "human_x": Infinity}\n'
                b'{"id": "3", "text": "c", "human_x": 1e999}\n{"id": "4", "text": "d", "human_x": ' + b"9" * 400 + b"}\n"
                b'{"id": "5", "text": "e", "human_x": 4}\n'),
    ("d.csv", b"id,text,human_x\n1,a,nan\n2,b,inf\n3,c,1_000\n4,d,-Infinity\n5,e,4\n"),
])
def test_non_finite_or_odd_ratings_become_null_with_a_warning(tmp_path, name, data):
    # a NaN or infinite rating entered every mean and correlation; a 400-digit one was an internal error
    proc, rows = _convert(tmp_path, name, data)
    assert proc.returncode == 0, proc.stderr
    assert [r["human_x"] for r in rows] == [None, None, None, None, 4.0]
    assert sum(json.loads(proc.stdout)["warnings"].values()) == 4


@pytest.mark.parametrize("kind", ["csv", "aligned"])
def test_invalid_utf8_names_its_line(tmp_path, kind):
    bad = b"id,text\n1,a\n2,\xffb\n" if kind == "csv" else b"a\nb\n\xffc\n"
    src = tmp_path / ("d.csv" if kind == "csv" else "c.txt")
    src.write_bytes(bad)
    args = ["-i", str(src)] if kind == "csv" else ["-c", str(src)]
    proc = run_cli_in_process(["convert", *args, "-o", str(tmp_path / "o.parquet")])
    assert_user_error(proc, 1, f"{src.name}: not UTF-8 text (line 3, byte")


# ----- files a later run reads back --------------------------------------------------------
@pytest.fixture
def scores_file(tmp_path):
    import pyarrow as pa

    rows = [{"id": f"{s}{d}", "system": s, "doc_id": f"d{d}", "dataset": "toy", "m": float((d * (i + 2)) % 7),
             "error": None} for i, s in enumerate("ABC") for d in range(6)]
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _compare_with_previous(tmp_path, scores_file, previous: str):
    old = tmp_path / "old.json"
    old.write_text(previous, encoding="utf-8")
    return run_cli_in_process(["compare", "-s", str(scores_file), "--columns", "m", "-o", str(tmp_path / "board.html"),
                               "--previous", str(old), "--resamples", "20", "--trials", "20"])


def _row(**change):
    return {"dataset": "toy", "column": "m", "system": "A", "rank": 1, **change}


@pytest.mark.parametrize(("rows", "fragment"), [
    ([_row(rank="abc")], "leaderboard[0].rank: expected a whole number from 1 to 1,000,000,000, got str 'abc'"),
    ([_row(rank=1.5)], "leaderboard[0].rank: expected a whole number"),  # was read as 1 without a word
    ([_row(rank=10**400)], "leaderboard[0].rank: expected a whole number"),
    ([_row(rank=True)], "leaderboard[0].rank: expected a whole number"),
    ([{"dataset": "toy", "column": "m", "rank": 1}], "leaderboard[0].system: expected a string, got NoneType None"),
    ([_row(system=["A"])], "leaderboard[0].system: expected a string, got list of 1"),
    (["A"], "leaderboard[0]: expected an object, got str"),
    ([_row(rank=1), _row(rank=3)], "leaderboard[1]: system 'A' of 'toy' / 'm' is ranked twice (also leaderboard[0])"),
])
def test_previous_leaderboard_of_other_types_is_refused_naming_row_and_field(tmp_path, scores_file, rows, fragment):
    # each was an internal error (ValueError, KeyError, TypeError, AttributeError) or a silent move
    proc = _compare_with_previous(tmp_path, scores_file, json.dumps({"leaderboard": rows}))
    assert_user_error(proc, 2, "--previous", "old.json", fragment)


@pytest.mark.parametrize("text", ['{"leaderboard": [{"dataset": "toy", "column": "m", "system": "A", "rank": NaN}]}',
                                  '{"leaderboard": ' + "[" * 50_000 + "]" * 50_000 + "}"])
def test_previous_leaderboard_nan_rank_or_deep_nesting(tmp_path, scores_file, text):
    assert_user_error(_compare_with_previous(tmp_path, scores_file, text), 2, "--previous", "old.json")


def test_previous_results_json_rows_are_checked_too(tmp_path, scores_file):
    results = {"groups": [{"systems": [{"dataset": "toy", "column": "m", "systems": [{"system": "A", "rank": "x"}]}]}]}
    proc = _compare_with_previous(tmp_path, scores_file, json.dumps(results))
    assert_user_error(proc, 2, "system comparisons[0].rank: expected a whole number")


def test_previous_leaderboard_digit_rank_still_moves(tmp_path, scores_file):
    proc = _compare_with_previous(tmp_path, scores_file, json.dumps({"leaderboard": [_row(rank="3")]}))
    assert proc.returncode == 0, proc.stderr
    assert "▲" in (tmp_path / "board.html").read_text()  # A moved up from the previous rank 3


# a previous run's manifest, edited: set aside whole (footers read), never a bare exception in the plan
def _manifest(size=100, record=None):
    part = {"rows": 20, "errors": 0, "skipped": 0, "size": 10, "etag": "e"}
    record = record if record is not None else {"digest": "d", "input_etag": "x", "input_size": size,
                                                "parts": {"part-0000000000-0000000020-v.parquet": part}}
    return {"metrics": {"m": {"parts": {"a.parquet": record}}},
            "input": {"files": [{"file": "/in/a.parquet", "etag": "x", "size": size, "rows": 20, "columns": {"id": "string"}}]}}


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda m: m["input"]["files"][0].update(size="abc"), "'input.files[0]': 'size' and 'rows' must be whole numbers"),
    (lambda m: m["input"]["files"].__setitem__(0, "x"), "'input.files[0]' is not an object"),
    (lambda m: m["input"]["files"][0].update(columns=["id"]), "'input.files[0].columns' is not an object"),
    (lambda m: m["metrics"]["m"]["parts"].__setitem__("a.parquet", [1]), "'metrics.m.parts.a.parquet' is not an object"),
    (lambda m: m["metrics"]["m"]["parts"]["a.parquet"].update(input_size="x"), "'metrics.m.parts.a.parquet': 'digest'"),
    (lambda m: [e.update(skipped="x") for e in m["metrics"]["m"]["parts"]["a.parquet"]["parts"].values()],
     "'rows', 'errors' and 'skipped' must be whole numbers"),
    (lambda m: m.__setitem__("duplicate_ids_across_shards", [1]), "'duplicate_ids_across_shards' is not an object"),
])
def test_edited_previous_manifest_is_set_aside(tmp_path, edit, problem):
    import fsspec

    from ray_jobs.config import parse_config
    from ray_jobs.job.manifest import previous_manifest
    from ray_jobs.job.vouch import known_inputs

    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "metrics": [{"name": "text_stats"}]})
    fs = fsspec.filesystem("file")
    (tmp_path / "out").mkdir()
    good = _manifest()
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(good))
    assert previous_manifest(fs, config) == (good, None) and known_inputs(good)  # as a run wrote it: used
    edited = _manifest()
    edit(edited)
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(edited))
    found, why = previous_manifest(fs, config)
    assert found is None and problem in why  # the plan read it and failed (ValueError, TypeError, KeyError)


# CoDI instruction sets and responses: used whole or refused naming the file and line
def _codi(tmp_path, instructions: bytes, responses: bytes | None = None):
    folder = tmp_path / "instructions"
    folder.mkdir()
    (folder / "length_lite.jsonl").write_bytes(instructions)
    args = ["constraints", "convert", "--instructions", str(folder), "--codi-tasks", "length", "-o", str(tmp_path / "o.parquet")]
    if responses is not None:
        (tmp_path / "r").mkdir()
        (tmp_path / "r" / "length.jsonl").write_bytes(responses)
        args += ["--responses", f"sysA={tmp_path / 'r'}"]
    return run_cli_in_process(args)


GOOD_LENGTH = b'{"instruction": "Write 10 words", "mode": "around", "label": [8, 12]}\n'


@pytest.mark.parametrize(("instructions", "fragment"), [
    (b'{"instruction": "a", "mode": "around", "label": [NaN, Infinity]}\n', "finite numbers with lo <= hi, got [nan, inf]"),
    (b'{"instruction": "a", "mode": "around", "label": [12, 8]}\n', "lo <= hi, got [12, 8]"),  # no text could pass
    (b'{"instruction": "a", "mode": "around", "label": [8, 12], "label": [1, 1000]}\n',
     "line 1: the key 'label' is given twice"),
    (b'{"instruction": "a", "mode": "around", "label": [1, ' + b"9" * 5000 + b"]}\n", "line 1: not readable JSON"),
    (b'{"instruction": "a", "label": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", "line 1: not readable JSON (nested too deep)"),
    (GOOD_LENGTH + b'{"instruction": "a\xff", "mode": "around", "label": [8, 12]}\n', "not UTF-8 text (line 2, byte 88)"),
])
def test_codi_instruction_set_attacks(tmp_path, instructions, fragment):
    assert_user_error(_codi(tmp_path, instructions), 1, "length_lite.jsonl", fragment)


@pytest.mark.parametrize(("responses", "fragment"), [
    (b'{"index": true, "text": "x"}\n', "index True outside the instruction set"),  # True was row 1
    (b'{"index": 0, "text": "x", "text": "y"}\n', "line 1: the key 'text' is given twice"),
    (b'{"index": 0, "text": "\xff"}\n', "not UTF-8 text (line 1, byte 22)"),
])
def test_codi_response_attacks(tmp_path, responses, fragment):
    assert_user_error(_codi(tmp_path, GOOD_LENGTH + GOOD_LENGTH, responses), 1, "length.jsonl", fragment)


def test_codi_response_for_a_row_without_instruction_is_one_line(tmp_path):
    proc = _codi(tmp_path, b'{"mode": "around", "label": [8, 12]}\n', b'{"index": 0, "text": "x", "instruction": "a"}\n')
    assert_user_error(proc, 1, "length.jsonl row 0: field 'instruction' does not match")


def test_codi_bom_per_line_is_read(tmp_path):
    proc = _codi(tmp_path, "\ufeff".encode() + GOOD_LENGTH)
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(tmp_path / "o.parquet").num_rows == 1


# CompMCTG splits JSON
@pytest.mark.parametrize(("splits", "fragment"), [
    ([1, 2], "expected a JSON object, got list"),
    ({"aspects": {"s": ["a"]}}, "'splits' must be a non-empty list"),
    ({"aspects": {"s": ["a"]}, "splits": [{"unseen": [{"s": "a"}]}]}, "'splits[0].seen' must be a list"),
    ({"aspects": {"s": ["a"]}, "splits": [{"seen": [{"s": "a"}]}]}, "'splits[0].unseen' must be a list"),
    ({"aspects": {"s": ["a"]}, "splits": [{"seen": [{"t": "a"}], "unseen": []}]}, "'splits[0].seen[0]': aspect 's'"),
    ({"signature": "x", "splits": [{"seen": [{"s": "a"}], "unseen": []}]}, "'signature' is not an object"),
])
def test_compmctg_splits_of_another_shape_are_one_line(splits, fragment):
    import pandas as pd

    from meta_eval.compmctg import protocol_row

    frame = pd.DataFrame({"attr:s": ["a", "b"], "attribute_accuracy_s": [1.0, 0.0]})
    with pytest.raises(ValueError, match=r"dataset 'toy': splits JSON: .*" + re.escape(fragment)):
        protocol_row(frame, "toy", splits)


def test_compmctg_cli_names_the_splits_file(tmp_path):
    (tmp_path / "dump.parquet").write_bytes(b"")
    (tmp_path / "s.json").write_text("[" * 50_000 + "]" * 50_000)
    proc = run_cli_in_process(["compmctg", "--dump", str(tmp_path / "dump.parquet"), "--scores", str(tmp_path / "x"),
                               "--splits", f"d={tmp_path / 's.json'}", "-o", str(tmp_path / "t.json")])
    assert_user_error(proc, 1, "--splits d=", "s.json: cannot read it as a splits JSON (nested too deep)")


# a job output's manifest, as `load_scores` (compare, meta, leaderboard -s) reads it
def _job_output(tmp_path, manifest) -> str:
    import pyarrow as pa

    out = tmp_path / "out"
    (out / "m" / "a").mkdir(parents=True)
    table = pa.table({"id": ["r0", "r1"], "m_score": [1.0, 2.0], "error": pa.array([None, None], pa.string()),
                      "signature": ["metric:m|v:1"] * 2})
    pq.write_table(table, out / "m" / "a" / "part-0000000000-0000000002-v.parquet")
    (out / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return str(out)


def _written(out: str, **change) -> dict:
    return {"config": {"output": "/elsewhere/out", **change.pop("config", {})},
            "metrics": {"m": {"outputs": [{"folder": "/elsewhere/out/m/a"}], **change}}}


@pytest.mark.parametrize("manifest", [
    lambda out: _written(out),
    lambda out: {**_written(out), "config": "x"},  # was AttributeError
    lambda out: _written(out, config={"output": ["x"]}),  # was AttributeError
    lambda out: _written(out, outputs=[{"folder": ["x"]}]),  # was AttributeError: no folder named, the whole label
    lambda out: _written(out, outputs="abc", kept_for_bad_shards="abc"),
])
def test_load_scores_reads_an_edited_manifest_or_names_it(tmp_path, manifest):
    from ctgscore import load_scores

    out = _job_output(tmp_path, "")
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(manifest(out)))
    assert sorted(load_scores(out)["m_score"]) == [1.0, 2.0]


@pytest.mark.parametrize(("text", "reason"), [
    ("[" * 50_000 + "]" * 50_000, "nested too deep"),
    ('{"metrics": {"m": {"rows": ' + "9" * 5000 + "}}}", "Exceeds the limit"),
])
def test_load_scores_unreadable_manifest_is_one_line(tmp_path, text, reason):
    from ctgscore import load_scores
    from scoring.errors import InputError

    with pytest.raises(InputError, match=rf"manifest\.json: not a JSON manifest \({reason}"):
        load_scores(_job_output(tmp_path, text))


# metric side files named in params: BERTScore's idf table, gptscore's templates
@pytest.mark.parametrize(("table", "fragment"), [
    ('{"default": 1.0, "12": NaN}', "the weight of '12' must be a finite number"),  # NaN reached every score
    ('{"default": Infinity}', "the weight of 'default' must be a finite number"),
    ('{"default": 1.0, "abc": 2.0}', "key 'abc' is no token id"),  # was a bare ValueError
    ('{"default": 1.0, "12": "x"}', "the weight of '12' must be a finite number"),
    ('{"default": ' + "[" * 50_000 + "]" * 50_000 + "}", "cannot read"),
])
def test_bertscore_idf_file_attacks(tmp_path, table, fragment):
    from scoring.bertscore import BERTScorer

    path = tmp_path / "idf.json"
    path.write_text(table)
    with pytest.raises(UsageError, match=re.escape(fragment)):
        BERTScorer._load_idf(None, str(path))


def test_bertscore_idf_file_as_written_still_loads(tmp_path):
    from scoring.bertscore import BERTScorer

    path = tmp_path / "idf.json"
    path.write_text('{"default": 1.5, "12": 0.25, "7": 3}')
    assert BERTScorer._load_idf(None, str(path)) == {-1: 1.5, 12: 0.25, 7: 3.0}


@pytest.mark.parametrize("text", ['{"fluency": ' + "[" * 50_000 + "]" * 50_000 + "}", '{"fluency": ' + "9" * 5000 + "}"])
def test_gptscore_template_file_past_the_json_reader_is_one_line(tmp_path, text):
    from scoring.prompted_lm import load_templates

    path = tmp_path / "templates.json"
    path.write_text(text)
    with pytest.raises(UsageError, match="templates: templates.json: not a JSON object of templates"):
        load_templates(str(path))


# `ctgscore splits --aspects FILE`
def test_splits_aspects_product_past_the_cap_is_refused_before_it_is_built(tmp_path):
    # 12 aspects of 10 values would be 10**12 combinations from 400 bytes (every byte of memory);
    # 6 of 8 (262,144) shows the cap without building the larger one when the cap is missing
    from splits.aspects import SplitsInputError, from_aspects

    with pytest.raises(SplitsInputError, match=r"8 x 8 x 8 x 8 x 8 x 8 = 262,144 attribute combinations, more than 100,000"):
        from_aspects({f"a{i}": [f"v{j}" for j in range(8)] for i in range(6)})
    assert len(from_aspects({f"a{i}": [f"v{j}" for j in range(10)] for i in range(5)}).combos) == 100_000


@pytest.mark.parametrize(("text", "fragment"), [("[" * 50_000 + "]" * 50_000, "nested too deep"),
                                                ('{"a": [' + "9" * 5000 + "]}", "Exceeds the limit")])
def test_splits_aspects_file_past_the_json_reader_is_one_line(tmp_path, text, fragment):
    path = tmp_path / "aspects.json"
    path.write_text(text)
    proc = run_cli_in_process(["splits", "--aspects", str(path), "--protocol", "holdout", "-o", str(tmp_path / "o.json")])
    assert_user_error(proc, 2, "aspects.json: not valid JSON", fragment)


# metric preference checklist CSVs (`ctgscore meta -s usr_persona_chat.csv`)
CHECKLIST = "tests/data/checklist/unieval_topical_chat.csv"


def _checklist(tmp_path, data: bytes):
    from meta_eval.io import read_checklist_csv

    path = tmp_path / "unieval_topical_chat.csv"
    path.write_bytes(data)
    return lambda: read_checklist_csv(path)


def _with_overall(value: str) -> bytes:
    import io as text_io

    import pandas as pd

    frame = pd.read_csv(CHECKLIST)
    frame["overall"] = frame["overall"].astype(object)
    frame.loc[0, "overall"] = value
    out = text_io.StringIO()
    frame.to_csv(out, index=False)
    return out.getvalue().encode()


@pytest.mark.parametrize(("data", "fragment"), [
    (lambda src: src.replace(b"\n", b"\n\xff", 2), "not UTF-8 text (line 2"),  # was UnicodeDecodeError
    (lambda src: b"", "empty file, expected a header row"),  # was EmptyDataError
    (lambda src: src + b'\n0,0,0,0,"unterminated,1,2\n', "not a CSV file pandas can read"),  # was ParserError
    (lambda src: _with_overall("inf"), "column 'overall' row 0: 'inf' is no rating (not finite)"),  # entered every correlation
])
def test_checklist_csv_attacks_are_one_line(tmp_path, data, fragment):
    from scoring.errors import InputError

    source = open(CHECKLIST, "rb").read()
    with pytest.raises(InputError, match=re.escape(fragment)):
        _checklist(tmp_path, data(source))()


def test_checklist_csv_empty_rating_stays_missing(tmp_path):
    table = _checklist(tmp_path, _with_overall(""))()
    frame = table.frame if hasattr(table, "frame") else table
    assert frame["human_overall"].isna().iloc[0] and frame["human_overall"].notna().iloc[1]


# a device named as a side file: /dev/zero or /dev/urandom would be read without end (a config from
# a pull request may name one); /dev/null, a device that ends at once, shows the refusal safely
DEVICE = "/dev/null"


def _device_reads():
    from scoring.bertscore import BERTScorer
    from scoring.codi.convert import read_jsonl
    from scoring.prompted_lm import load_templates

    return {
        "idf": lambda: BERTScorer._load_idf(None, DEVICE),
        "baseline": lambda: BERTScorer._load_baseline(__import__("types").SimpleNamespace(layer=0), DEVICE),
        "templates": lambda: load_templates(DEVICE),
        "codi": lambda: read_jsonl(__import__("pathlib").Path(DEVICE)),
    }


@pytest.mark.skipif(not __import__("os").path.exists(DEVICE), reason="no /dev/null")
@pytest.mark.parametrize("reader", ["idf", "baseline", "templates", "codi"])
def test_side_file_that_is_a_device_is_refused_before_reading(reader):
    from scoring.errors import CtgscoreError

    with pytest.raises(CtgscoreError, match="/dev/null: a device, not a file"):
        _device_reads()[reader]()


@pytest.mark.skipif(not __import__("os").path.exists(DEVICE), reason="no /dev/null")
@pytest.mark.parametrize(("args", "code"), [
    (["score", "-m", "bleu", "-i", "{dump}", "-o", "{out}", "--params", "@/dev/null"], 2),
    (["convert", "-i", "/dev/null", "--format", "jsonl", "-o", "{out}"], 1),
    (["convert", "-c", "/dev/null", "-o", "{out}"], 1),
    (["compmctg", "--dump", "{dump}", "--scores", "x", "--splits", "d=/dev/null", "-o", "{out}"], 1),
])
def test_cli_side_file_that_is_a_device_is_refused(tmp_path, args, code):
    dump = tmp_path / "in.parquet"
    dump.write_bytes(b"")
    argv = [a.format(dump=dump, out=tmp_path / "o.parquet") for a in args]
    assert_user_error(run_cli_in_process(argv), code, "/dev/null: a device, not a file")


@pytest.mark.timeout(120)
def test_object_store_memory_ray_refuses_is_a_config_error(tmp_path, monkeypatch):
    # a 31-digit `ray.object_store_memory` was "internal error: ValueError: ... (-1e+21 GB)"
    import shutil
    import tempfile

    import ray

    from ray_jobs.session import RaySession

    if ray.is_initialized():
        pytest.skip("a Ray is already running in this process")
    # Ray's temp dir is a short one of this test's own: under $TMPDIR (Ray's default root), a
    # deep one as some CI runners set puts Ray's socket paths past 107 bytes and fails the start
    # before the check under test ("validate_socket_filename failed")
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    temp_dir = tempfile.mkdtemp(prefix="rosm", dir="/tmp")
    session = RaySession(object_store_memory=10**30, temp_dir=temp_dir, quiet=True)
    try:
        with pytest.raises(UsageError, match=r"'ray.object_store_memory' 1e\+30 bytes: Ray cannot start with it"):
            session.ensure()
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.parametrize(("text", "fragment"), [
    ("P,R,F\n0.1,0.2,nan\n", "P, R and F must be finite numbers"),  # NaN rescaled every score to NaN
    ("P,R,F\n0.1,0.2\n", "has no P,R,F row for layer 0 (TypeError"),  # a short row: None for F
    ('P,R,F\n"0.1,0.2,0.3\n', "has no P,R,F row for layer 0"),
])
def test_bertscore_baseline_file_attacks(tmp_path, text, fragment):
    from types import SimpleNamespace

    from scoring.bertscore import BERTScorer

    path = tmp_path / "baseline.csv"
    path.write_text(text)
    with pytest.raises(UsageError, match=re.escape(fragment)):
        BERTScorer._load_baseline(SimpleNamespace(layer=0), str(path))


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "x"])
def test_num_cpus_must_be_finite_and_positive(tmp_path, scores_file, value):
    # `--num-cpus nan` reached Ray, which failed to start after half a minute (internal error)
    proc = run_cli_in_process(["compare", "-s", str(scores_file), "--columns", "m", "--tasks", "2", "--num-cpus", value])
    assert_user_error(proc, 2, "--num-cpus", repr(value))


def test_input_limit_infinite_inflation_is_refused(tmp_path, scores_file):
    # `.inf` switched the decompression cap off without a word, unlike the job config's `limits:`
    proc = run_cli_in_process(["score", "-m", "text_stats", "-i", str(scores_file), "-o", str(tmp_path / "o.parquet"),
                               "--input-limit", "max_inflation=.inf"])
    assert_user_error(proc, 2, "--input-limit max_inflation=inf: expected a finite number >= 1")


@pytest.mark.parametrize(("header", "used"), [
    ({"version": 1, "buckets": 4, "shards": [{"file": "f", "etag": "e", "size": 1, "rows": 2}], "groups": {}}, True),
    ({"version": 1, "buckets": 10**30, "shards": [{"file": "f", "etag": "e", "size": 1, "rows": 2}], "groups": {}}, False),
    ("[" * 50_000 + "]" * 50_000, False),
])
def test_edited_id_index_header_is_not_used(tmp_path, header, used):
    # 10**30 buckets passed the check and failed numpy later; deep nesting was a RecursionError
    import fsspec
    import pyarrow as pa

    from ray_jobs.job.id_index import INDEX_KEY, index_uri, read_index_header

    text = header if isinstance(header, str) else json.dumps(header)
    table = pa.table({"id": ["a", "b"]}).replace_schema_metadata({INDEX_KEY: text})
    pq.write_table(table, index_uri(str(tmp_path)))
    found = read_index_header(fsspec.filesystem("file"), str(tmp_path), None)
    assert (found is not None) == used


@pytest.mark.parametrize("index", ["²", "9" * 5000])
def test_set_list_index_that_is_no_ascii_number(tmp_path, index):
    # "²".isdigit() is true and int("²") raises; so does a 5,000-digit index
    with pytest.raises(ConfigError, match=r"is not an index of a list of 1"):
        load_config(_config(tmp_path, BASE), overrides={f"metrics.{index}.name": "chrf"})


@pytest.mark.parametrize(("meta", "errors"), [({"rows_error": "²"}, 0), ({"rows_error": "9" * 5000}, 0), ({"rows_error": "7"}, 7)])
def test_edited_part_footer_counts(meta, errors):
    from ray_jobs.incremental import META_PREFIX, footer_errors

    assert footer_errors((7, {META_PREFIX + k: v for k, v in meta.items()})) == errors


def test_part_footer_metadata_not_utf8_is_not_reused(tmp_path):
    import fsspec
    import pyarrow as pa

    from ray_jobs.storage.reads import read_footer_metadata

    path = tmp_path / "part.parquet"
    pq.write_table(pa.table({"id": ["a"]}).replace_schema_metadata({b"ctgscore.rows_error": b"\xff"}), path)
    assert read_footer_metadata(fsspec.filesystem("file"), str(path)) is None  # was UnicodeDecodeError in the plan


# ----- prompt files: not UTF-8, or empty, was an internal error for BARTScore ------------------
SAMPLE_SHARD = pathlib.Path(__file__).resolve().parents[1] / "data" / "sample" / "summeval-00000.parquet"


@pytest.mark.parametrize(("data", "fragment"), [
    (b"In other words,\nTo \xffsummarize,\n", "not UTF-8 text (line 2, byte 19)"),
    (b"\n  \n\r\n", "has no lines"),
])
@pytest.mark.parametrize("metric", ["bartscore", "ctrleval"])
def test_a_bad_prompt_file_is_a_usage_error_naming_it(tmp_path, tiny_models, data, fragment, metric):
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(data)
    params = {"bartscore": ["--param", f"model={tiny_models['bart']}"],
              "ctrleval": ["--param", f"model={tiny_models['pegasus']}", "--param", f"iwf={tiny_models['iwf']}",
                           "--param", "aspects=[relevance]", "--param", f"verbalizers={prompts}"]}[metric]
    proc = run_cli_in_process(["score", "-m", metric, *params, "--param", f"prompts={prompts}",
                               "-i", str(SAMPLE_SHARD), "-o", str(tmp_path / "o.parquet")])
    assert_user_error(proc, 2, f"prompts: prompt file {prompts}: {fragment}" if "UTF-8" in fragment
                      else f"prompts: prompt file {prompts} {fragment}")


def test_a_job_config_that_is_not_utf8_names_its_line(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_bytes(b"input: in\noutput: out\nmetrics: [{name: bleu, label: \xffb}]\n")
    with pytest.raises(ConfigError, match=re.escape(f"{config}: not UTF-8 text (line 3, byte")):
        load_config(config)


# ----- IWF tables: NaN, infinite or negative weights made every CTRLEval score NaN, rc 0 --------
@pytest.mark.parametrize(("lines", "fragment"), [
    (["0.5", "nan", "1.0"], ":2: 'nan' is no IWF weight (finite and >= 0)"),
    (["0.5", "1e999"], ":2: '1e999' is no IWF weight"),
    (["-1.0"], ":1: '-1.0' is no IWF weight"),
    (["0.5", "", "1.0"], ":2: a blank line inside the table"),
    (["0.5", "x\xff"], ":2: not a float"),
])
def test_iwf_tables_with_unusable_weights_are_refused_naming_the_line(tmp_path, lines, fragment):
    from scoring.iwf import load_iwf

    path = tmp_path / "iwf.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}{fragment}")):
        load_iwf(path)


def test_iwf_table_edges_that_stay_usable_and_those_named(tmp_path):
    from scoring.iwf import load_iwf

    path = tmp_path / "iwf.txt"
    path.write_bytes(b"0.0\r\n2.5\r\n\r\n\n")  # CRLF, trailing blank lines
    assert load_iwf(path).tolist() == [0.0, 2.5]
    path.write_bytes(b"0.5\n\xff\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: not UTF-8 text (line 2, byte 4)")):
        load_iwf(path)
    with pytest.raises(UsageError, match="device"):
        load_iwf(DEVICE)


# ----- CTRLEval relevance prompts: a prompt without its slots scored silently; a text holding ----
# ----- "<mask_token>" had it turned into the mask token --------------------------------------
@pytest.mark.parametrize(("prompt", "counts"), [
    ("The text is <gen_result>. It is", "1 times and <mask_token> 0 times"),
    ("no placeholder here", "0 times and <mask_token> 0 times"),
    ("<gen_result> <gen_result> It was <mask_token>.", "2 times and <mask_token> 1 times"),
    ("<gen_result> It was <mask_token> or <mask_token>.", "1 times and <mask_token> 2 times"),
])
def test_a_relevance_prompt_without_its_two_slots_is_refused(tmp_path, prompt, counts):
    from scoring.ctrleval import read_prompts

    path = tmp_path / "prompts.txt"
    path.write_text("<gen_result> In summary, it was <mask_token>.\n" + prompt + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: prompt 2 ({prompt[:80]!r}) holds <gen_result> {counts}")):
        read_prompts(path)


def test_shipped_relevance_prompts_hold_both_slots():
    from scoring.ctrleval import read_prompts
    from scoring.resources import ctrleval_task_paths

    for task in ("sentiment", "topic"):
        prompts_path, _ = ctrleval_task_paths(task)
        assert len(read_prompts(prompts_path)) >= 4


def test_a_text_holding_the_placeholders_stays_that_text():
    from scoring.ctrleval import MASK, fill_prompt

    assert fill_prompt("<gen_result> It was <mask_token>.", "a plain text") == f"a plain text It was {MASK}."
    assert fill_prompt("It was <mask_token>. <gen_result>", "see <mask_token> and <gen_result>") == \
        f"It was {MASK}. see <mask_token> and <gen_result>"


def test_a_prompt_file_without_slots_is_a_usage_error_on_the_cli(tmp_path, tiny_models):
    prompts, verbalizers = tmp_path / "prompts.txt", tmp_path / "verbal.txt"
    prompts.write_text("The text is <gen_result>. It is\n")
    verbalizers.write_text("negative\tpositive\nbad\tgood\n")
    proc = run_cli_in_process(["score", "-m", "ctrleval", "--param", f"model={tiny_models['pegasus']}",
                               "--param", f"iwf={tiny_models['iwf']}", "--param", "aspects=[relevance]",
                               "--param", f"prompts={prompts}", "--param", f"verbalizers={verbalizers}",
                               "-i", str(SAMPLE_SHARD), "-o", str(tmp_path / "o.parquet")])
    assert_user_error(proc, 2, f"prompts: {prompts}: prompt 1 ")


@pytest.mark.parametrize(("data", "fragment"), [
    ("positive\tpositive\nbad\tgood\n", ":1: the label line must name two or more distinct labels, got ['positive', 'positive']"),
    ("positive\ngood\n", ":1: the label line must name two or more distinct labels, got ['positive']"),  # relevance 1 always
    ("negative\t\tpositive\nbad\tso\tgood\n", ":1: the label line must name two or more distinct labels"),
    ("negative\tpositive\nbad\t \t\n", ":2: 1 words for 2 labels"),  # a line's ends are stripped
    ("negative\tneutral\tpositive\nbad\t \tgood\n", ":2: an empty label word (for 'neutral')"),
])
def test_verbalisers_that_cannot_tell_labels_apart_are_refused(tmp_path, data, fragment):
    from scoring.ctrleval import Verbalizer

    path = tmp_path / "verbal.txt"
    path.write_text(data)
    with pytest.raises(ValueError, match=re.escape(f"{path}{fragment}")):
        Verbalizer.from_file(path)


def test_shipped_verbalisers_load():
    from scoring.ctrleval import Verbalizer
    from scoring.resources import ctrleval_task_paths

    for task in ("sentiment", "topic"):
        verbalizer = Verbalizer.from_file(ctrleval_task_paths(task)[1])
        assert len(verbalizer.labels) >= 2 and verbalizer.rows


# ----- a direction named twice named its output column twice: an internal error -----------------
@pytest.mark.parametrize("metric", ["bartscore", "gptscore"])
def test_a_direction_given_twice_is_a_usage_error(tmp_path, tiny_models, metric):
    model = tiny_models["bart" if metric == "bartscore" else "gpt2"]
    proc = run_cli_in_process(["score", "-m", metric, "--param", f"model={model}", "--param", "directions=[s_h, r_h, s_h]",
                               "-i", str(SAMPLE_SHARD), "-o", str(tmp_path / "o.parquet")])
    assert_user_error(proc, 2, "directions: s_h given more than once")


def test_choices_keep_their_order_and_refuse_unknown_empty_and_repeated():
    from scoring.params import check_choices

    assert check_choices("d", ["h_r", "s_h"], ("s_h", "h_r")) == ("h_r", "s_h")
    assert check_choices("d", "s_h", ("s_h",)) == ("s_h",)
    for bad, fragment in ((["x"], "unknown d ['x']"), ([], "unknown d []"), (["s_h", "s_h"], "s_h given more than once")):
        with pytest.raises(UsageError, match=re.escape(fragment)):
            check_choices("d", bad, ("s_h", "h_r"))


def test_meta_reads_a_column_named_twice_once(tmp_path):
    """`--human-columns overall overall` was correlated and reported twice."""
    from meta_eval import io

    path = pathlib.Path(__file__).resolve().parents[1] / CHECKLIST
    once = io.read_table(str(path), humans=["overall"])
    twice = io.read_table(str(path), humans=["overall", "human_overall", "overall"])
    assert twice.humans == once.humans == ["human_overall"]
    metric = once.metrics[0]
    assert io.read_table(str(path), metrics=[metric, metric]).metrics == [metric]


def test_a_verbaliser_error_stays_short_whatever_its_labels(tmp_path):
    from scoring.ctrleval import Verbalizer

    path = tmp_path / "verbal.txt"
    path.write_text("\t".join(["x" * 100_000] * 2) + "\nbad\tgood\n")  # one huge label, twice
    with pytest.raises(ValueError, match="two or more distinct labels") as caught:
        Verbalizer.from_file(path)
    assert len(str(caught.value)) < 400 + len(str(path))

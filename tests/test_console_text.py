"""The console rule (`scoring.console_text`): every character that could act on a terminal or
hide text shows as its Python escape, everything else (text in any script) as it is; long
lines keep head and tail with the byte count left out; the CLI's choke points apply it."""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata

import pytest

from ctgscore.testing.console import HOSTILE, console_problems, shown
from scoring.console_text import LINE_LIMIT, console_json, console_line, console_lines, console_text

MULTILINGUAL = [
    "plain ASCII, with punctuation: (a) [b] {c} <d> 'e' \"f\" \\g",
    "中文文本，标点。日本語のテキスト、カタカナ。한국어 텍스트.",
    "Ünïcödé àccents, Æsir, straße, ł, č, ő; combining: e\u0301 n\u0303",
    "العربية نص من اليمين إلى اليسار; עברית גם",  # right-to-left letters themselves are fine
    "हिन्दी क्\u200dष, ಕನ್ನಡ, தமிழ், ภาษาไทย, ქართული, Ελληνικά, Русский",
    "emoji: 👩\u200d👩\u200d👧\u200d👦 🇫🇷 👍🏽 ❤\ufe0f ½ ™ €",
    "spaces: no-break\u00a0ideographic\u3000thin\u2009em\u2003",
    "persian zwnj: می\u200cخواهم",
    "private use \ue000, unassigned \U000e01f0",
]


def expected_hidden(ch: str) -> bool:
    """The rule, spelled independently: controls, format characters (but the joiners), line and
    paragraph separators, surrogates."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") and ch not in "\u200c\u200d"


def test_every_code_point_is_kept_or_shown_as_its_python_escape():
    """All 1,114,112 code points: a hidden one prints as `ascii` spells it (`\\x1b`, `\\u202e`,
    `\\U000e0041`), every other one as itself."""
    wrong = []
    for code in range(sys.maxunicode + 1):
        ch = chr(code)
        want = ascii(ch)[1:-1] if expected_hidden(ch) else ch
        if console_text(ch) != want:
            wrong.append(hex(code))
    assert not wrong, wrong[:20]


@pytest.mark.parametrize("ch, want", [
    ("\x1b", "\\x1b"), ("\x07", "\\x07"), ("\x00", "\\x00"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"),
    ("\x7f", "\\x7f"), ("\x9b", "\\x9b"), ("\x85", "\\x85"), ("\u061c", "\\u061c"), ("\u200e", "\\u200e"),
    ("\u202a", "\\u202a"), ("\u202e", "\\u202e"), ("\u2066", "\\u2066"), ("\u2069", "\\u2069"),
    ("\u2028", "\\u2028"), ("\u2029", "\\u2029"), ("\u200b", "\\u200b"), ("\u2060", "\\u2060"),
    ("\ufeff", "\\ufeff"), ("\u00ad", "\\xad"), ("\U000e0041", "\\U000e0041"), ("\udcff", "\\udcff"),
])
def test_each_class_of_character_by_name(ch, want):
    assert console_text(f"a{ch}b") == f"a{want}b"


@pytest.mark.parametrize("text", MULTILINGUAL)
def test_text_in_any_script_is_unchanged(text):
    assert console_text(text) == text
    assert console_line(text) == text


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_strings_are_safe_recognisable_and_stable(name):
    text = f"row-{HOSTILE[name]}-end"
    out = console_text(text)
    assert console_problems(out) == []
    assert out == shown(text)  # the row is named recognisably: its Python escape form
    assert out.startswith("row-") and out.endswith("-end")
    assert out.encode("latin-1", "backslashreplace").decode("unicode_escape") == text  # nothing lost
    assert console_text(out) == out  # idempotent: a second pass changes nothing


def test_long_text_keeps_head_and_tail_with_the_bytes_left_out():
    text = "H" * 600 + "中" * 2000 + "T" * 300
    out = console_text(text, 400)
    assert len(out) <= 400
    match = re.fullmatch(r"(H+)(中*)…\[(\d+) bytes left out\]…(中*)(T+)", out)
    assert match, out
    head, head_cjk, left_out, tail_cjk, tail = match.groups()
    assert len(head) + len(tail) > 200  # most of the budget shows text
    kept = len(head) + len(head_cjk) + len(tail_cjk) + len(tail)
    # the count is of the original's UTF-8 bytes: 1 per H/T, 3 per 中
    assert int(left_out) == len(text.encode()) - len(head) - len(tail) - 3 * (len(head_cjk) + len(tail_cjk))
    assert kept < len(text)


def test_a_cut_never_splits_an_escape():
    text = "\x1b" * 5000
    out = console_text(text, 200)
    match = re.fullmatch(r"((?:\\x1b)+)…\[(\d+) bytes left out\]…((?:\\x1b)+)", out)
    assert match, out
    assert int(match.group(2)) == 5000 - (len(match.group(1)) + len(match.group(3))) // 4
    assert console_problems(out) == []


def test_a_cut_looks_only_at_the_characters_it_shows(monkeypatch):
    """A hostile cell of many megabytes in an error line: the cut reads its head and tail, not
    every character (each character shows as at most 10), and gives what a full pass gives."""
    from scoring import console_text as module

    text = "\x1b[2J\u202e中" * 20_000 + "tail"
    whole = "".join(module._escape(ch) if module.hidden(ch) else ch for ch in text)
    looked = []
    original = module.hidden
    monkeypatch.setattr(module, "hidden", lambda ch: looked.append(ch) or original(ch))
    out = console_text(text, 400)
    assert len(looked) <= 2 * 400
    head, left_out, tail = re.fullmatch(r"(.*)…\[(\d+) bytes left out\]…(.*)", out).groups()
    assert whole.startswith(head) and whole.endswith(tail) and len(out) <= 400
    # the budget filled, up to one escape short on each side (and a digit of the marker)
    assert len(head) + len(tail) >= 400 - len(module._MARKER.format(left_out)) - 2 * 10 - 1
    assert console_problems(out) == []


def test_short_text_and_no_limit_are_not_cut():
    assert console_text("x" * 50, 50) == "x" * 50
    assert console_text("x" * 100_000) == "x" * 100_000
    assert len(console_line("x" * 100_000)) <= LINE_LIMIT
    with pytest.raises(ValueError, match="at least 40"):
        console_text("x" * 100, 10)


def test_console_line_redacts_urls_before_showing_controls():
    line = console_line("cannot read s3://AKIAEXAMPLE:se/cr+et@bucket/k\x1b[2J?X-Amz-Signature=abc\u202e")
    assert "se/cr+et" not in line and "AKIAEXAMPLE" not in line and "abc" not in line
    assert "s3://***@bucket/k\\x1b[2J?X-Amz-Signature=***" in line
    assert console_problems(line) == []


def test_console_lines_keeps_the_programs_lines_and_shows_the_datas():
    block = "Traceback (most recent call last):\n  File x\nInputError: id 'a\rb' bad \x1b[8m"
    lines = console_lines(block)
    assert len(lines) == 3 and lines[2] == "InputError: id 'a\\rb' bad \\x1b[8m"


@pytest.mark.parametrize("indent", [None, 2])
def test_console_json_escapes_the_same_characters_and_decodes_to_the_same_values(indent):
    value = {f"key{HOSTILE['bidi']}": [HOSTILE[name] for name in sorted(HOSTILE)] + MULTILINGUAL + ["\udcff"]}
    document = json.dumps(value, ensure_ascii=False, indent=indent)
    out = console_json(document)
    assert console_problems(out) == []
    assert json.loads(out) == value
    assert "中文文本" in out and "👩\u200d👩" in out  # readable text stays readable
    assert "\\udb40\\udc41" in out  # a character beyond the BMP as JSON spells it: a surrogate pair
    assert out.count("\n") == document.count("\n")


def _args(**flags) -> argparse.Namespace:
    return argparse.Namespace(**flags)


def test_emit_shows_every_line_by_the_rule(capsys):
    """The summary printer of every subcommand: each item is one line, a newline inside one is
    shown, not obeyed; `--json` escapes the same characters and keeps the values."""
    from ctgscore.cli import common

    reasons = {f"field 'constraint' of {HOSTILE['clipboard']}": 2, "x" * 5000: 1}
    lines = [f"score: {HOSTILE['clear']} -> out{HOSTILE['overwrite']}\nsecond"] + common.reason_lines(reasons)
    summary = {"ok": True, "error_reasons": reasons, "output": "out" + HOSTILE["c1"]}
    common.emit(_args(json=False), summary, lines)
    out = capsys.readouterr().out
    assert console_problems(out) == []
    assert out.count("\n") == 2
    assert shown(HOSTILE["clear"]) in out and shown(HOSTILE["overwrite"]) + "\\nsecond" in out
    assert shown(HOSTILE["clipboard"]) in out
    assert "bytes left out" in out and len(out.splitlines()[1]) < 1200  # a huge reason cut, the line too
    common.emit(_args(json=True), summary, lines)
    out = capsys.readouterr().out
    assert console_problems(out) == []
    assert json.loads(out) == summary  # the JSON keeps the raw strings (as escapes)



def test_emit_json_redacts_secrets_as_the_text_lines_do(capsys):
    """`--json` summaries name inputs and outputs too: their URLs lose userinfo and query
    secrets, at any depth, and everything else is kept."""
    from ctgscore.cli import common

    secret_url = "s3://AKIAEXAMPLE:wJalr/Secret@bucket/dump?X-Amz-Signature=deadbeef&part=1"
    summary = {"ok": True, "rows": 3, "output": secret_url, "inputs": [secret_url, "plain.parquet"],
               "nested": {"errors": {f"cannot read {secret_url}": 1}}}
    common.emit(_args(json=True), summary, [f"score -> {secret_url}"])
    printed = capsys.readouterr().out
    document = json.loads(printed)
    for secret in ("wJalr", "Secret", "AKIAEXAMPLE", "deadbeef"):
        assert secret not in printed
    assert document["rows"] == 3 and document["inputs"][1] == "plain.parquet"
    assert document["output"].startswith("s3://") and "bucket/dump" in document["output"]
    common.emit(_args(json=False), summary, [f"score -> {secret_url}"])
    assert "deadbeef" not in capsys.readouterr().out


def test_emit_json_redacts_values_json_only_writes_through_its_default(capsys):
    """A summary value JSON cannot write as it is (a set, a path, an object) is written by
    `default` as a list or a string: that string is redacted too."""
    import pathlib

    from ctgscore.cli import common

    class Location:
        def __str__(self) -> str:
            return "s3://AKIAOBJECT:objsecret@bucket/k"

    summary = {"ok": True, "inputs": {"s3://AKIASET:setsecret@bucket/k"}, "where": Location(),
               "path": pathlib.PurePosixPath("u:pathsecret@host.example")}
    common.emit(_args(json=True), summary, ["x"])
    printed = capsys.readouterr().out
    assert json.loads(printed)["inputs"] == ["s3://***@bucket/k"]
    for secret in ("setsecret", "objsecret", "pathsecret", "AKIA"):
        assert secret not in printed


@pytest.mark.parametrize("value", [
    'https://x.example/?token=se"cret',  # a quote ends the URL right after a JSON escape's backslash
    'https://x.example/?a=1&sig=k\\"x',
    's3://AKIA:abc/def@bucket/k?X-Amz-Signature=f00\\',
    'https://x.example/?token=abc", "injected": "1',
])
def test_a_json_document_printed_by_the_console_rule_still_parses(capsys, value):
    """`compare --format json` without `-o`: the document goes through `console_json`, then
    each of its lines through `console_line` (`emit` with no limit), whose URL redaction runs on
    the JSON text; a redacted value must keep the backslash of a JSON escape it ends at."""
    from ctgscore.cli import common

    document = json.dumps({"system": value, "systems": [value, "plain"], "n": 3}, ensure_ascii=False, indent=2)
    common.emit(_args(json=False), {}, console_json(document).split("\n"), None)
    printed = json.loads(capsys.readouterr().out)
    assert printed["n"] == 3 and printed["systems"][1] == "plain" and set(printed) == {"system", "systems", "n"}
    assert printed["system"] == printed["systems"][0]
    for secret in ("se", "k\\", "abc", "f00"):
        assert f"={secret}" not in printed["system"], printed


def test_error_line_of_the_cli_names_the_file_by_the_rule(cli, tmp_path):
    """The CLI's one error printer (text and `--json`), and the `--debug` traceback."""
    missing = tmp_path / f"dump{HOSTILE['clipboard']}{HOSTILE['bidi']}.parquet"
    for flags in ([], ["--json"], ["--debug"]):
        proc = cli(["score", "-m", "text_stats", "-i", str(missing), "-o", str(tmp_path / "o.parquet"), *flags])
        assert proc.returncode == 2
        assert console_problems(proc.stdout + proc.stderr) == []
        assert f"error: input {shown(str(missing))}: no such file or folder" in proc.stderr
        if flags == ["--json"]:
            assert json.loads(proc.stdout)["error"] == f"input {shown(str(missing))}: no such file or folder"
        if flags == ["--debug"]:
            assert "Traceback (most recent call last):" in proc.stderr


class _Exited(Exception):
    pass


def _no_exit(code):
    raise _Exited(code)


def test_worker_messages_name_the_unit_by_the_rule(monkeypatch, capsys):
    """The two lines a Ray worker prints before it ends itself (an accelerator error, a unit
    past `unit_timeout_s`) name a shard from the data: shown by the rule."""
    from ray_jobs.job import device_guard, scorer

    monkeypatch.setattr(scorer.os, "_exit", _no_exit)
    rel = f"shard{HOSTILE['clipboard']}{HOSTILE['bidi']}.parquet"
    with pytest.raises(_Exited):
        scorer.end_actor("m", {"rel": rel, "start": 0, "stop": 4}, RuntimeError(f"CUDA error: in {HOSTILE['clear']}"))
    with pytest.raises(_Exited):
        device_guard.Watchdog(5, "m")._expire(f"{rel} rows 0-4")
    err = capsys.readouterr().err
    assert console_problems(err) == []
    assert err.count("\n") == 2
    assert err.count(f"{shown(rel)} rows 0-4") == 2 and shown(HOSTILE["clear"]) in err

"""`scoring.held_stderr`: descriptor 2 held back during a call, forwarded afterwards without the
Rust panic reports; `scoring.quiet_tokenizer`: the tokenizers backend behind it."""

from __future__ import annotations

import copy
import os
import pickle
import threading

import pytest

from scoring.held_stderr import PanicReport, held_stderr, split_panic_reports

# as tokenizers 0.23 (Rust 1.9x) wrote them, first panic of a process without RUST_BACKTRACE
WITH_NOTE = (b"\nthread '<unnamed>' (11781) panicked at /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/"
             b"onig-6.5.3/src/lib.rs:647:23:\nOnig: Regex search error: retry-limit-in-match over\n"
             b"note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n")
# RUST_BACKTRACE=1: the frames are indented, the closing note names RUST_BACKTRACE=full
WITH_BACKTRACE = (b"\nthread 'main' panicked at src/main.rs:2:5:\nboom\nstack backtrace:\n   0: rust_begin_unwind\n"
                  b"             at /rustc/abc/library/std/src/panicking.rs:652:5\n   1: main\n"
                  b"note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.\n")


def test_split_panic_reports_keeps_every_other_line_in_order():
    data = b"before\n" + WITH_NOTE + b"between\n" + WITH_BACKTRACE + b"a line that says panicked at in passing\nafter"
    rest, panics = split_panic_reports(data)
    assert rest == b"before\nbetween\na line that says panicked at in passing\nafter"
    assert panics == [PanicReport("onig-6.5.3/src/lib.rs:647:23", "Onig: Regex search error: retry-limit-in-match over"),
                      PanicReport("src/main.rs:2:5", "boom")]
    assert str(panics[1]) == "panicked at src/main.rs:2:5: boom"


def test_split_panic_reports_reads_a_later_panic_and_the_old_one_line_format():
    later = b"\nthread '<unnamed>' (12350) panicked at /x/registry/src/index/onig-6.5.3/src/lib.rs:647:23:\nOnig: over\nnext\n"
    old = b"thread 'main' panicked at 'boom', src/main.rs:2:5\nnote: run with `RUST_BACKTRACE=1` environment variable\n"
    rest, panics = split_panic_reports(later + old)
    assert rest == b"next\n"
    assert panics == [PanicReport("onig-6.5.3/src/lib.rs:647:23", "Onig: over"), PanicReport("'boom', src/main.rs:2:5", "")]


def test_split_panic_reports_leaves_text_without_a_panic_as_it_is():
    data = "plain \N{GREEK SMALL LETTER ALPHA} text\n\nthread 'x' is not a panic\n".encode() + b"\xff no newline"
    assert split_panic_reports(data) == (data, [])


def test_held_stderr_forwards_other_lines_after_the_block_and_reports_the_panic(capfd):
    capfd.readouterr()
    with held_stderr() as held:
        os.write(2, b"first\n" + WITH_NOTE + b"second\n")
        assert capfd.readouterr().err == ""  # held back while the block runs
    assert capfd.readouterr().err == "first\nsecond\n"
    assert [report.location for report in held.panics] == ["onig-6.5.3/src/lib.rs:647:23"]


def test_another_threads_stderr_during_the_block_is_forwarded_when_it_ends(capfd):
    capfd.readouterr()
    written = threading.Event()

    def other_thread():
        os.write(2, b"from another thread\n")
        written.set()

    with held_stderr():
        thread = threading.Thread(target=other_thread)
        thread.start()
        assert written.wait(30)
        thread.join()
    assert capfd.readouterr().err == "from another thread\n"


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, ValueError])
def test_descriptor_2_is_restored_when_the_block_raises(capfd, interruption):
    before = os.fstat(2)
    capfd.readouterr()
    with pytest.raises(interruption), held_stderr():
        os.write(2, b"written before the interruption\n")
        raise interruption("stop")
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    os.write(2, b"written after\n")
    assert capfd.readouterr().err == "written before the interruption\nwritten after\n"


def test_a_nested_block_runs_inside_the_outer_one(capfd):
    capfd.readouterr()
    with held_stderr() as outer:
        with held_stderr() as inner:
            os.write(2, WITH_BACKTRACE + b"inner\n")
        assert inner.panics == []  # the outer block holds descriptor 2; it sees the report
    assert capfd.readouterr().err == "inner\n"
    assert [report.message for report in outer.panics] == ["boom"]


def test_a_quiet_tokenizer_pickles_copies_and_keeps_its_guard(tiny_models):
    from scoring.models import load_tokenizer, resolve_model
    from scoring.quiet_tokenizer import QuietBackend

    tokenizer = load_tokenizer(resolve_model(tiny_models["gpt2"]))
    assert isinstance(tokenizer.backend_tokenizer, QuietBackend)
    expected = tokenizer(["A calm day at sea."])["input_ids"]
    for twin in (pickle.loads(pickle.dumps(tokenizer)), copy.deepcopy(tokenizer)):
        assert isinstance(twin.backend_tokenizer, QuietBackend)
        assert twin(["A calm day at sea."])["input_ids"] == expected
    tokenizer.backend_tokenizer.encode_special_tokens = True  # attributes are set on the Rust object
    assert tokenizer.backend_tokenizer._rust.encode_special_tokens is True

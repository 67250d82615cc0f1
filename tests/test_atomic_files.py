"""`scoring.atomic_files`: the one temp-file-and-rename writer behind reports, the CLI's Parquet
outputs, the job's local parts and the Ray token file."""

from __future__ import annotations

import os
import stat

import pytest

from scoring import atomic_files


@pytest.fixture
def umask():
    """Set the process umask for one test; the old one comes back after it."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_replaces_a_file_whole_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    assert atomic_files.write_bytes(target, b"new bytes") == target
    assert target.read_bytes() == b"new bytes"
    atomic_files.write_text(target, "caf\u00e9")
    assert target.read_bytes() == "caf\u00e9".encode()
    assert _names(tmp_path) == ["out.bin"]


def test_a_symlink_at_the_destination_is_replaced_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "report.html"
    link.symlink_to(victim)
    atomic_files.write_text(link, "page")
    assert not link.is_symlink() and link.read_text() == "page" and victim.read_text() == "keep"


def test_a_symlink_planted_at_the_temp_name_is_not_followed(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    planted = ".out.tmp-00000000"
    (tmp_path / planted).symlink_to(victim)
    names = iter([planted, ".out.tmp-11111111"])
    monkeypatch.setattr(atomic_files, "temp_name", lambda name: next(names))
    atomic_files.write_bytes(tmp_path / "out", b"data")
    assert (tmp_path / "out").read_bytes() == b"data" and victim.read_text() == "keep"
    assert (tmp_path / planted).is_symlink()  # someone else's name: left alone


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    target = tmp_path / "scores.parquet"
    target.write_bytes(b"complete")

    def half_then_fail(handle):
        handle.write(b"half")
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError, match="disk gone"):
        atomic_files.write_with(target, half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        atomic_files.write_with(target, lambda handle: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert target.read_bytes() == b"complete" and _names(tmp_path) == ["scores.parquet"]
    with pytest.raises(FileNotFoundError):
        atomic_files.write_bytes(tmp_path / "missing-folder" / "x", b"x")


def test_a_mode_holds_from_creation_whatever_the_umask(tmp_path, umask):
    umask(0)  # a plain open() would make the file world-readable and writable
    seen = []

    def write(handle):
        seen.append(stat.S_IMODE(os.fstat(handle.fileno()).st_mode))  # before any byte is written
        handle.write(b"secret")

    atomic_files.write_with(tmp_path / "auth_token", write, mode=0o600)
    assert seen == [0o600] and stat.S_IMODE((tmp_path / "auth_token").stat().st_mode) == 0o600
    umask(0o077)
    atomic_files.write_bytes(tmp_path / "shared", b"x", mode=0o644)  # exactly the mode asked for
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o644


def test_without_a_mode_the_file_gets_what_open_would_give(tmp_path, umask):
    umask(0o027)
    atomic_files.write_bytes(tmp_path / "a", b"x")
    with open(tmp_path / "b", "wb"):
        pass
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o640


def test_fsync_flushes_the_file_and_its_folder_only_when_asked(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)), real(fd)))
    atomic_files.write_bytes(tmp_path / "a", b"x")
    assert synced == [False, True]  # the file before the rename, the folder after it
    atomic_files.write_bytes(tmp_path / "b", b"x", fsync=False)
    assert synced == [False, True]


def test_temp_names_are_hidden_recognised_and_fit_a_file_name():
    for name in ("part-0000.parquet", "manifest.json", "\u00e9" * 200, "x" * 255):
        temp = atomic_files.temp_name(name)
        assert temp.startswith(".") and atomic_files.is_temp_name(temp), temp
        assert len(temp.encode()) <= 255
    assert not atomic_files.is_temp_name("part-0000.parquet")
    assert not atomic_files.is_temp_name(".hidden")
    assert atomic_files.temp_name("a") != atomic_files.temp_name("a")


def test_a_name_of_undecodable_bytes_keeps_them_in_its_temp_name(tmp_path):
    """A file name that is not UTF-8 (bytes kept as lone surrogates by `surrogateescape`)
    keeps those bytes in its temp name, so the temp file is still one that `is_temp_name`
    recognises (the job's clean-up of crashed writes finds it) and the write works."""
    for name in ("\udcff", "\udcff\udcfe.parquet", "\udcff" * 300):
        temp = atomic_files.temp_name(name)
        assert atomic_files.is_temp_name(temp), temp
        assert len(os.fsencode(temp)) <= 255
    assert os.fsencode(atomic_files.temp_name("\udcff")).startswith(b".\xff.tmp-")
    target = tmp_path / "\udcff\udcfe"
    atomic_files.write_bytes(target, b"raw")
    assert target.read_bytes() == b"raw" and os.listdir(tmp_path) == [target.name]

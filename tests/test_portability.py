"""The test suite's own helpers on machines unlike the 2-core one it was written on
(CONTRIBUTING.md, "Where the tests run")."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile

from tests.job_support import stop_group


def test_stop_group_removes_its_cluster_dir_under_tmp_whatever_tmpdir_says(tmp_path, monkeypatch):
    """The clusters the tests start keep their Ray dirs in /tmp (short socket paths), also when
    $TMPDIR points elsewhere: stopping one removes its dir there too (it was left behind, a Ray
    session of logs per test, when $TMPDIR was not /tmp)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what gettempdir() says under another $TMPDIR
    marker = pathlib.Path(tempfile.mkdtemp(prefix="rport", dir="/tmp"))
    (marker / "session_latest").mkdir()
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        stop_group(process, marker=str(marker), grace=5)
        assert process.returncode is not None  # the group was stopped
        assert not marker.exists()
    finally:
        shutil.rmtree(marker, ignore_errors=True)

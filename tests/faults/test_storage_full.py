"""Storage full: the study's SQLite file on a small file system (a tmpfs mounted by the
test) that fills up mid-study. The driver stops with a clear message (which file, the
disk is full, how to resume; exit status 1), the database stays intact and readable, and
once space is freed the same command resumes the study to its total."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import tempfile
import threading
import time

import optuna
import pytest

from advisor.cli.main import main

from conftest import EXAMPLES
from peek import peek_trials

pytestmark = pytest.mark.ray

STUDY = "digits_mlp-bs"


@pytest.fixture
def small_fs():
    """A 16 MiB tmpfs of its own (root only: skipped where mounting is not permitted)."""
    where = tempfile.mkdtemp(prefix="advfull-")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", where],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        os.rmdir(where)
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", where], check=False, capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", where], check=False, capture_output=True)  # still open in this process
        os.rmdir(where)


def _fill(directory: str) -> str:
    """Write a file until the file system has no space left; its path."""
    path = os.path.join(directory, "filler")
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError:
            pass
        try:
            while True:
                fh.write(b"\0" * 512)
        except OSError:
            pass
    return path


def _finished(url: str) -> int:
    """Trials stored as complete or pruned (0 before the study exists); polled 5 times a second."""
    return sum(t.state.name in ("COMPLETE", "PRUNED") for t in peek_trials(url.removeprefix("sqlite:///"), STUDY))


def _fill_once_a_trial_is_stored(url: str, directory: str, returned: threading.Event, filled: list) -> None:
    """Fill ``directory``'s file system once the driver (in the main thread) has stored a
    trial, unless it returned first; ``filled`` gets the filler's path and when it was full."""
    deadline = time.monotonic() + 240
    while _finished(url) < 1 and not returned.is_set() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not returned.is_set():
        filled.append((_fill(directory), time.monotonic()))


@pytest.mark.timeout(400)
def test_a_full_disk_stops_the_study_cleanly_and_the_same_command_resumes(ray_session, small_fs, workdir, capsys,
                                                                          quiet_optuna):
    """The driver runs in this process (on the session's Ray), in the main thread as the
    command's does; the test's thread fills the disk meanwhile."""
    db = os.path.join(small_fs, "advisor.db")
    url = f"sqlite:///{db}"
    space = workdir / "bs.yaml"
    space.write_text("batch_size: {choices: [16, 32, 64, 128]}\nthreads: {choices: [1, 2]}\n")
    args = ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", str(space), "--train-samples", "300",
            "--storage", url, "--trials", "4", "--no-tui"]
    returned, filled = threading.Event(), []
    filler_thread = threading.Thread(target=_fill_once_a_trial_is_stored, args=(url, small_fs, returned, filled),
                                     daemon=True)
    filler_thread.start()
    try:
        code = main(args)
        returned_at = time.monotonic()
    finally:
        returned.set()
        filler_thread.join(timeout=60)
    stdout, stderr = capsys.readouterr()
    assert filled, ("the study ended before the disk filled", stdout[-3000:], stderr[-3000:])
    filler, filled_at = filled[0]
    stopped_s = returned_at - filled_at
    assert code == 1, (stdout[-3000:], stderr[-3000:])
    assert "advisor tune: error: storage sqlite:///" in stderr and "is lost: the disk holding it is full" in stderr
    assert db in stderr and "free space there, then run the same command again" in stderr, stderr
    assert "Traceback" not in stderr
    assert stopped_s < 120  # not waited for: a full disk does not come back by itself

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:  # intact and readable while still full
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    before = optuna.load_study(study_name=STUDY, storage=url).trials
    done_before = {t.number: t.values for t in before if t.state.name in ("COMPLETE", "PRUNED")}
    assert done_before
    assert main(["export", "--storage", url, "--study", STUDY, "-o", "best.yaml"]) == 0

    os.remove(filler)  # space is back
    assert main(args) == 0  # the same command
    after = optuna.load_study(study_name=STUDY, storage=url).trials
    for number, values in done_before.items():
        assert after[number].values == values
    assert not [t for t in after if t.state.name == "RUNNING"]
    measured = [t for t in after if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs]
    keys = [t.user_attrs["config_key"] for t in measured]
    assert len(keys) == len(set(keys)) == 4, [(t.number, t.state.name, t.user_attrs.get("failure_class"))
                                              for t in after]

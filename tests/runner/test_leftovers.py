"""advisor/runner/leftovers.py: the temp folders of trials' Ray workers (their fork servers'
sockets), removed once the worker has exited, never while it runs, and never anything but
a real pymp-* folder of this user."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from advisor.runner import leftovers


def _gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _noted(notes, pid: int, target) -> None:
    (notes / f"mp-{pid}").write_text(str(target))


def test_an_exited_workers_folder_is_removed_and_a_running_ones_kept(tmp_path):
    notes, temp = tmp_path / "started", tmp_path / "tmp"
    notes.mkdir()
    temp.mkdir()
    dead, live = temp / "pymp-dead", temp / "pymp-live"
    for folder in (dead, live):
        folder.mkdir()
        (folder / "listener-x").write_text("")
    _noted(notes, _gone_pid(), dead)
    _noted(notes, os.getpid(), live)  # this process runs
    assert leftovers.sweep(notes) == 1
    assert not dead.exists() and live.is_dir()
    assert [p.name for p in notes.iterdir()] == [f"mp-{os.getpid()}"]  # kept for a later sweep


def test_only_a_real_pymp_folder_is_ever_removed(tmp_path):
    notes, temp = tmp_path / "started", tmp_path / "tmp"
    notes.mkdir()
    temp.mkdir()
    other = temp / "precious"
    other.mkdir()
    real = temp / "pymp-real"
    real.mkdir()
    link = temp / "pymp-link"
    link.symlink_to(real)
    for target in (other, link, "relative/pymp-x", temp / "pymp-missing"):
        _noted(notes, _gone_pid(), target)
    for odd in ("notapid", "²", "9" * 40):  # not a pid this machine can have: left alone, no error
        (notes / f"mp-{odd}").write_text(str(real))
    assert leftovers.sweep(notes) == 0
    assert other.is_dir() and real.is_dir() and link.is_symlink()
    assert sorted(p.name for p in notes.iterdir()) == sorted(f"mp-{odd}" for odd in ("notapid", "²", "9" * 40))


def test_no_folder_no_sweep(tmp_path):
    assert leftovers.sweep(None) == 0 and leftovers.sweep(tmp_path / "missing") == 0


def test_a_worker_notes_its_folder_once_before_its_trial(tmp_path, monkeypatch):
    """Noted before the trial runs (a worker killed in its first trial is swept too): the
    folder multiprocessing's fork server will listen in, made now if it is not yet."""
    from multiprocessing import util

    monkeypatch.setattr(leftovers, "_NOTED", set())
    leftovers.note_tempdir(tmp_path)
    note = tmp_path / f"mp-{os.getpid()}"
    assert note.read_text() == util.get_temp_dir() and os.path.basename(util.get_temp_dir()).startswith("pymp-")
    note.unlink()
    leftovers.note_tempdir(tmp_path)
    assert not note.exists()  # once per folder
    leftovers.note_tempdir(tmp_path / "missing")  # no folder (not this machine's Ray): nothing, no error


def test_a_killed_trial_processs_scratch_folder_is_removed_and_a_running_ones_kept(tmp_path, monkeypatch):
    """The memory estimate's and the ranks' folders (trial/process.py scratch_dir) outlive a
    trial process killed inside them (a timed-out trial): swept once that process is gone."""
    import tempfile

    from advisor.trial.process import scratch_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = _gone_pid()
    killed = tmp_path / f"advisor-estimate-{gone}-abc"
    (killed / "sub").mkdir(parents=True)
    (killed / "payload.json").write_text("{}")
    others = [tmp_path / f"advisor-ranks-{gone}", tmp_path / "advisor-estimate-x-abc", tmp_path / f"other-{gone}-x",
              tmp_path / f"advisor-mine-{gone}-x"]
    for folder in others:  # not a scratch folder's name: never touched
        folder.mkdir()
    (tmp_path / f"advisor-ranks-{gone}-file").write_text("")  # a file, not a folder
    os.symlink(tmp_path / "other", tmp_path / f"advisor-ranks-{gone}-link")
    with scratch_dir("estimate") as mine:  # this process runs: its folder is kept
        assert os.path.basename(mine).startswith(f"advisor-estimate-{os.getpid()}-")
        assert leftovers.sweep_scratch() == 1
        assert os.path.isdir(mine)
    assert not killed.exists() and all(folder.is_dir() for folder in others)
    assert (tmp_path / f"advisor-ranks-{gone}-file").exists() and os.path.islink(tmp_path / f"advisor-ranks-{gone}-link")
    assert leftovers.sweep_scratch(tmp_path / "missing") == 0
    with pytest.raises(ValueError, match="scratch folder kind 'x'"):
        scratch_dir("x")

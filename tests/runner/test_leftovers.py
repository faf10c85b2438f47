"""advisor/runner/leftovers.py: the temp folders of trials' Ray workers (their fork servers'
sockets), removed once the worker has exited, never while it runs, and never anything but
a real pymp-* folder of this user."""

from __future__ import annotations

import os
import subprocess
import sys

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
    (notes / "mp-notapid").write_text(str(real))
    assert leftovers.sweep(notes) == 0
    assert other.is_dir() and real.is_dir() and link.is_symlink()
    assert [p.name for p in notes.iterdir()] == ["mp-notapid"]  # the notes of exited workers are dropped


def test_no_folder_no_sweep(tmp_path):
    assert leftovers.sweep(None) == 0 and leftovers.sweep(tmp_path / "missing") == 0


def test_a_worker_notes_its_folder_once_and_only_when_it_has_one(tmp_path, monkeypatch):
    import multiprocessing.process

    config = multiprocessing.process.current_process()._config
    monkeypatch.setattr(leftovers, "_NOTED", set())
    monkeypatch.delitem(config, "tempdir", raising=False)
    leftovers.note_tempdir(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no multiprocessing temp folder in this process: nothing to note
    monkeypatch.setitem(config, "tempdir", str(tmp_path / "pymp-abc"))
    leftovers.note_tempdir(tmp_path)
    note = tmp_path / f"mp-{os.getpid()}"
    assert note.read_text() == str(tmp_path / "pymp-abc")
    note.unlink()
    leftovers.note_tempdir(tmp_path)
    assert not note.exists()  # once per folder

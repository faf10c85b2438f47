"""What a trial's Ray worker leaves in the system's temp folder, removed once it is gone.

A warm worker's fork server (``advisor.trial.forkserver``: Python's multiprocessing
"forkserver") listens on a socket in a ``pymp-*`` folder that multiprocessing makes in
the temp folder and removes when the worker's interpreter exits normally. Ray ends its
workers with a signal, so each study left one or more of those folders behind in /tmp.

Where the trials run on this machine (the executor's private ``started`` folder exists),
the worker notes its folder there (``mp-<pid>``, holding the path); the executor removes
the folders of workers that have exited when it starts and when it shuts down. A worker
still alive (a Ray shared with other studies) keeps its folder until a later sweep.

A trial process's own scratch folders (``advisor.trial.process.scratch_dir``: the memory
estimate's, the ranks') are removed when it ends, but not when it is killed inside one (a
timed-out trial): ``sweep_scratch`` removes those whose process is gone, at the same times.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

PREFIX = "mp-"
_NOTED: set[str] = set()  # the folders this process has noted itself in


def note_tempdir(folder: Path) -> None:
    """In a trial's Ray worker, before its trial: note this process's multiprocessing temp
    folder (made now if it is not yet: the fork server started for the trial listens in
    it) in ``folder``, once per folder; a worker killed in its first trial is swept too."""
    if str(folder) in _NOTED or not folder.is_dir():
        return
    from multiprocessing import util

    with contextlib.suppress(OSError):
        (folder / f"{PREFIX}{os.getpid()}").write_text(util.get_temp_dir())
        _NOTED.add(str(folder))


def sweep(folder: Path | None, wait_s: float = 0.0) -> int:
    """Remove the noted temp folders of workers that have exited (waiting up to ``wait_s``
    for those still running, as after ``ray.shutdown()``); returns how many were removed.
    Only a folder named ``pymp-*``, a real directory owned by this user, is removed."""
    if folder is None or not folder.is_dir():
        return 0
    deadline, removed = time.monotonic() + wait_s, 0
    for note in sorted(folder.glob(f"{PREFIX}*")):
        pid = _pid(note.name[len(PREFIX):])
        if pid is None:
            continue
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            continue
        with contextlib.suppress(OSError):
            target = Path(note.read_text().strip())
            # alive again: the pid was reused by a new worker, which noted its own folder meanwhile
            if target.is_absolute() and target.name.startswith("pymp-") and _own_folder(target) and not _alive(pid):
                shutil.rmtree(target, ignore_errors=True)
                removed += 1
        with contextlib.suppress(OSError):
            note.unlink()
    return removed


def sweep_scratch(folder: Path | None = None) -> int:
    """Remove the trial processes' scratch folders (``advisor-<kind>-<pid>-*``, ``kind`` one
    of ``SCRATCH_KINDS``) in ``folder`` (default: the temp folder) whose process no longer
    runs: real directories of this user only; returns how many."""
    import tempfile

    from advisor.trial.process import SCRATCH_KINDS, SCRATCH_PREFIX

    removed = 0
    for target in Path(folder or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*-*"):
        kind, pid_text, _ = target.name[len(SCRATCH_PREFIX):].split("-", 2)
        pid = _pid(pid_text)
        if kind in SCRATCH_KINDS and pid is not None and _own_folder(target) and not _alive(pid):
            shutil.rmtree(target, ignore_errors=True)
            removed += 1
    return removed


def _pid(text: str) -> int | None:
    """``text`` as a process id, or None when it is not one."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None


def _own_folder(target: Path) -> bool:
    """Whether ``target`` is a real directory (not a link) of this user."""
    try:
        return target.is_dir() and not target.is_symlink() and target.lstat().st_uid == os.getuid()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone: it holds no folder)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True  # no /proc here: it answered the signal

"""What a process forked for a trial (or for one of its ranks) does first, and how its
end is described. Linux-first: elsewhere the parent-death signal is not available."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tempfile import TemporaryDirectory

_FORKED = False  # True in a trial process forked from the warm fork server


def mark_forked(forked: bool) -> None:
    """Record whether this trial process was forked from the warm fork server (torch
    imported, single-threaded, no tensor operation run yet) or spawned."""
    global _FORKED
    _FORKED = forked


def can_fork() -> bool:
    """Whether a child of this trial process (its memory estimate, the ranks of a DDP
    trial) may start as a fork of it: only in a trial forked from the warm fork server, and
    only while CUDA is not initialised here. A fork cannot initialise CUDA again ("Cannot
    re-initialize CUDA in forked subprocess", seen on an H100), and model.py, a library it
    imports or a read of the GPU's properties may have initialised it; a fresh interpreter
    can."""
    if not _FORKED:
        return False
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


def die_with_parent(parent: int | None = None) -> None:
    """Linux: SIGKILL this process when its parent exits (PR_SET_PDEATHSIG), so a killed
    Ray worker, fork server or trial supervisor leaves nothing running. If the parent
    (``parent``, or any when None) already went before this call, exit now."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1 or (parent is not None and os.getppid() != parent):
        os._exit(1)


def normal_priority() -> int:
    """Take this process back to niceness 0 where it may, and return the niceness it runs at.

    Ray starts its workers at niceness 15 (its ``worker_niceness``), and a trial process
    forked under one inherits it. At 15 any program at the usual 0 takes the CPU first: on
    a 2-core machine beside one busy process, a trial's OpenMP threads waited for the core
    the other held, and the built-in model trained 50-150 times slower (``advisor doctor``,
    15,500 samples/s alone, 25-400 beside it). The Ray that advisor starts runs its workers
    at 0; on a cluster started otherwise only root (or CAP_SYS_NICE) may lower it here."""
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) > 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
    except (OSError, AttributeError):  # not allowed (an unprivileged user), or not POSIX
        pass
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except (OSError, AttributeError):
        return 0


def adopt_environment(environ: dict[str, str]) -> None:
    """In a forked process: take ``environ`` as this process's environment, and the
    thread count it names (torch fixed its count at import, in the fork server)."""
    os.environ.clear()
    os.environ.update(environ)
    threads_from_env()


def threads_from_env() -> None:
    """Take this process's OMP_NUM_THREADS: torch fixed its thread count from the value it
    saw when the fork server imported it, and a forked process inherits that count."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        import torch

        torch.set_num_threads(int(value))


def rebuild_thread_pool() -> None:
    """In a process just forked, while it has one thread: let torch replace the thread pool
    it inherited. Once a thread count is set (``set_num_threads``, from OMP_NUM_THREADS)
    and a parallel op has run (loading a dataset), torch has a pthreadpool; after a fork it
    is marked corrupt and rebuilt by the next thread that asks for it, not thread-safely.
    The first backward starts autograd's device threads, and each asks for the pool as it
    starts (``Engine::thread_init``); while one rebuilds it another gets none, and the
    process aborts: ``Invalid thread pool!`` (SIGABRT, issue 27). With a CUDA build of torch
    (2.11 / 2.13 +cu130) FakeTensorMode installs a stand-in CUDA guard that makes that eight
    threads even without a GPU; a CPU build starts none. Asked for once here, the pool is
    rebuilt before there is another thread."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(torch.get_num_threads())


def describe_exit(code: int | None) -> str:
    """'killed by SIGKILL' for a negative exit code, 'exit status N' otherwise."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = ": the kernel's out-of-memory killer, or a kill from outside" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit status {code}"


class ForkedChild:
    """``run()`` in a fork of this process, which must be a warm trial process (forked from
    advisor/trial/forkserver.py: single-threaded, no tensor operation run yet); the child
    exits with what ``run`` returns, without interpreter teardown. The parts of
    ``subprocess.Popen`` its callers use (``poll``, ``kill``, ``wait``, ``returncode``)."""

    def __init__(self, run: Callable[[], int]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.returncode: int | None = None
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                rebuild_thread_pool()
                code = run()
            finally:
                os._exit(code)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]


SCRATCH_PREFIX = "advisor-"  # + kind + "-" + the owning process's pid + "-": a trial process's scratch folder
SCRATCH_KINDS = ("estimate", "ranks")  # the only kinds: the sweep removes no other folder


def scratch_dir(kind: str) -> TemporaryDirectory[str]:
    """A temporary folder of this trial process's (``tempfile.TemporaryDirectory``), named
    ``advisor-<kind>-<pid>-*`` so that, when the process is killed inside it (a timed-out or
    cancelled trial), the executor can tell it is nobody's any more and remove it
    (``advisor.runner.leftovers.sweep_scratch``)."""
    import tempfile

    if kind not in SCRATCH_KINDS:
        raise ValueError(f"scratch folder kind {kind!r}: expected one of {SCRATCH_KINDS}")
    return tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{kind}-{os.getpid()}-")

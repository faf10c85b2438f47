"""The user's own code, run and reported in the user's terms.

``user_code(where)`` runs a piece of model.py (its import, a contract function) so that
whatever it raises becomes a WorkloadError (exit status 2) naming ``where`` and told in
the user's frames only: an exception, ``sys.exit()`` (SystemExit), or a KeyboardInterrupt
the code raises itself. A real Ctrl-C stays a KeyboardInterrupt.

``user_frames(exc)`` formats a traceback without advisor's frames, and without the
frames inside installed libraries (torch, numpy, the standard library) beyond one line
saying where in them it was raised.
"""

from __future__ import annotations

import contextlib
import signal
import sysconfig
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from advisor.core.errors import WorkloadError

_OURS = str(Path(__file__).resolve().parents[1])
_LIBRARIES = tuple(sorted({str(Path(p).resolve()) for name in ("stdlib", "platstdlib", "purelib", "platlib")
                           if (p := sysconfig.get_paths().get(name))}))


def is_user_file(filename: str) -> bool:
    """True for a frame in the user's code: not advisor's, not an installed library's."""
    if filename.startswith("<"):  # <frozen ...>, <string>
        return False
    try:
        path = str(Path(filename).resolve())
    except (OSError, RuntimeError):
        return False
    return not path.startswith(_OURS) and not path.startswith(_LIBRARIES)


def user_frames(exc: BaseException) -> str:
    """The traceback of ``exc`` in the user's frames (file, line, its text), then the
    exception itself. Without any user frame, the last frames as they are."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = traceback.StackSummary.from_list([f for f in frames if is_user_file(f.filename)])
    if not mine:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:]).rstrip()
    lines = ["Traceback (the workload's own frames):\n", *mine.format()]
    deepest = frames[-1]
    if not is_user_file(deepest.filename):
        lines.append(f"  (raised inside {_short(deepest.filename)}, line {deepest.lineno}, in {deepest.name})\n")
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip()


def _short(filename: str) -> str:
    """A library file's path from its package (``torch/nn/functional.py``)."""
    for root in _LIBRARIES:
        if filename.startswith(root):
            return filename[len(root):].lstrip("/")
    return filename


def describe_exit(exc: SystemExit) -> str:
    code = exc.code
    return "sys.exit()" if code is None else f"sys.exit({code!r})"


@contextlib.contextmanager
def user_code(where: str, importing: bool = False) -> Iterator[None]:
    """Run the user's code named by ``where`` (``model.py: datasets()``, or ``model.py:
    importing it`` with ``importing``); what it raises becomes a WorkloadError."""
    interrupted = _CtrlC()
    with interrupted.watching():
        try:
            yield
        except WorkloadError:
            raise
        except SystemExit as exc:
            hint = ("put script code under `if __name__ == \"__main__\":`" if importing
                    else "a contract function returns, or raises an exception")
            raise WorkloadError(
                f"{where} called {describe_exit(exc)}: model.py must not end the process (advisor "
                f"imports it and calls its functions; {hint})\n{user_frames(exc)}") from None
        except KeyboardInterrupt as exc:
            if interrupted.seen:
                raise
            raise WorkloadError(f"{where} raised KeyboardInterrupt itself (not a Ctrl-C)\n"
                                + user_frames(exc)) from None
        except Exception as exc:  # user code: any exception is a contract problem
            raise WorkloadError(f"{where} raised {type(exc).__name__}: {exc}\n{user_frames(exc)}") from None


class _CtrlC:
    """Tells a real Ctrl-C (SIGINT) from a KeyboardInterrupt raised by code: while
    watching, SIGINT is noted, then handled as before."""

    def __init__(self) -> None:
        self.seen = False

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach only the main thread
            return
        previous = signal.getsignal(signal.SIGINT)

        def noted(signum: int, frame: Any) -> None:
            self.seen = True
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:  # the default, or a handler set outside Python
                signal.default_int_handler(signum, frame)

        signal.signal(signal.SIGINT, noted)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

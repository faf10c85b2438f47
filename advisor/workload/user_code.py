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
    path = _resolved(filename)
    return path is not None and not path.startswith(_OURS) and not path.startswith(_LIBRARIES)


def _resolved(filename: str) -> str | None:
    """A frame's file as a resolved path; None for <frozen ...>, <string> or an unreadable one."""
    if filename.startswith("<"):
        return None
    try:
        return str(Path(filename).resolve())
    except (OSError, RuntimeError):
        return None


def user_frames(exc: BaseException) -> str:
    """The traceback of ``exc`` in the user's frames (file, line, its text), one line for
    where inside a library it was raised (torch's own module, say), then the exception
    itself; advisor's frames are never shown."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = traceback.StackSummary.from_list([f for f in frames if is_user_file(f.filename)])
    lines = ["Traceback (the workload's own frames):\n", *mine.format()] if mine else []
    # where in a library it was raised, in one line; advisor's own frames never show
    library = [f for f in frames if not is_user_file(f.filename) and not _is_ours(f.filename)]
    if library and not is_user_file(frames[-1].filename):
        deepest = library[-1]
        lines.append(f"  (raised inside {_short(deepest.filename)}, line {deepest.lineno}, in {deepest.name})\n")
    if not lines:  # raised by advisor's own code for the contract (the default loss, say): its message says it all
        return ""
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip()


def _is_ours(filename: str) -> bool:
    path = _resolved(filename)
    return path is not None and path.startswith(_OURS)


def _short(filename: str) -> str:
    """A library file's path from its package (``torch/nn/functional.py``)."""
    for root in sorted(_LIBRARIES, key=len, reverse=True):  # the deepest root: site-packages before lib/
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
                f"imports it and calls its functions; {hint})\n{user_frames(exc)}".rstrip()) from None
        except KeyboardInterrupt as exc:
            if interrupted.seen:
                raise
            raise WorkloadError((f"{where} raised KeyboardInterrupt itself (not a Ctrl-C)\n"
                                 + user_frames(exc)).rstrip()) from None
        except Exception as exc:  # user code: any exception is a contract problem
            hint = (" (advisor imports model.py as a file of its own, not as part of a package: import what is "
                    "beside it by its own name, `from nets import Net`, or a package by its full name)"
                    if importing and isinstance(exc, ImportError) and "relative import" in str(exc) else "")
            raise WorkloadError(f"{where} raised {type(exc).__name__}: {exc}{hint}\n{user_frames(exc)}".rstrip()) \
                from None


IMPORT_TIMEOUT_S = 300.0  # default of $ADVISOR_IMPORT_TIMEOUT
# default of $ADVISOR_PREFLIGHT_TIMEOUT: model() and datasets() in the preflight, where the first
# run downloads weights and data (30 minutes: a few GB on a slow link)
PREFLIGHT_TIMEOUT_S = 1800.0
IMPORT_HINT = ("load data and weights in datasets() and model() rather than at import, or set "
               "$ADVISOR_IMPORT_TIMEOUT (seconds) to wait longer")


def import_limit() -> float:
    """Seconds model.py's import may take in the driver ($ADVISOR_IMPORT_TIMEOUT, default 300)."""
    return _seconds("ADVISOR_IMPORT_TIMEOUT", IMPORT_TIMEOUT_S)


def preflight_limit() -> float:
    """Seconds each of model() and datasets() may take in the preflight, downloads included
    ($ADVISOR_PREFLIGHT_TIMEOUT, default 1800)."""
    return _seconds("ADVISOR_PREFLIGHT_TIMEOUT", PREFLIGHT_TIMEOUT_S)


def _seconds(variable: str, default: float) -> float:
    import os

    text = os.environ.get(variable, "")
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if not value > 0:
        raise WorkloadError(f"${variable} is {text!r}: expected a positive number of seconds")
    return value


@contextlib.contextmanager
def time_limit(seconds: float, where: str, hint: str = IMPORT_HINT) -> Iterator[None]:
    """Stop the code run inside after ``seconds`` with a WorkloadError naming ``where``, the
    line of the user's code it was at and ``hint`` (a model.py whose import never ends, or a
    download that hangs, would hang advisor with no output). Only in the main thread
    (signals reach it alone); elsewhere the code runs unbounded."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        at = next((f for f, _ in traceback.walk_stack(frame) if is_user_file(f.f_code.co_filename)), None)
        line = ""
        if at is not None:
            import linecache

            text = linecache.getline(at.f_code.co_filename, at.f_lineno).strip()
            line = f" (it was at {at.f_code.co_filename}, line {at.f_lineno}: {text})"
        raise WorkloadError(f"{where} did not finish within {seconds:.0f} s{line}; {hint}")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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

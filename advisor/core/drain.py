"""A pipe drained by a thread: what a process writes to its stdout and stderr (print,
logging, C code writing to the file descriptors) kept as a short tail and, optionally, in
a log file of bounded size. Trial processes write into one (advisor/trial/output.py), and
the driver's preflight runs model.py's code with its output captured by one
(``captured_here``), so that no amount of output floods a console or a disk.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TAIL_BYTES = 4096  # what a summary (and a failure message) keeps
_PIPE_BYTES = 1 << 20


class OutputDrain:
    """A pipe whose write end becomes a process's stdout and stderr, and a thread reading
    it into a log file of at most ``limit`` bytes (two rotating halves) and a short tail.

    Args:
        path: the log file (``None``: keep the tail only, nothing on disk).
        limit: bytes of output kept on disk.
        tail: bytes of output kept in memory for ``summary()``.
    """

    def __init__(self, path: Path | None, limit: int = 1 << 20, tail: int = TAIL_BYTES) -> None:
        self.path, self.limit, self.tail_limit = path, max(limit, 2), tail
        self.read_fd, self.write_fd = os.pipe()
        _grow(self.write_fd)
        self.total = 0
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._gone = False  # finish() stopped waiting: a writer left behind holds the pipe
        self._thread = threading.Thread(target=self._drain, name="advisor-output-drain", daemon=True)
        self._thread.start()

    def feed(self, data: bytes) -> None:
        """Keep ``data`` in the tail and count it (what is written into the pipe goes to disk)."""
        with self._lock:
            self.total += len(data)
            self._tail += data[-self.tail_limit:]
            del self._tail[:-self.tail_limit]

    def close_writer(self) -> None:
        """Close this process's copy of the write end (after the writers have their own)."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def finish(self, grace_s: float = 2.0) -> dict[str, Any]:
        """Read what is left (the writers have exited, or stop within ``grace_s``) and stop;
        a process still holding the pipe open (one model.py left behind) then gets EPIPE."""
        self.close_writer()
        self._stop.set()
        self._thread.join(grace_s)
        self._gone = True  # still writing: the thread stops after its current chunk
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """``bytes`` written so far, the ``log`` file (host:path) and the ``tail`` as text."""
        with self._lock:
            tail, total = bytes(self._tail), self.total
        where = f"{socket.gethostname()}:{self.path}" if self.path is not None else None
        return {"bytes": total, "log": where, "tail": printable_tail(tail, total > len(tail))}

    def _drain(self) -> None:
        log = _Rotating(self.path, self.limit) if self.path is not None else None
        try:
            while not self._gone:
                ready, _, _ = select.select([self.read_fd], [], [], 0.2)
                if not ready:
                    if self._stop.is_set():
                        break
                    continue
                chunk = os.read(self.read_fd, _PIPE_BYTES)
                if not chunk:
                    break  # every writer closed it
                self.feed(chunk)
                if log is not None:
                    log.write(chunk)
        except OSError:
            pass  # the log's disk is full or gone: the tail is still kept
        finally:
            os.close(self.read_fd)
            if log is not None:
                log.close()


class _Rotating:
    """A file of at most ``limit`` bytes in two halves: ``path`` and ``path.1`` before it."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path, self.half = path, max(1, limit // 2)
        self.fh = open(path, "wb")  # noqa: SIM115 (closed by close())
        self.size = 0

    def write(self, chunk: bytes) -> None:
        chunk = chunk[-self.half:]
        if self.size + len(chunk) > self.half:
            self.fh.close()
            os.replace(self.path, f"{self.path}.1")
            self.fh = open(self.path, "wb")  # noqa: SIM115
            self.size = 0
        self.fh.write(chunk)
        self.fh.flush()
        self.size += len(chunk)

    def close(self) -> None:
        self.fh.close()


def printable_tail(data: bytes, cut: bool) -> str:
    """The tail as text a terminal can show: undecodable bytes and control characters
    (other than newlines and tabs) become '?'; a line cut at the start is dropped."""
    text = data.decode("utf-8", "replace")
    if cut and "\n" in text[:-1]:
        text = text[text.index("\n") + 1:]
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text).rstrip()


def describe_tail(output: dict[str, Any], who: str = "its output", lines: int = 20, chars: int = 2000) -> str:
    """'WHO ended with (N bytes in all; log: ...):' and the last ``lines`` lines (at most
    ``chars`` characters) of a ``summary()``, or that nothing was printed."""
    log = output.get("log")
    tail = "\n".join(output["tail"][-chars:].splitlines()[-lines:])
    if not tail:
        return "it printed nothing" + (f" (log: {log})" if log else "")
    return f"{who} ended with ({output['bytes']:,} bytes in all{f'; log: {log}' if log else ''}):\n{tail}"


def redirect_into(fd: int) -> None:
    """In the trial's (or a rank's) process: stdout and stderr now write into ``fd``."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    with contextlib.suppress(Exception):  # a crash's tail keeps the last lines printed
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]


@contextlib.contextmanager
def captured_here(path: Path | None, limit: int = 1 << 20) -> Iterator[OutputDrain]:
    """This process's stdout and stderr into a drain while the block runs; restored after.

    Both the file descriptors (C code, ``os.write``) and Python's ``sys.stdout`` and
    ``sys.stderr`` (which a test runner may have replaced) are captured; whatever writes to
    the Python streams taken during the block (a logging handler made then, a thread
    model.py started) writes into nothing after it. So do ``print`` calls from threads
    started during the block that outlive it (``sys.stdout`` and ``sys.stderr`` then route
    by thread); their writes to the file descriptors themselves cannot be told apart.
    """
    drain = OutputDrain(path, limit)
    sink = _Sink(drain)
    saved = os.dup(1), os.dup(2)
    streams = sys.stdout, sys.stderr
    before = set(threading.enumerate())
    redirect_into(drain.write_fd)
    sys.stdout = sys.stderr = sink
    try:
        yield drain
    finally:
        sink.close_sink()
        left = frozenset(t for t in threading.enumerate() if t not in before and t.is_alive())
        sys.stdout, sys.stderr = (_Router(s, left) if left else s for s in streams)
        redirect_into(saved[0])
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        drain.finish()


class _Sink(io.TextIOBase):
    """A text stream writing into a drain's pipe, in order with what is written to the file
    descriptors (and into nothing once the capture is over: ``close_sink``)."""

    def __init__(self, drain: OutputDrain) -> None:
        self.fd = drain.write_fd
        self.lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1  # redirected into the same pipe while the capture lasts

    def write(self, text: str) -> int:
        with self.lock:
            if self.fd >= 0:
                data = text.encode("utf-8", "replace")
                while data:
                    data = data[os.write(self.fd, data):]
        return len(text)

    def close_sink(self) -> None:
        with self.lock:  # no write is under way into the pipe once it is closed
            self.fd = -1


def _grow(fd: int) -> None:
    """A 1 MiB pipe (Linux; 64 KiB otherwise): a burst of output does not block the writer."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
    except (ImportError, OSError):
        pass


class _Router:
    """``sys.stdout`` or ``sys.stderr`` that drops the writes of some threads (ones model.py
    started during a capture, still running) and passes on everyone else's."""

    def __init__(self, stream: Any, dropped: frozenset[threading.Thread]) -> None:
        self._stream, self._dropped = stream, dropped

    def write(self, text: str) -> int:
        if threading.current_thread() in self._dropped:
            return len(text)
        return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

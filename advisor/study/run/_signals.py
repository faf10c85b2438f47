"""Ctrl-C and SIGTERM while a study runs: handled by the study (it stops gracefully)
instead of by Python's default (KeyboardInterrupt anywhere)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def stopped_by_signals(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """SIGINT and SIGTERM call ``handler`` while inside; the previous handlers come back
    after. In a background thread (the live explorer runs the study in one) nothing is
    installed: signals reach only the main thread, whose owner stops the study itself."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    for s in previous:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)

"""Why a running study stops now: one small object shared by everything that waits on a
measurement (the driver loop, ``run_one``, the baseline's watch, paired confirmation, the
extra seeds), instead of a callable threaded through each of them.

The user's ``Stop`` is set once (Ctrl-C, SIGTERM, ``Tuner.stop()`` from another thread:
``request``); ``by(end, why)`` gives a view of it that also stops once the monotonic clock
reaches ``end`` (the study's --budget, for the steps after the search). Requesting is one
attribute write, as safe from a signal handler or another thread as the flag it replaces.
"""

from __future__ import annotations

import time


class Stop:
    """``reason``: why to stop now, or None to go on; the first reason requested stays."""

    def __init__(self) -> None:
        self._requested: str | None = None

    @property
    def reason(self) -> str | None:
        return self._requested

    @property
    def halted(self) -> bool:
        """Whether to stop now (``reason`` is not None)."""
        return self.reason is not None

    def request(self, reason: str) -> bool:
        """Stop for ``reason``. False (and the first reason kept) if a stop was requested already."""
        if self._requested is not None:
            return False
        self._requested = reason
        return True

    def by(self, end: float, why: str) -> Stop:
        """This stop, and also once ``time.monotonic()`` reaches ``end`` (with ``why``);
        a request on the view is a request on this one."""
        return _Until(self, end, why)


class _Until(Stop):
    """``Stop.by``: the user's stop first, then the time."""

    def __init__(self, root: Stop, end: float, why: str) -> None:
        super().__init__()
        self._root, self._end, self._why = root, end, why

    @property
    def reason(self) -> str | None:
        requested = self._root.reason
        if requested is None and time.monotonic() >= self._end:
            return self._why
        return requested

    def request(self, reason: str) -> bool:
        return self._root.request(reason)

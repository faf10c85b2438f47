"""The ``Executor`` protocol: what the Tuner needs of whatever runs its trials.

``RayExecutor`` (advisor/runner/ray_executor.py) runs them on Ray; the benchmarks'
``ReplayExecutor`` answers them from a recorded grid. A runner is started by its owner
before use (``RayExecutor.start()``) and shut down after.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

from advisor.core.results import TrialPayload, TrialResult
from advisor.core.stop import Stop

# How long a trial may take to start: a fresh Ray worker and the fork server in it import torch
# and the model's libraries (seconds; more under load), as after a timed-out trial's worker was killed.
START_ALLOWANCE_S = 60.0


class Handle(Protocol):
    """A submitted trial: its number and when it was submitted (``time.monotonic()``).
    A handle may also have ``started_file``: a path the trial's process creates as it
    starts (``TrialPayload.started_file``), from which its timeout counts (``overran``)."""

    number: int
    submitted: float


RAN_LONGER, NOT_STARTED = "ran longer", "not started"


def overran(handle: Handle, timeout: float) -> str | None:
    """Has the trial run longer than ``timeout`` seconds? Counted from its process's start
    where the handle can tell (its ``started_file``, on the trial's machine), so that the
    start of a fresh worker is not charged to it; until it starts, from its submission
    plus ``START_ALLOWANCE_S``. Without a ``started_file``, from its submission.

    Returns:
        None while within its time, else ``RAN_LONGER`` or ``NOT_STARTED`` (for
        ``timeout_failure``).
    """
    since_submission = time.monotonic() - handle.submitted
    started_file = getattr(handle, "started_file", None)
    if not started_file:
        return RAN_LONGER if since_submission > timeout else None
    try:
        started = os.stat(started_file).st_mtime
    except OSError:  # not started yet
        return NOT_STARTED if since_submission > timeout + START_ALLOWANCE_S else None
    return RAN_LONGER if time.time() - started > timeout else None


def timeout_failure(why: str, timeout: float, limit: str) -> TrialResult:
    """The ``timeout`` result of a trial that ``overran`` said ``why`` of; ``limit`` names
    the limit in the caller's words ("the trial timeout (12 s)")."""
    if why == NOT_STARTED:
        return TrialResult.failed("timeout", f"the trial's process had not started {timeout + START_ALLOWANCE_S:.0f} s "
                                             f"after it was submitted ({limit} from its start, plus "
                                             f"{START_ALLOWANCE_S:.0f} s for its Ray worker and fork server to start)")
    return TrialResult.failed("timeout", f"the trial ran longer than {limit}")


class Executor(Protocol):
    """Runs trials and reports their results.

    Attributes:
        device: "cpu" or "cuda": what a trial runs on.
        slots: how many trials (CPU) or GPUs (CUDA) run at once.
        resources: what one trial gets, for the user to read.
        startup_s: how long starting the runner took.
    """

    device: str
    slots: int
    resources: dict[str, Any]
    startup_s: float

    def submit(self, number: int, payload: TrialPayload) -> Handle:
        """Start trial ``number``; returns at once."""
        ...

    def wait(self, handles: Sequence[Handle], timeout: float) -> list[tuple[Handle, TrialResult]]:
        """The trials among ``handles`` that finished within ``timeout`` seconds, with their results."""
        ...

    def cancel(self, handle: Handle) -> None:
        """Stop a trial that is still running (its result is not awaited)."""
        ...

    def shutdown(self) -> None:
        """Release what the runner holds (a no-op for a runner that holds nothing)."""
        ...


def run_one(executor: Executor, number: int, payload: TrialPayload, timeout: float,
            stop: Stop | None = None) -> TrialResult:
    """Run one trial and wait for it (cancelled and recorded as ``timeout`` past
    ``timeout`` seconds; as ``cancelled`` as soon as ``stop`` has a reason). For
    callers that measure one configuration at a time."""
    handle = executor.submit(number, payload)
    while True:
        done = executor.wait([handle], timeout=min(0.5, timeout))
        if done:
            return done[0][1]
        reason = stop.reason if stop is not None else None
        if reason is not None:
            executor.cancel(handle)
            return TrialResult.failed("cancelled", f"cancelled: {reason}")
        why = overran(handle, timeout)
        if why:
            executor.cancel(handle)
            return timeout_failure(why, timeout, f"{timeout:.0f} s")

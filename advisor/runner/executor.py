"""The ``Executor`` protocol: what the Tuner needs of whatever runs its trials.

``RayExecutor`` (advisor/runner/ray_executor.py) runs them on Ray; the benchmarks'
``ReplayExecutor`` answers them from a recorded grid. A runner is started by its owner
before use (``RayExecutor.start()``) and shut down after.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from advisor.core.results import TrialPayload, TrialResult
from advisor.core.stop import Stop


class Handle(Protocol):
    """A submitted trial: its number and when it was submitted (``time.monotonic()``)."""

    number: int
    submitted: float


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
        if time.monotonic() - handle.submitted > timeout:
            executor.cancel(handle)
            return TrialResult.failed("timeout", f"the trial ran longer than {timeout:.0f} s")

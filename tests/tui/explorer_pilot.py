"""Helpers for driving the explorer in tests: wait for a condition or until its storage
reads are in, and count the calls that reach a real storage."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

# the RDBStorage methods besides the public ones that go to the database
_PRIVATE_READS = ("_get_trials", "_create_new_trial", "_set_trial_param", "_get_best_trial_id")


async def until(pilot: Any, condition: Any, timeout: float = 30.0, interval: float = 0.05,
                what: str = "the explorer") -> None:
    """Wait until ``condition()`` holds, letting the app run between checks."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(interval)
        await pilot.pause()


async def loaded(pilot: Any, timeout: float = 30.0) -> None:
    """Wait until the main screen's reads (worker threads) are in and shown."""
    deadline = time.monotonic() + timeout
    while True:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if not getattr(pilot.app.screen, "loading", False):
            return
        assert time.monotonic() < deadline, "the explorer's read did not finish"
        await asyncio.sleep(0.02)


class StorageCalls:
    """Wraps a real storage's methods on the instance (Optuna still sees the RDBStorage it
    is, its cache included) and records each call that reaches it: the method, the thread
    it ran in, and how many trials a trial read returned."""

    def __init__(self, storage: Any) -> None:
        self.calls: list[tuple[str, int]] = []
        self.trials_read = 0
        for name in dir(type(storage)):
            if name.startswith("__") or (name.startswith("_") and name not in _PRIVATE_READS):
                continue
            method = getattr(storage, name)
            if callable(method):
                setattr(storage, name, self._wrap(name, method))

    def _wrap(self, name: str, method: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, threading.get_ident()))
            result = method(*args, **kwargs)
            if name in ("_get_trials", "get_all_trials"):
                self.trials_read += len(result)
            elif name == "get_trial":
                self.trials_read += 1
            return result

        return counted

    def names(self) -> Counter[str]:
        return Counter(name for name, _ in self.calls)

    def reset(self) -> None:
        self.calls.clear()
        self.trials_read = 0


class FakeLiveRun:
    """A stand-in for the tuner as the live explorer sees it (advisor.tui.app.LiveRun): the
    test plays the tuner's thread, sending its events from another thread, as the tuner does."""

    def __init__(self, storage: Any, total: int = 50, done: int = 0) -> None:
        self.total, self.done, self.running = total, done, True
        self.storage = storage
        self.on_event: Any = None

    def start(self, on_event: Any) -> None:
        self.on_event = on_event

    def stop(self, reason: str) -> None:
        self.running = False

    def eta_s(self) -> float | None:
        return None

    def send(self, *events: Any) -> None:
        thread = threading.Thread(target=lambda: [self.on_event(e) for e in events])
        thread.start()
        thread.join()

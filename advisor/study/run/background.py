"""A study run in a background thread, for a UI that watches it (the live explorer).
UI-free: the UI passes a listener, called in the study's thread for every event."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from advisor.core.events import Event, Finished, Listener, Started, Stopped, ignore
from advisor.study.run.tuner import Tuner

if TYPE_CHECKING:
    from advisor.study.run.plan import StudyPlan
    from advisor.study.run.tuner import StudyOutcome


class BackgroundTune:
    """Runs a ``Tuner`` of ``plan`` in a thread once ``start`` is called; the tuner (built
    here, its events to this object) is ``tuner``: call its ``start_executor()`` first, in
    the main thread. ``also`` receives every event too.

    ``total`` and ``done`` count the trials that count towards ``--trials``; ``eta_s()``
    extrapolates from the trials finished so far; a final ``Stopped`` event carries the
    stop reason or the error. ``join()`` returns the outcome or re-raises the error.
    """

    def __init__(self, plan: StudyPlan, also: Listener | None = None) -> None:
        self.tuner, self.also = Tuner(plan, on_event=self._event), also
        self.total = plan.options.trials
        self.done = 0
        self.walls: list[float] = []
        self.storage: Any = None  # the tuner's storage, once it has opened it
        self.outcome: StudyOutcome | None = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._listener: Listener = ignore

    def start(self, on_event: Listener) -> None:
        self._listener = on_event
        self._thread = threading.Thread(target=self._run, name="advisor-tune", daemon=True)
        self._thread.start()

    def _event(self, event: Event) -> None:
        if isinstance(event, Started):
            self.storage = self.tuner.storage
            self.done = event.counted
        elif isinstance(event, Finished) and event.record.counted:
            self.done += 1
            self.walls.append(event.wall_s)
        if self.also is not None:
            self.also(event)
        self._listener(event)

    def _run(self) -> None:
        try:
            self.outcome = self.tuner.run()
        except BaseException as exc:  # handed to join(), which re-raises it in the caller's thread
            self.error = exc
        self._event(Stopped(self.tuner.stop_reason, f"{type(self.error).__name__}: {self.error}" if self.error else None))

    def stop(self, reason: str) -> None:
        self.tuner.stop(reason)

    def eta_s(self) -> float | None:
        if not self.walls:
            return None
        slots = getattr(self.tuner.executor, "slots", 1) or 1
        recent = self.walls[-10:]
        return max(0, self.total - self.done) * (sum(recent) / len(recent)) / slots

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> StudyOutcome:
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise self.error
        assert self.outcome is not None, "the study was never started"
        return self.outcome

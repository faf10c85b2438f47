"""A study run in a background thread, for a UI that watches it (the live explorer).
UI-free: the UI passes a callback, called in the study's thread for every event."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from advisor import storage as st

if TYPE_CHECKING:
    import optuna

    from advisor.study import Tuner

Listener = Callable[[str, dict[str, Any]], None]


class BackgroundTune:
    """Runs ``tuner.run()`` in a thread once ``start`` is called.

    ``total`` and ``done`` count measured trials (as ``--trials`` does), ``eta_s()``
    extrapolates from the trials finished so far; a final ``stopped`` event carries the
    stop reason or the error. ``join()`` returns the study or re-raises the error.
    """

    def __init__(self, tuner: Tuner, also: Listener | None = None) -> None:
        self.tuner, self.also = tuner, also
        self.total = tuner.o.trials
        self.done = 0
        self.walls: list[float] = []
        self.storage: Any = None  # the tuner's storage, once it has opened it
        self.study: optuna.Study | None = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._listener: Listener = lambda kind, data: None

    def start(self, on_event: Listener) -> None:
        self._listener = on_event
        self.tuner.emit = self._event
        self._thread = threading.Thread(target=self._run, name="advisor-tune", daemon=True)
        self._thread.start()

    def _event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "ray":
            self.storage = self.tuner.storage
            self.done = sum(1 for t in self.tuner.storage.get_all_trials(self._study_id()) if st.measured(t))
        elif kind == "finished":
            if st.measured(data["trial"]):
                self.done += 1
                self.walls.append(data["wall_s"])
        if self.also is not None:
            self.also(kind, data)
        self._listener(kind, data)

    def _study_id(self) -> int:
        return self.tuner.storage.get_study_id_from_name(self.tuner.study_name)

    def _run(self) -> None:
        try:
            self.study = self.tuner.run()
        except BaseException as exc:  # handed to join(), which re-raises it in the caller's thread
            self.error = exc
        data = {"reason": self.tuner.stop_reason,
                "error": f"{type(self.error).__name__}: {self.error}" if self.error else None}
        if self.also is not None:
            self.also("stopped", data)
        self._listener("stopped", data)

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

    def join(self) -> optuna.Study:
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise self.error
        assert self.study is not None, "the study was never started"
        return self.study


"""What a running study reports, as typed events. The Tuner (advisor/study) and the
search strategy (advisor/search) emit them; the console output, the live explorer and the
benchmarks consume the same types. They live here, below both, because the strategy
reports the proposals it records without running (skipped, duplicate).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.objectives import Versus
from advisor.core.pairs import Confirmation
from advisor.core.results import TrialResult
from advisor.core.stored import TrialRecord


@dataclass(frozen=True)
class Started:
    """The executor is up and the study is open: how long the executor took to start,
    how many trials run at once and what each gets, and how many trials of a resumed
    study already count towards its total."""

    startup_s: float
    slots: int
    resources: dict[str, Any]
    counted: int = 0


@dataclass(frozen=True)
class Note:
    """Something the user should read (a resumed study, the next strategy step, ...)."""

    text: str


@dataclass(frozen=True)
class TimeoutSet:
    """The per-trial timeout, decided once the baseline's duration is known."""

    trial_timeout_s: float


@dataclass(frozen=True)
class TimeLimit:
    """The study has a time limit (--budget, or --timeout): it started at ``started``
    (``time.monotonic()`` in the driver's process, where the listeners run) and ``flag``
    ends it ``limit_s`` seconds later. The console's lines and the live explorer show the
    time elapsed and left (``advisor.core.units.clock_text``)."""

    started: float
    limit_s: float
    flag: str

    def text(self, now: float, with_flag: bool = False) -> str:
        """'1 min 05 s elapsed, 28 min 55 s left' (``with_flag``: '... of --budget 30 min 00 s')."""
        from advisor.core.units import clock_text

        return clock_text(now - self.started, self.limit_s, self.flag if with_flag else None)


@dataclass(frozen=True)
class Submitted:
    number: int
    config: TrialConfig


@dataclass(frozen=True)
class Finished:
    """A trial ran and its result is stored (``record`` is what storage now holds)."""

    number: int
    config: TrialConfig
    result: TrialResult
    wall_s: float
    record: TrialRecord
    versus: Versus | None = None  # against the latest baseline measurement (unconfirmed)


@dataclass(frozen=True)
class Probed:
    """Two-stage evaluation: a configuration's probe (speed and memory) is in; whether it
    needs a training run is decided later (a ``Finished`` follows either way)."""

    number: int
    config: TrialConfig
    result: TrialResult
    wall_s: float
    versus: Versus | None = None  # against the latest baseline measurement (unconfirmed), metric unknown


@dataclass(frozen=True)
class Skipped:
    """A proposal recorded without running: it cannot work, or would run out of memory."""

    number: int
    config: TrialConfig
    reason: str


@dataclass(frozen=True)
class Duplicate:
    """A proposal answered from an earlier trial with the same configuration."""

    number: int
    of: int


@dataclass(frozen=True)
class Cancelled:
    number: int


@dataclass(frozen=True)
class Paired:
    """A pair of paired confirmation ran (or a trial's confirmation stopped): the trial's
    confirmation as it now stands, stored."""

    number: int
    config: TrialConfig
    confirmation: Confirmation
    wall_s: float


@dataclass(frozen=True)
class Stopped:
    """The study stopped (a background study's last event): why, or the error."""

    reason: str | None
    error: str | None = None


Event = (Started | Note | TimeoutSet | TimeLimit | Submitted | Probed | Finished | Skipped | Duplicate | Cancelled
         | Paired | Stopped)
Listener = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The listener used when nobody listens."""


def chain(*listeners: Listener) -> Listener:
    """One listener that hands each event to ``listeners`` in turn (the console, then the
    experiment trackers, ...)."""

    def each(event: Event) -> None:
        for listener in listeners:
            listener(event)

    return each

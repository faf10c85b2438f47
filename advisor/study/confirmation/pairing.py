"""Rounds of paired runs against the baseline: the engine under paired confirmation
(``advisor tune``'s last step, ``advisor confirm``) and ``advisor measure``.

A round runs the baseline, then each open candidate, then the baseline again; the next
round starts with a fresh run of the baseline, so no run serves two rounds and each
candidate's pairs are independent of one another (``advisor.core.intervals`` treats
them so). The candidates' order is reversed every other round:

    A  C1 C2 C3  A | A  C3 C2 C1  A | A  C1 C2 C3  A ...

With one candidate two rounds are A C A A C A: around the rounds' boundary the baseline
runs twice in a row, as in ABBA order. Each candidate's pair compares its run with the
baseline interpolated (geometrically) at the candidate's moment between its round's two
baseline runs, so a drift that is linear over the round cancels; no candidate always
runs right after the baseline. A round of k candidates costs k + 2 runs (the candidates
of one round share its two baseline runs: their pairs are correlated with each other,
never with their own earlier pairs). Every run is a probe (timing and peak memory, in a
fresh trial process, one at a time) and is judged by the noise sentinel: a disturbed run
is run again (at most ``RETRIES`` times); when every try was disturbed, the least
disturbed one is kept and the pair says so (``Pair.disturbed``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.errors import TrialFailed
from advisor.core.events import Listener, Note
from advisor.core.interference import rerun_reason
from advisor.core.noise import SentinelJudge, moved_unscored, off_by, reading_of
from advisor.core.pairs import Confirmation, Pair, interpolate
from advisor.core.results import TrialPayload, TrialResult, TrialSettings
from advisor.core.stop import Stop
from advisor.core.units import first_line
from advisor.runner.executor import Executor, run_one

PROBE_TIMING_S = 0.75  # a probe times steps for this long at most: the pairs, not the steps, measure the spread
RETRIES = 2  # a run on a disturbed machine is run again at most this often


def probe_settings(settings: TrialSettings) -> TrialSettings:
    """The study's settings for a probe: timed steps and peak memory only."""
    return replace(settings, part="probe", max_timing_s=min(settings.max_timing_s, PROBE_TIMING_S))


@dataclass
class Candidate:
    """A configuration being paired: ``label`` names it in messages (``trial 7``)."""

    label: str
    config: TrialConfig
    confirmation: Confirmation


@dataclass(frozen=True)
class _Run:
    result: TrialResult
    at: float  # the middle of the run, time.monotonic()
    disturbed: str = ""  # why the sentinel called it disturbed, when it was kept all the same


class Rounds:
    """Runs rounds until every candidate's confirmation is done (or ``stop`` is halted).

    Args:
        executor: runs the probes; workload: the loaded model.py; settings: the study's.
        judge: the sentinel judge (the study's readings so far).
        target, max_pairs: when a candidate's pairing stops (``Confirmation.settle``).
        on_pair: called after each round for each candidate that got a pair (or failed),
            with the round's wall time per candidate.
        stop_early: why a candidate needs no more pairs, as (status, why): "dominated" (beaten
            beyond its interval) or "settled" (its intervals decide the picks); None to go on
            (optional).
        sitting: the sitting the new pairs belong to (``advisor confirm`` on a stored
            study: one after the latest stored).
    """

    def __init__(self, executor: Executor, workload: Any, settings: TrialSettings, judge: SentinelJudge,
                 target: float, max_pairs: int, trial_timeout: float, stop: Stop,
                 on_event: Listener, on_pair: Callable[[Candidate, float], None],
                 stop_early: Callable[[Candidate, list[Candidate]], tuple[str, str] | None] | None = None,
                 sitting: int = 0) -> None:
        self.executor, self.workload, self.settings = executor, workload, probe_settings(settings)
        self.judge, self.target, self.max_pairs = judge, target, max_pairs
        self.trial_timeout, self.stop, self.emit = trial_timeout, stop, on_event
        self.on_pair, self.stop_early, self.sitting = on_pair, stop_early, sitting
        self._numbers = itertools.count(1_000_000)  # executor handle numbers, apart from trial numbers
        self._told: set[str] = set()  # candidates already told that the target is out of reach

    def run(self, baseline: TrialConfig, candidates: list[Candidate]) -> None:
        """Pair the candidates against ``baseline`` until done.

        Raises:
            TrialFailed: a run of the baseline itself failed (nothing can be paired).
        """
        for round_number in itertools.count():
            active = [c for c in candidates if not c.confirmation.done]
            if not active or self.stop.halted:
                return
            order = active if round_number % 2 == 0 else active[::-1]
            started = time.monotonic()  # the round's wall time, both baseline runs included
            opening = self._run(baseline, "the baseline")  # never the previous round's closing run
            if opening is None:
                return
            runs = []
            for c in order:
                run = self._run(c.config, c.label)
                if self.stop.halted:
                    return
                if run is not None and not run.result.ok:
                    r = run.result
                    c.confirmation.status = "failed"
                    c.confirmation.note = f"a probe failed [{r.failure_class}] {first_line(r.failure_message, 1000)}"
                    run = None
                runs.append((c, run))
            closing = self._run(baseline, "the baseline")
            if closing is None:
                return
            for c, run in runs:
                if run is not None:
                    pair = _pair(opening, closing, run, self.sitting, resident=self.settings.device == "cpu")
                    off = None if pair.disturbed else c.confirmation.outlier(pair)
                    if off:  # a run disturbed beyond what its sentinel and blocks showed: kept, not counted
                        pair = replace(pair, disturbed=f"far off its other pairs: {off}")
                        self.emit(Note(f"pairing {c.label}: a pair left out of its figures: {off} (a run of it "
                                       "disturbed beyond what its sentinel and blocks showed)"))
                    c.confirmation.pairs.append(pair)
                    c.confirmation.settle(self.target, self.max_pairs, self.sitting)
                    self._say_if_out_of_reach(c)
            for c, _ in runs:
                stop = None if self.stop_early is None or c.confirmation.done else self.stop_early(c, candidates)
                if stop:
                    c.confirmation.status, c.confirmation.note = stop
                self.on_pair(c, (time.monotonic() - started) / len(runs))

    def _say_if_out_of_reach(self, c: Candidate) -> None:
        """Once per candidate, as soon as its first stage shows it: the target cannot be
        met within the cap (pairing goes on to the cap, which still narrows the interval)."""
        if c.label in self._told or c.confirmation.done:
            return
        why = c.confirmation.out_of_reach(self.target, self.max_pairs, self.sitting)
        if why:
            self._told.add(c.label)
            self.emit(Note(f"pairing {c.label}: {why}"))

    def _run(self, config: TrialConfig, label: str) -> _Run | None:
        """One probe, run again while the sentinel shows a disturbed machine (the least
        disturbed try is kept, marked, when every try was); None when stopped. A failed
        baseline raises TrialFailed; a failed candidate is returned."""
        tries: list[tuple[float, _Run]] = []
        for attempt in range(RETRIES + 1):
            started = time.monotonic()
            payload = TrialPayload.of(self.workload, config, self.settings)
            result = run_one(self.executor, next(self._numbers), payload, self.trial_timeout, self.stop)
            if self.stop.halted:
                return None
            if not result.ok:
                if label == "the baseline":
                    raise TrialFailed(f"a run of the baseline failed during paired confirmation "
                                      f"[{result.failure_class}]: {first_line(result.failure_message, 1000)}")
                return _Run(result, (started + time.monotonic()) / 2)
            reading, median = reading_of(result.telemetry), self.judge.median
            # the sentinel against the study's readings, or the run's own evidence relative to itself and the
            # study: too few of its blocks were clean by the study's limit (a review's pair read 0.06x with the
            # sentinel at its median: kept, it made the interval 0.12-4.60), or, where no block was scored, its
            # sentinel moved while it ran (noise.moved_unscored: where they were, the ends' readings only
            # discarded good runs). Not a busy machine as such: on one busy throughout, the baseline around it
            # is as busy, the ratio holds, and a run again is as busy (the suite's two workers made every pair
            # run three times)
            why = (self.judge.disturbed(reading) or rerun_reason(result.telemetry)
                   or moved_unscored(result.telemetry))
            self.judge.add(reading)
            run = _Run(result, (started + time.monotonic()) / 2, why or "")
            if why is None:
                return run
            tries.append((off_by(reading, median) if reading and median else 1.0, run))  # type: ignore[arg-type]
            if attempt < RETRIES:
                self.emit(Note(f"pairing {label}: a run was discarded ({why}); running it again"))
        factor, cleanest = min(tries, key=lambda t: t[0])
        self.emit(Note(f"pairing {label}: every try was disturbed; keeping the least disturbed one "
                       f"({factor:.2f}x off the sentinel's median), marked in its pair and left out of the "
                       "figures while there are clean pairs"))
        return cleanest


def _pair(opening: _Run, closing: _Run, run: _Run, sitting: int = 0, resident: bool = False) -> Pair:
    """The candidate's run against the baseline interpolated at its moment in the round;
    ``resident``: its memory figures are CPU resident peaks."""
    span = closing.at - opening.at
    w = min(1.0, max(0.0, (run.at - opening.at) / span)) if span > 0 else 0.5
    a, b, x = opening.result, closing.result, run.result
    runs = (("the opening baseline", opening), ("the configuration", run), ("the closing baseline", closing))
    disturbed = "; ".join(f"{what}: {r.disturbed}" for what, r in runs if r.disturbed)
    return Pair(w, interpolate(a.throughput, b.throughput, w), x.throughput,  # type: ignore[arg-type]
                interpolate(a.peak_memory_bytes, b.peak_memory_bytes, w), float(x.peak_memory_bytes or 0),
                [v for v in (reading_of(r.telemetry) for r in (a, x, b)) if v is not None], sitting, disturbed,
                resident=resident)

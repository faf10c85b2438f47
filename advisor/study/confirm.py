"""Paired confirmation: the configurations a user would pick, measured again in pairs
against the baseline, until the ratio's 95% interval is tight enough.

Read ``Confirmer.run`` top to bottom: choose the candidates (the feasible front, the
export picks first, at most ``top``), take up what earlier confirmations of the same
study stored, then run rounds: one pair per unfinished candidate per round, so that every
candidate is paired across the same stretch of time. A pair is two probes (timing and peak
memory only, ``TrialSettings.stage = "probe"``) in fresh trial processes, one right after
the other, in ABBA order (``advisor.core.pairs``). Each pair is stored as soon as it is
measured (a study attribute per trial: Optuna cannot change a finished trial), so an
interrupted confirmation resumes without losing or repeating a pair. A pair whose noise
sentinel shows a disturbed machine is discarded and run again.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.errors import StudyError, TrialFailed
from advisor.core.events import Listener, Note, Paired, ignore
from advisor.core.noise import SentinelJudge, reading_of
from advisor.core.pairs import DEFAULT_MAX_PAIRS, DEFAULT_TARGET, DEFAULT_TOP, Confirmation, Pair, beaten
from advisor.core.picks import PICKS, pick
from advisor.core.results import TrialPayload, TrialResult, TrialSettings
from advisor.core.stored import CONFIRMATION, StoredStudy, TrialRecord, read_study
from advisor.runner.executor import Executor, run_one

PROBE_TIMING_S = 0.75  # a probe times steps for this long at most: the pairs, not the steps, measure the spread
PAIR_RETRIES = 2  # a pair on a disturbed machine is run again at most this often


@dataclass(frozen=True)
class ConfirmOptions:
    """How much to confirm: the ``top`` candidates, each until its interval is within
    ``target`` (relative half-width) or it has ``max_pairs`` pairs."""

    top: int = DEFAULT_TOP
    max_pairs: int = DEFAULT_MAX_PAIRS
    target: float = DEFAULT_TARGET


def check_confirm_options(options: ConfirmOptions) -> ConfirmOptions:
    """Raise StudyError (exit status 2) for a bad confirmation option, named by its flag."""
    if options.max_pairs < 1:
        raise StudyError(f"--pairs must be at least 1, found {options.max_pairs}")
    if options.top < 1:
        raise StudyError(f"--confirm-top must be at least 1, found {options.top}")
    if not 0 < options.target < 1:
        raise StudyError(f"--confirm-target must be a fraction between 0 and 1 (0.03: +-3%), found {options.target}")
    return options


def candidates(study: StoredStudy, top: int) -> list[TrialRecord]:
    """The configurations a user would pick: the export picks first, then the rest of the
    feasible front by throughput; never the baseline itself; at most ``top``."""
    front = [r for r in study.front() if not r.baseline and r.config is not None]
    if not front:
        return []
    chosen: dict[int, TrialRecord] = {}
    for how in PICKS:
        r = pick(study, how)
        if not r.baseline:
            chosen.setdefault(r.number, r)
    for r in sorted(front, key=lambda r: -study.relative_figures(r).throughput):
        chosen.setdefault(r.number, r)
    return list(chosen.values())[:top]


def probe_settings(settings: TrialSettings) -> TrialSettings:
    """The study's settings for a probe: timed steps and peak memory only."""
    return replace(settings, stage="probe", max_timing_s=min(settings.max_timing_s, PROBE_TIMING_S))


class Confirmer:
    """Confirms a stored study's candidates in pairs.

    Args:
        study: the Optuna study (confirmations are stored as its attributes).
        workload: the loaded model.py (anything ``TrialPayload.of`` takes).
        settings: the study's trial settings.
        executor: runs the probes, one at a time (each alone on its devices).
        options: how much to confirm.
        trial_timeout: the limit for one probe, seconds.
        stop: returns why to stop (Ctrl-C), or None to go on; checked while probes run.
        on_event: receives ``Paired`` and ``Note`` events.
    """

    def __init__(self, study: Any, workload: Any, settings: TrialSettings, executor: Executor,
                 options: ConfirmOptions = ConfirmOptions(), trial_timeout: float = 600.0,
                 stop: Callable[[], str | None] = lambda: None, on_event: Listener = ignore) -> None:
        self.study, self.workload, self.executor, self.options = study, workload, executor, options
        self.settings = probe_settings(settings)
        self.trial_timeout, self.stop, self.emit = trial_timeout, stop, on_event
        self._numbers = itertools.count(1_000_000)  # executor handle numbers, apart from trial numbers

    def run(self) -> dict[int, Confirmation]:
        """Confirm (or extend the confirmation of) the candidates; returns them by trial.

        Raises:
            TrialFailed: the baseline itself failed to run (nothing more can be paired).
        """
        stored = read_study(self.study)
        base = stored.baseline
        if base is None or base.config is None:
            raise TrialFailed(f"study {stored.name!r} has no completed baseline to confirm against")
        chosen = candidates(stored, self.options.top)
        confirmations = {r.number: stored.confirmations.get(r.number) or Confirmation(r.number) for r in chosen}
        for c in confirmations.values():
            c.settle(self.options.target, self.options.max_pairs)  # a raised cap reopens a capped one
        records = {r.number: r for r in chosen}
        judge = SentinelJudge(x for x in (reading_of(r.get("telemetry")) for r in stored.records) if x is not None)
        open_ = [c for c in confirmations.values() if not c.done]
        if open_:
            self.emit(Note(f"confirming {len(open_)} configuration(s) in pairs against the baseline "
                           f"(trials {', '.join(str(c.trial) for c in open_)}; until +-{100 * self.options.target:.0f}% "
                           f"or {self.options.max_pairs} pairs)"))
        while open_ and self.stop() is None:
            for c in open_:
                started = time.monotonic()
                pair = self._pair(base.config, records[c.trial], c, judge)
                if self.stop() is not None:
                    break
                if pair is not None:
                    c.pairs.append(pair)
                    c.settle(self.options.target, self.options.max_pairs)
                    self._judge_dominance(c, confirmations, stored)
                self.study.set_user_attr(f"{CONFIRMATION}{c.trial}", c.to_dict())
                self.emit(Paired(c.trial, records[c.trial].config, c, time.monotonic() - started))  # type: ignore[arg-type]
            open_ = [c for c in confirmations.values() if not c.done]
            if not open_ and self.stop() is None:  # confirmed figures can change the front
                stored = read_study(self.study)
                for r in candidates(stored, self.options.top):
                    if r.number not in confirmations and len(confirmations) < self.options.top:
                        confirmations[r.number], records[r.number] = Confirmation(r.number), r
                        self.emit(Note(f"trial {r.number} joined the front with the confirmed figures: confirming it"))
                open_ = [c for c in confirmations.values() if not c.done]
        return confirmations

    # ---- one pair --------------------------------------------------------------------
    def _pair(self, baseline: TrialConfig, record: TrialRecord, c: Confirmation, judge: SentinelJudge) -> Pair | None:
        """Two probes, baseline and configuration, in this pair's order. None when stopped,
        or when the configuration failed (``c`` then says so)."""
        assert record.config is not None
        first_base = c.next_baseline_first()
        order = [("baseline", baseline), ("config", record.config)]
        if not first_base:
            order.reverse()
        for attempt in range(PAIR_RETRIES + 1):
            results: dict[str, TrialResult] = {}
            for who, config in order:
                result = self._probe(config)
                if result is None:
                    return None
                if not result.ok:
                    message = f"[{result.failure_class}] {result.failure_message}"
                    if who == "baseline":
                        raise TrialFailed(f"the baseline failed while confirming trial {c.trial}: {message}")
                    c.status, c.note = "failed", f"a probe of the configuration failed {message}"[:2000]
                    return None
                results[who] = result
            readings = [reading_of(r.telemetry) for r in results.values()]
            why = next((w for w in map(judge.disturbed, readings) if w), None)
            for x in readings:
                judge.add(x)
            if why and attempt < PAIR_RETRIES:
                self.emit(Note(f"confirming trial {c.trial}: pair {len(c.pairs) + 1} discarded ({why}); "
                               "running it again"))
                continue
            b, x = results["baseline"], results["config"]
            return Pair(first_base, b.throughput, x.throughput, b.peak_memory_bytes or 0,  # type: ignore[arg-type]
                        x.peak_memory_bytes or 0, [r for r in readings if r is not None])
        return None  # not reached: the last attempt returns its pair

    def _probe(self, config: TrialConfig) -> TrialResult | None:
        """One probe in a fresh trial process; None when asked to stop meanwhile."""
        payload = TrialPayload.of(self.workload, config, self.settings)
        result = run_one(self.executor, next(self._numbers), payload, self.trial_timeout, self.stop)
        return None if self.stop() is not None else result

    def _judge_dominance(self, c: Confirmation, all_: dict[int, Confirmation], stored: StoredStudy) -> None:
        """Stop pairing ``c`` once its interval shows the baseline or another candidate
        beats it on both speed and memory at an accuracy it does not beat beyond noise."""
        if c.done:
            return
        eps = stored.epsilon
        figures = {r.number: r.figures for r in stored.records if r.figures is not None}
        mine = figures[c.trial].accuracy  # type: ignore[union-attr]
        base = stored.baseline
        if base is not None and base.figures is not None and beaten(c, None, base.figures.accuracy >= mine - eps):
            c.status, c.note = "dominated", "the baseline is faster and smaller beyond this interval"
            return
        for other in all_.values():
            if other is not c and other.trial in figures and beaten(
                    c, other, figures[other.trial].accuracy >= mine - eps):  # type: ignore[union-attr]
                c.status, c.note = "dominated", f"trial {other.trial} is faster and smaller beyond this interval"
                return


def confirm_study(study: Any, options: ConfirmOptions, ray_address: str | None = None, trial_timeout: float = 600.0,
                  model: str | None = None, stop: Callable[[], str | None] = lambda: None,
                  on_event: Listener = ignore) -> dict[int, Confirmation]:
    """``advisor confirm``: run or extend the paired confirmation of a stored study.

    Everything that can be wrong with the input is checked before Ray starts or anything
    is written (StudyError / WorkloadError, exit status 2): options, a study without a
    completed baseline, its model.py missing or changed since the study ran.
    """
    from advisor.core.errors import WorkloadError
    from advisor.runner.ray_executor import RayExecutor
    from advisor.workload.contract import load_workload

    check_confirm_options(options)
    stored = read_study(study)
    if stored.baseline is None or stored.baseline.config is None:
        raise StudyError(f"study {stored.name!r} has no completed baseline trial: nothing to confirm against")
    path, settings_attr = model or stored.attrs.get("workload_path"), stored.attrs.get("settings")
    if not path or not isinstance(settings_attr, dict):
        raise StudyError(f"study {stored.name!r} does not record its model.py or its trial settings")
    try:
        workload = load_workload(path)
    except WorkloadError as exc:
        raise WorkloadError(f"study {stored.name!r}: its model.py cannot be loaded from {path} ({exc}); "
                            "point to the file with --model PATH") from None
    if workload.sha256 != stored.attrs.get("workload_sha256"):
        raise WorkloadError(f"{path} changed since study {stored.name!r} ran (its content hash differs): "
                            "its trials cannot be confirmed with the new code")
    settings = TrialSettings.from_dict({"train_samples": 1, **settings_attr})
    if not candidates(stored, options.top):
        on_event(Note(f"study {stored.name!r}: no configuration besides the baseline is on the feasible front; "
                      "nothing to confirm"))
        return {}
    executor = RayExecutor(settings.device, ray_address).start()
    try:
        return Confirmer(study, workload, settings, executor, options, trial_timeout, stop, on_event).run()
    finally:
        executor.shutdown()

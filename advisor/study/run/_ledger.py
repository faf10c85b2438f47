"""The ledger: the only writer of a study's trials. It asks Optuna for trials, writes their
attributes, and tells Optuna their results (through ``advisor.study.run._trial_writes.tell_trial``,
the one place that does; the drivers' repair of trials a gone driver left running ends
them there too);
it reads trials back as ``TrialRecord`` and keeps what the study knows (the baseline, the
trials that count, those other drivers run). Everything that decides asks it and returns
decisions: ``Strategy.decide`` (run, skip, duplicate) and ``TrainingQueue.settle``
(dominated, reused). Trials are written as ``advisor.core.stored`` reads them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from advisor.core.config import TrialConfig
from advisor.core.events import Duplicate as DuplicateEvent
from advisor.core.events import Listener, Note, Skipped, ignore
from advisor.core.memory_stake import MeasuredPeaks
from advisor.core.metric import MetricSpec
from advisor.core.objectives import METRIC_DROP, Figures, Limits
from advisor.core.results import TrialResult
from advisor.core.stored import (
    BASELINE,
    COMBINATION,
    CONFIG,
    CURVE,
    DISTURBED_RUNS,
    DRIVER,
    DUPLICATE_OF,
    EARLY_STOP,
    INITIAL_LOSS,
    METRIC_REUSED,
    MODEL_PROPOSAL,
    PROBE_DONE,
    PROBE_WALL,
    PROBED_AT,
    REUSE_DIFFERENCE,
    SAME_RUN,
    SCORE,
    SEED_CONFIG,
    TRAINING_RUN,
    TRAINING_SKIPPED,
    WALL,
    StoredStudy,
    TrialRecord,
    config_attrs,
    read_study,
    read_trial,
    result_attrs,
    skipped_attrs,
)
from advisor.core.study_attrs import StudyAttrs
from advisor.core.two_stage import REUSE_TOLERANCE, run_difference
from advisor.search.strategy import Duplicate, Proposal, Skip, Strategy
from advisor.study.run._trial_writes import record_result, tell_trial

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class ProbedOnly:
    """Decided (``TrainingQueue.settle``): probed trial ``number`` needs no training run,
    for ``reason``; stored as probed only."""

    number: int
    reason: str


@dataclass(frozen=True)
class Reused:
    """Decided (``TrainingQueue.settle``): probed trial ``number`` trains like ``source``
    (its first steps within ``difference``, relative): ``source``'s metric is reused."""

    number: int
    probe: TrialResult
    probe_wall_s: float
    source: TrialRecord
    difference: float


class Ledger:
    """The study's trials as this driver writes and knows them.

    Args:
        study: the (new or resumed) Optuna study; its stored trials are learnt from.
        strategy: decides what runs; told every trial stored.
        limits: what makes a trial feasible (its constraints).
        driver: this driver's id, written on every trial it hands out.
        on_event: receives ``Skipped``, ``Duplicate`` and ``Note`` events.
    """

    def __init__(self, study: optuna.Study, strategy: Strategy, limits: Limits, *, driver: str | None = None,
                 on_event: Listener = ignore) -> None:
        self.study, self.strategy, self.limits, self.driver, self.emit = study, strategy, limits, driver, on_event
        self.attrs = StudyAttrs(study)
        self.baseline_record: TrialRecord | None = None
        self.baseline_failure: TrialRecord | None = None  # the latest baseline trial that failed (counted)
        self.counted = 0  # trials stored that count towards the budget, by any driver
        self.others_running: dict[int, TrialRecord] = {}  # started by other drivers, not finished yet
        self._asked: dict[int, tuple[optuna.Trial, Proposal]] = {}  # handed out here, not stored yet
        self._final: set[int] = set()  # numbers of the finished trials learnt from
        self._seed_mean: float | None = None  # the baseline's metric over its seeds, once measured
        self.peaks = MeasuredPeaks()  # the peak memory measured so far (is a memory plan worth making?)
        self.observe(quiet=True)  # a resumed study: what its stored trials showed

    # ---- reading ------------------------------------------------------------------------
    def stored(self) -> StoredStudy:
        """The study as stored now."""
        return read_study(self.study)

    @cached_property
    def metric(self) -> MetricSpec:
        """The study's metric, as the study stored it (its name for what the ledger says)."""
        return self.attrs.metric()

    @property
    def reference_metric(self) -> float | None:
        """What a trial's metric is judged against: the baseline's seed mean once its noise
        is measured (``advisor.core.feasibility``), its one value before; None until the
        baseline is in (the baseline is its own reference)."""
        base = self.baseline_record
        if base is None or base.figures is None:
            return None
        if self._seed_mean is None:
            noise = self.attrs.metric_noise()
            if noise is not None and noise.values:
                self._seed_mean = statistics.fmean(noise.values)  # stored once per study: kept
        return self._seed_mean if self._seed_mean is not None else base.figures.score

    @property
    def last_number(self) -> int:
        """The number of the latest trial of the study (-1 before any)."""
        trials = self.study.get_trials(deepcopy=False)
        return trials[-1].number if trials else -1

    def observe(self, quiet: bool = False) -> None:
        """Learn from the trials stored or started by others since the last call (an earlier
        run of the study, or another driver on it: ``advisor.study.run._drivers``): their
        configurations count as seen, their results as counted and as known failures
        (``quiet``: without a note of what that teaches)."""
        for frozen in self.study.get_trials(deepcopy=False):
            if frozen.number in self._final or frozen.number in self._asked:
                continue
            record = read_trial(frozen)
            if record.state == "waiting":
                continue
            if record.state == "running":  # (without a configuration: just asked for; it may still be skipped)
                self.others_running[record.number] = record
                self.strategy.running_elsewhere(record)
                continue
            self._final.add(record.number)
            self.others_running.pop(record.number, None)
            self._learn(record, record.config.key() if record.config is not None else None, quiet)

    # ---- proposing ----------------------------------------------------------------------
    def propose_baseline(self) -> Proposal:
        """The baseline as the next trial (when the study has no completed baseline)."""
        space, baseline = self.strategy.space, self.strategy.baseline
        self.study.enqueue_trial(space.enqueue_params(baseline), user_attrs={BASELINE: True})
        trial = self.study.ask()
        return self._hand_out(trial, space.sample(trial, base=baseline), baseline=True)

    def propose(self) -> Proposal | None:
        """The next configuration to run, or None when there is none for now: the strategy
        waits for results, every configuration has been seen (``space_exhausted``), or the
        sampler only repeats itself (``gave_up``). Duplicates and skipped configurations
        are stored on the way."""
        strategy, space = self.strategy, self.strategy.space
        while not strategy.space_exhausted and strategy.gave_up is None:
            queued = strategy.to_queue(own_in_flight=bool(self._asked), waiting=self._waiting,
                                       baseline=self.baseline_record, stored=self.stored)
            if queued is None:
                return None
            for config in queued.seeds:
                self.study.enqueue_trial(space.enqueue_params(config), skip_if_exists=True,
                                         user_attrs={SEED_CONFIG: config.to_dict()})
            if queued.combined:
                self.attrs.mark_combined()
            for config in queued.combinations:
                self.study.enqueue_trial(space.enqueue_params(config), skip_if_exists=True,
                                         user_attrs={SEED_CONFIG: config.to_dict(), COMBINATION: True})
            for config in queued.model:  # not skipped for an earlier trial cut short with it: it runs again
                self.study.enqueue_trial(space.enqueue_params(config), skip_if_exists=False,
                                         user_attrs={SEED_CONFIG: config.to_dict(), MODEL_PROPOSAL: True})
            trial = self.study.ask()
            seed = trial.user_attrs.get(SEED_CONFIG)
            decision = strategy.decide(space.sample(trial, base=TrialConfig.from_dict(seed) if seed else None))
            if isinstance(decision, Duplicate):
                self._store_duplicate(trial, decision.earlier)
            elif isinstance(decision, Skip):
                self._store_skipped(trial, decision)
            else:
                return self._hand_out(trial, decision.config)
        return None

    def adopt(self, frozen: optuna.trial.FrozenTrial) -> Proposal:
        """Take over a trial an earlier driver left running between its two parts (its
        probe stored): it continues here as if proposed now."""
        import optuna

        trial = optuna.trial.Trial(self.study, frozen._trial_id)
        config = TrialConfig.from_dict(frozen.user_attrs[CONFIG])
        proposal = Proposal(frozen.number, config, bool(frozen.user_attrs.get(BASELINE)))
        self.others_running.pop(frozen.number, None)
        if self.driver is not None:
            trial.set_user_attr(DRIVER, self.driver)
        self._asked[frozen.number] = (trial, proposal)
        self.strategy.handed_out(proposal)
        return proposal

    def adopt_probed(self, alive: Callable[[str | None], bool]) -> list[tuple[Proposal, TrialRecord]]:
        """Adopt the trials gone drivers left running after their probe (``alive``: whether
        a driver still runs); each with its stored record (its probe)."""
        import optuna

        adopted = []
        for frozen in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if frozen.user_attrs.get(PROBE_DONE) and not alive(frozen.user_attrs.get(DRIVER)):
                adopted.append((self.adopt(frozen), read_trial(frozen)))
        return adopted

    # ---- storing ------------------------------------------------------------------------
    def tell(self, number: int, result: TrialResult, wall_s: float) -> TrialRecord:
        """Store the result of trial ``number`` run in one part (or failed, or cancelled)."""
        trial, _ = self._asked[number]
        return self._finish(number, record_result(self.study, trial, result, wall_s, self.limits,
                                                  self.reference_metric))

    def note_disturbed(self, number: int, result: TrialResult, why: str) -> None:
        """Record with running trial ``number`` a measurement taken on a disturbed machine
        (its figures and why); the trial runs again and counts once, when it completes."""
        trial, _ = self._asked[number]
        runs = list(trial.user_attrs.get(DISTURBED_RUNS, []))
        runs.append({"reason": why, "throughput": result.throughput, "peak_memory_bytes": result.peak_memory_bytes,
                     SCORE: result.score, "sentinel": result.telemetry.get("sentinel"),
                     "interference": {k: v for k, v in (result.telemetry.get("interference") or {}).items()
                                      if k != "scores"} or None})
        trial.set_user_attr(DISTURBED_RUNS, runs)

    def store_probe(self, number: int, result: TrialResult, wall_s: float, at: float) -> None:
        """A probe that went well, stored on its still running trial at once (a driver killed
        before its training run leaves it for the next run to adopt)."""
        trial, proposal = self._asked[number]
        for key, value in result_attrs(result, wall_s).items():
            trial.set_user_attr(key, value)
        trial.set_user_attr(PROBE_WALL, wall_s)
        trial.set_user_attr(PROBED_AT, at)
        trial.set_user_attr(PROBE_DONE, True)
        self.peaks.add(proposal.config.batch_size, result.peak_memory_bytes)

    def store_training(self, number: int, probe: TrialResult, probe_wall_s: float, result: TrialResult,
                       wall_s: float) -> TrialRecord:
        """Store a probed trial's training run with its probe, and tell it."""
        trial, proposal = self._asked[number]
        run = {"wall_s": wall_s, "phase_s": result.phase_s, "peak_memory_bytes": result.peak_memory_bytes,
               "host": result.host, "pid": result.pid}
        trial.set_user_attr(TRAINING_RUN, run)
        trial.set_user_attr(WALL, probe_wall_s + wall_s)
        if not result.ok:
            trial.set_user_attr("failure_class", result.failure_class)
            trial.set_user_attr("failure_message", result.failure_message)
            return self._finish(number, tell_trial(self.study, trial))
        trial.set_user_attr(SCORE, result.score)
        for key in ("train_samples", "final_loss"):
            trial.set_user_attr(key, getattr(result, key))
        stop = result.telemetry.get("early_stop")
        trial.set_user_attr(CURVE, result.telemetry.get("curve"))
        if result.telemetry.get("model"):  # the trained and finished model's facts replace the probe's
            trial.set_user_attr("telemetry", probe.telemetry | {"model": result.telemetry["model"]})
        trial.set_user_attr(INITIAL_LOSS, result.telemetry.get("initial_loss"))
        if stop:
            trial.set_user_attr(EARLY_STOP, stop)
        same = not stop and not proposal.baseline and self._trained_as_baseline(number, result)
        if same:
            trial.set_user_attr(SAME_RUN, self.baseline_record.number)  # type: ignore[union-attr]
        figures = Figures(float(probe.throughput or 0.0), float(probe.peak_memory_bytes or 0),
                          float(result.score))  # type: ignore[arg-type]
        return self._complete(number, figures, early_stopped=bool(stop), own_reference=proposal.baseline or same)

    def cancel_training(self, number: int, reason: str) -> TrialRecord:
        """The study stops before a probed trial's training run is done: stored as cancelled
        (its probe kept with it; not counted: it runs again on resume)."""
        trial, _ = self._asked[number]
        trial.set_user_attr("failure_class", "cancelled")
        trial.set_user_attr("failure_message", f"cancelled before its training run: {reason}")
        return self._finish(number, tell_trial(self.study, trial))

    def apply(self, decision: ProbedOnly | Reused) -> TrialRecord:
        """Store a probed trial as the training queue decided: probed only, or with a
        reused metric."""
        trial, _ = self._asked[decision.number]
        if isinstance(decision, ProbedOnly):
            trial.set_user_attr(TRAINING_SKIPPED, decision.reason)
            return self._finish(decision.number, tell_trial(self.study, trial, pruned=True))
        source, probe = decision.source, decision.probe
        assert source.figures is not None
        trial.set_user_attr(METRIC_REUSED, source.number)
        trial.set_user_attr(REUSE_DIFFERENCE, decision.difference)
        own = source.get(SCORE)  # its run at the study's seed, not a seed mean the stored study reads it at
        score = float(own) if isinstance(own, (int, float)) else source.figures.score
        trial.set_user_attr(SCORE, score)
        for key in ("train_samples", "final_loss"):  # the metric's training run: the source's (not the probe's steps)
            trial.set_user_attr(key, source.get(key))
        trial.set_user_attr(WALL, decision.probe_wall_s)
        self.emit(Note(f"trial {decision.number}: {self.metric.name} reused from trial {source.number} (same training "
                       f"numerics: its first steps agree within {decision.difference:.1e}, relative)"))
        figures = Figures(float(probe.throughput or 0.0), float(probe.peak_memory_bytes or 0), score)
        return self._complete(decision.number, figures, own_reference=source.baseline)  # the baseline's numerics

    # ---- the steps ----------------------------------------------------------------------
    def _trained_as_baseline(self, number: int, result: TrialResult) -> bool:
        """Whether a training run repeated the baseline's (seed 0's) from start to end
        (``advisor.core.two_stage.run_difference``): the baseline's numerics, said in a note."""
        base = self.baseline_record
        if base is None or base.get(EARLY_STOP):
            return False
        mine = {"curve": result.telemetry.get("curve"), "final_loss": result.final_loss, "score": result.score}
        diff = run_difference(mine, {"curve": base.get(CURVE), "final_loss": base.get("final_loss"),
                                     "score": base.get(SCORE)})
        if diff is None or diff > REUSE_TOLERANCE:
            return False
        self.emit(Note(f"trial {number}: its training run repeated the baseline's (the learning curve, the last "
                       f"loss and the {self.metric.name} within {diff:.1e}, relative): the baseline's numerics, so "
                       f"its {self.metric.name} is judged as the baseline's over its seeds"))
        return True

    def _complete(self, number: int, figures: Figures, early_stopped: bool = False,
                  own_reference: bool = False) -> TrialRecord:
        """Tell trial ``number`` with ``figures``; its metric is judged against the baseline's,
        or against its own with ``own_reference`` (the baseline, and a trial with its numerics)."""
        reference = figures.score if own_reference or self.reference_metric is None else self.reference_metric
        constraints = self.limits.constraints(figures, reference)
        if early_stopped:  # infeasible by the gate's decision, whatever the figure where it stopped
            constraints[METRIC_DROP] = max(constraints[METRIC_DROP], 1e-9)
        trial, _ = self._asked[number]
        return self._finish(number, tell_trial(self.study, trial, figures, constraints))

    def _finish(self, number: int, frozen: optuna.trial.FrozenTrial) -> TrialRecord:
        _, proposal = self._asked.pop(number)
        record = read_trial(frozen)
        self._final.add(number)
        self._learn(record, proposal.config.key())
        return record

    def _learn(self, record: TrialRecord, key: str | None, quiet: bool = False) -> None:
        self.strategy.learn(record, key, quiet)
        self.counted += record.counted
        if record.figures is not None and record.config is not None:
            self.peaks.add(record.config.batch_size, record.figures.peak_memory_bytes)
        if record.baseline and record.state == "complete":
            self.baseline_record = record
        elif record.baseline and record.counted:
            self.baseline_failure = record

    def _hand_out(self, trial: optuna.Trial, config: TrialConfig, baseline: bool = False) -> Proposal:
        if self.driver is not None:  # first: a trial with a configuration names its driver
            trial.set_user_attr(DRIVER, self.driver)
        for key, value in config_attrs(config).items():
            trial.set_user_attr(key, value)
        proposal = Proposal(trial.number, config, baseline)
        self._asked[trial.number] = (trial, proposal)
        self.strategy.handed_out(proposal)
        return proposal

    def _waiting(self) -> bool:
        import optuna

        return bool(self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))

    def _store_skipped(self, trial: optuna.Trial, skip: Skip) -> None:
        """A configuration that is not run: failed and skipped (not counted)."""
        for key, value in skipped_attrs(skip.config, skip.reason, skip.failure_class).items():
            trial.set_user_attr(key, value)
        record = read_trial(tell_trial(self.study, trial))
        self._final.add(trial.number)
        self.strategy.learn(record, skip.config.key())
        self.emit(Skipped(trial.number, skip.config, skip.reason))

    def _store_duplicate(self, trial: optuna.Trial, earlier: TrialRecord | Proposal) -> None:
        """A configuration already measured (or running): answered from the earlier trial."""
        trial.set_user_attr(DUPLICATE_OF, earlier.number)
        if isinstance(earlier, TrialRecord) and earlier.state == "complete" and earlier.figures is not None:
            tell_trial(self.study, trial, earlier.figures, earlier.constraints)
        else:  # still running, skipped, or it failed
            tell_trial(self.study, trial)
        self._final.add(trial.number)
        self.emit(DuplicateEvent(trial.number, earlier.number))

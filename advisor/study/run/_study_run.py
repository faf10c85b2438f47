"""The driver loop's steps, built once from a ``RunContext``
(advisor/study/run/_run_context.py): nothing is assigned onto its collaborators afterwards.

Read ``StudyRun.run()`` top to bottom: run the baseline alone (its metric anchors the
metric's constraint, its duration the default per-trial timeout) and with more seeds (the
metric's noise), then keep every slot busy with the strategy's proposals until the budget
or the time is spent, storing each result as it comes, train the front's undecided
candidates with the baseline's other seeds (``advisor.study.confirmation.more_seeds``), and finally
confirm the front in pairs against the baseline (``advisor.study.confirmation.confirm``). In a training
study each configuration runs in two parts (two-stage evaluation): its probe, then, where
``TrainingQueue`` decides it can change the front, its training run. ``Parts``
(advisor/study/run/_parts.py) submits the parts, collects and stores what comes back and, once
the baseline is in (``Parts.watched``), runs a part again when too few of its timed blocks
were clean of interference (``BaselineWatch``); between trials the ``BaselineWatch``
measures the baseline again when due. The user's ``Stop`` (Ctrl-C / SIGTERM, or
``Tuner.stop()`` from another thread) stops it gracefully: running trials are cancelled
and recorded, so storage holds no RUNNING trial.

Other drivers may run the same study (``advisor.study.run._drivers``): this one renews its
heartbeat and learns what the others started or stored (``RunContext.keep_up``; the
heartbeat also while it waits on the baseline or on one measurement at a time:
``Beating``), and one-off steps (the baseline, the metric's noise, the confirmation) are
done by the driver that claims them while the others wait (``_claim``).
"""

from __future__ import annotations

import signal
import statistics
import time
from collections.abc import Callable
from typing import Any

from advisor.core.errors import BaselineFailed, TrialFailed, WorkloadError
from advisor.core.events import Note, Started, TimeLimit, TimeoutSet
from advisor.core.feasibility import resolution, seeds_to_resolve
from advisor.core.stop import Stop
from advisor.core.stored import WALL, TrialRecord
from advisor.core.study_attrs import StudyAttrs
from advisor.machine.nvml import starved_text
from advisor.search.strategy import Proposal
from advisor.study.confirmation.baseline_watch import BaselineWatch
from advisor.study.confirmation.confirm import Confirmer
from advisor.study.confirmation.more_seeds import train_more_seeds
from advisor.study.run._drivers import Beating
from advisor.study.run._estimate import budget_plan, estimate, one_probe_s, plan_confirmation
from advisor.study.run._parts import Parts
from advisor.study.run._run_context import RunContext
from advisor.study.run._signals import stopped_by_signals
from advisor.study.storage.guard import fold_log

BASELINE_TIMEOUT_S = 1800.0
WAIT_S = 1.0  # how often a driver looks again while another driver's work is under way
LOOKAHEAD = 2  # probed configurations waiting before a training run goes ahead of a new probe
BUDGET_SPENT = "the study's --budget was spent"


class StudyRun:
    """The steps of one run; ``run()`` once (the Tuner builds its outcome from
    ``stop_reason`` and the user's stop). Its collaborators are the context's."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.plan, self.options, self.emit, self.stop = context.plan, context.options, context.emit, context.stop
        self.study, self.executor, self.drivers = context.study, context.executor, context.drivers
        self.strategy, self.ledger, self.queue = context.strategy, context.ledger, context.queue
        self.slots, self.parts = context.slots, context.parts
        # for the steps that wait on one measurement at a time: the heartbeat goes on meanwhile
        self.measuring = Beating(context.executor, context.drivers)
        # what the loop itself changes as it goes
        self.ended: str | None = None  # why no more trials start, besides the user: the time, the strategy
        self.space_exhausted = False  # stopped short of --trials: nothing of the space was left to try
        self.pending: Proposal | None = None  # proposed, waiting for enough free GPUs
        self.deadline = float("inf")  # when the search stops (--timeout; --budget plans an earlier one)
        self.deadline_why = "the study's --timeout was reached"
        # the paired confirmation to run at the end (None: none); a --budget sizes it to fit
        self.confirming = self.options.confirm_options if self.options.confirm else None

    @property
    def stop_reason(self) -> str | None:
        """Why no more trials start (the budget, the time, the user), or None."""
        return self.ended if self.ended is not None else self.stop.reason

    def run(self) -> None:
        executor, study = self.executor, self.study
        self.emit(Started(executor.startup_s, executor.slots, dict(executor.resources), self.parts.done))
        with stopped_by_signals(self._on_signal):
            try:
                # the budgets count from the study's opening, after Ray has started: the training
                # budget's sizing probe is part of the study's time
                started = self.context.opened_at
                budget_end = float("inf")  # when everything stops (--budget)
                if self.options.timeout:
                    self.deadline = started + self.options.timeout
                if self.options.budget:
                    budget_end = started + self.options.budget
                    if budget_end < self.deadline:
                        self.deadline, self.deadline_why = budget_end, BUDGET_SPENT
                stopping = self.stop.by(budget_end, BUDGET_SPENT)  # what stops the steps after the search
                if self.options.budget or self.options.timeout:  # the lines and the explorer show the time left
                    flag = "--budget" if self.options.budget else "--timeout"
                    self.emit(TimeLimit(started, float(self.options.budget or self.options.timeout), flag))
                base = self._baseline()
                if base is not None and self.stop_reason is None:
                    watch = BaselineWatch(study, self.plan.workload, self.plan.settings, self.plan.baseline,
                                          self.measuring, self.stop, self.emit,
                                          fixed_tolerance=self.options.timing_tolerance is not None)
                    watch.check_first_run(base, self.parts.done, self.ledger.last_number, self._timeout(base))
                    if self.options.workload == "train":  # inference: no seed changes the metric
                        self._metric_noise(watch, base)
                    self._say_how_long(base, budget_end)
                    starved = starved_text(base.get("telemetry"))
                    if starved:
                        self.emit(Note(starved))
                    self._search(base, watch, self.parts.watched(watch))
                if base is not None and self.options.workload == "train" and not self.stop.halted:
                    self._cancel_all(self.stop_reason or "the study stopped")
                    if self.drivers.claim("metric_seeds"):  # one driver trains them; the others go on
                        train_more_seeds(study, self.plan.workload, self.plan.settings, self.measuring,
                                         self.options.confirm_top, self._timeout(base), stopping, self.emit,
                                         "training" if self.queue is not None else "full")
                        self.drivers.release("metric_seeds")
                if base is not None and self.confirming is not None and not self.stop.halted:
                    self._cancel_all(self.stop_reason or "the study stopped")
                    if self.drivers.claim("confirm"):
                        self._confirm(base, stopping)
                    else:
                        self.emit(Note(f"driver {self.drivers.holder('confirm')} confirms the front against the "
                                       "baseline; `advisor report` shows the confirmed ratios once it is done"))
            finally:
                try:  # recording the cancelled trials fails when the storage is lost (StorageError)
                    self._cancel_all(self.stop_reason or "the study stopped")
                finally:
                    executor.shutdown()
                    self.drivers.leave()
                    fold_log(self.context.storage)

    # ---- the steps -------------------------------------------------------------------
    def _baseline(self) -> TrialRecord | None:
        """The stored baseline, or the baseline run now, alone (or by another driver on the
        study, waited for). None if stopped meanwhile."""
        failed_before = self.ledger.baseline_failure
        if not self._claim("baseline", "runs the baseline", lambda: self.ledger.baseline_record is not None or
                           self.ledger.baseline_failure is not failed_before):
            if self.ledger.baseline_record is None and self.ledger.baseline_failure is not failed_before:
                failed = self.ledger.baseline_failure
                raise TrialFailed(f"the baseline trial ({self.plan.baseline.describe()}) failed on another "
                                  f"driver [{failed.failure_class}]: {failed.failure_message}")  # type: ignore[union-attr]
            return self.ledger.baseline_record
        if self.queue is None or not self.queue.waiting:  # else: adopted, probed already
            self.parts.submit(self.ledger.propose_baseline())
        timeout = self.options.trial_timeout or BASELINE_TIMEOUT_S
        records: list[TrialRecord] = []
        while self.stop_reason is None:
            w = self.queue.next_run(anyway=False) if self.queue is not None and not self.slots else None
            if w is not None:
                self.parts.submit_training(w)
            if not self.slots:
                break
            self.drivers.beat()  # however long the baseline runs
            records += self.parts.collect(timeout)
        self.drivers.release("baseline")
        if self.stop_reason is not None or self.ledger.baseline_record is not None:
            return self.ledger.baseline_record
        failed = records[-1]
        message = (f"the baseline trial ({self.plan.baseline.describe()}) failed "
                   f"[{failed.failure_class}]: {failed.failure_message}")
        if self.options.skip_preflight and failed.failure_class == "error":
            raise WorkloadError(f"{self.plan.workload.path}: {message} (preflight was skipped; this is "
                                "most likely a model.py contract problem)")
        raise BaselineFailed(message)

    def _metric_noise(self, watch: BaselineWatch, base: TrialRecord) -> None:
        """The baseline trained with more seeds (once per study, by one driver)."""
        if self._claim("accuracy_noise", "measures the metric's noise",
                       lambda: StudyAttrs(self.study).has_metric_noise()):
            watch.metric_noise(base, self.options.metric_seeds, self._timeout(base),
                               part="training" if self.queue is not None else "full")
            self.drivers.release("accuracy_noise")
        watch.load_noise()
        noise = watch.noise
        if noise is None or len(noise.values) < 2:
            return
        allowed = self.options.limits.allowed(statistics.fmean(noise.values))
        half = resolution(noise.values)
        if half is not None and half > allowed:
            spec, need = self.plan.workload.metric_spec, seeds_to_resolve(noise.values, allowed)
            self.emit(Note(
                f"this training budget cannot judge --max-metric-drop {self.options.drop_text}: with the seeds' "
                f"spread, one trial's {spec.name} is called feasible only when its 95% bound clears the allowed "
                f"drop, i.e. {spec.amount_text(half - allowed)} better than the baseline's mean, and "
                f"infeasible only when {spec.amount_text(half + allowed)} worse; in between a trial is "
                "'undecided' (ranked on its measured value, marked as such). "
                + (f"About {need} seeds a side (--metric-seeds {need}) would decide it, or a longer "
                   "--train-samples whose seeds agree more closely" if need is not None else
                   "More seeds cannot fix it at this spread: a longer --train-samples whose seeds agree more "
                   "closely can")))

    def _say_how_long(self, base: TrialRecord, budget_end: float) -> None:
        """How long the rest should take, from the baseline's own times (``study.estimate``)."""
        o, two_stage = self.options, self.queue is not None
        planned = None
        if o.budget and self.confirming is not None:
            planned = plan_confirmation(self.confirming, one_probe_s(base, two_stage), o.budget)
            self.confirming = planned.options
        c = self.confirming
        guess = estimate(base, o.trials - self.parts.done, two_stage=two_stage,
                         seeds=o.metric_seeds if o.workload == "train" else 1, confirm=c is not None,
                         top=o.confirm_top, pairs=c.max_pairs if c else o.pairs, confirm_top=c.top if c else None)
        if guess is not None and guess.trials:
            self.emit(Note(guess.text()))
        if planned is not None and planned.text:
            self.emit(Note(planned.text))
        if o.budget:
            deadline, text = budget_plan(guess, time.monotonic(), budget_end, o.budget)
            if deadline < self.deadline:
                self.deadline, self.deadline_why = deadline, "the search's share of the study's --budget was spent"
            self.emit(Note(text))

    def _timeout(self, base: TrialRecord) -> float:
        return self.options.trial_timeout or max(120.0, 10.0 * base.get(WALL, 60.0))

    def _search(self, base: TrialRecord, watch: BaselineWatch, parts: Parts) -> None:
        """Keep every slot busy until the budget, the space or the time is spent (``parts``:
        the context's, watched by the baseline's ``watch``)."""
        timeout = self._timeout(base)
        self.emit(TimeoutSet(timeout))
        if parts.done >= self.options.trials:  # the same command again, after the study finished its search
            self.emit(Note(f"the study already holds its {parts.done} trial(s) (--trials {self.options.trials} is the "
                           "study's total): nothing more to search; a larger --trials runs more"))
        while self.stop_reason is None:
            self.context.keep_up()
            done = parts.done
            more = done + parts.in_flight() < self.options.trials  # trials still to start
            remeasure = (watch.remeasure_reason(done, self.strategy.seeds_done, self.strategy.reference_due)
                         if more else None)
            if remeasure and not self.slots:  # alone on the machine, like every measurement
                if time.monotonic() >= self.deadline:
                    self.ended = self.deadline_why
                    break
                watch.remeasure(remeasure, done, self.ledger.last_number, timeout)
                continue
            if not remeasure:
                self._start_trials(parts)
            waiting = self.queue is not None and bool(self.queue.waiting)
            if self.strategy.gave_up and not (self.strategy.out_of_proposals and (self.slots or waiting)):
                # a sampler that only repeats itself proposes nothing more, but the trials running
                # and the training runs already due still finish (a replayed study cancelled the
                # training run of the grid's best-metric configuration here)
                self.ended = self.strategy.gave_up
                break
            if time.monotonic() >= self.deadline:
                self.ended = self.deadline_why
                break
            if not self.slots and not (self.queue is not None and self.queue.waiting):
                if self.strategy.reference_due:  # the search waits for the baseline's re-measurement
                    if not (more and watch.remeasure_reason(parts.done, self.strategy.seeds_done, True)):
                        self.strategy.without_reference()  # none is due now: it goes on without
                    continue  # (the loop's first step measures it)
                if self.ledger.others_running and parts.done < self.options.trials:
                    time.sleep(WAIT_S)  # other drivers' trials: stored, or failed with their driver
                    continue
                if self.strategy.space_exhausted and parts.done < self.options.trials:
                    self.space_exhausted = True
                    self.emit(Note(f"every configuration of the space ({self.strategy.space_size}) has been measured "
                                   "or ruled out"))
                break
            parts.collect(timeout)

    def _confirm(self, base: TrialRecord, stopping: Stop) -> None:
        """Paired confirmation of the front against the baseline."""
        assert self.confirming is not None
        confirmer = Confirmer(self.study, self.plan.workload, self.plan.settings, self.measuring,
                              self.confirming, self._timeout(base), stopping, self.emit, new_sittings=False)
        try:
            confirmer.run()
        except TrialFailed as exc:
            self.emit(Note(f"confirmation stopped: {exc}"))

    def _start_trials(self, parts: Parts) -> None:
        """Submit work while a slot is free and time is left: with two-stage evaluation an
        training run when enough probed configurations wait to choose among (or no probe
        can start), else a new configuration's probe while the budget allows."""
        while self.slots.free and time.monotonic() < self.deadline:
            self.ledger.observe()  # what other drivers on the study stored or started meanwhile
            can_probe = parts.done + parts.in_flight() < self.options.trials
            w = None
            if self.queue is not None:
                parts.settle()
                w = self.queue.next_run(anyway=len(self.queue.waiting) >= max(LOOKAHEAD, self.executor.slots)
                                        or not can_probe)
            proposal = None
            if w is None and can_probe:
                proposal = self.pending or self.ledger.propose()
                if proposal is None and self.queue is not None:  # the strategy waits for results: train meanwhile
                    w = self.queue.next_run(anyway=True)
            if w is not None:
                if not self.slots.fits(w.proposal):
                    return
                parts.submit_training(w)
            elif proposal is not None:
                if not self.slots.fits(proposal):
                    self.pending = proposal  # wait until enough GPUs are free for it
                    return
                self.pending = None
                if not parts.fits_the_budget(proposal):
                    return
                parts.submit(proposal)
            else:
                return

    # ---- other drivers on the study (advisor.study.run._drivers) ---------------------------
    def _claim(self, step: str, what: str, done: Callable[[], bool]) -> bool:
        """Whether this driver does ``step`` now: not when ``done()``, nor while another
        live driver does it (waited for until ``done()`` or until that driver is gone)."""
        self.ledger.observe()
        while self.stop_reason is None and not done():
            if self.drivers.claim(step):
                return True
            holder = self.drivers.holder(step)
            if holder is not None:  # (else it was released, or its driver is gone: claim it again)
                self.emit(Note(f"driver {holder} {what}: waiting for it"))
            while self.stop_reason is None and self.drivers.holder(step) not in (None, self.drivers.id):
                if time.monotonic() >= self.deadline:
                    self.ended = self.deadline_why
                time.sleep(WAIT_S)
                self.context.keep_up()
                self.ledger.observe()
                if done():
                    return False
        return False

    # ---- stopping --------------------------------------------------------------------
    def _cancel_all(self, reason: str) -> None:
        """Cancel and record what still runs, waits for its training run or for GPUs."""
        pending, self.pending = self.pending, None
        self.parts.cancel_all(reason, pending)

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if not self.stop.request("interrupted by " + name):  # a second Ctrl-C: stop at once
            raise KeyboardInterrupt
        self.emit(Note(f"{name}: stopping, cancelling running trials "
                       "(press Ctrl-C again to abort at once)"))

"""The Tuner: the driver loop of one study.

Read ``run()`` top to bottom: start the executor, open (or resume) the study, run the
baseline alone (its accuracy anchors the accuracy constraint, its duration the default
per-trial timeout) and with more seeds (the metric's noise), then keep every slot busy
with the strategy's proposals until the budget or the time is spent, storing each result
as it comes, train the front's undecided candidates with the baseline's other seeds
(``advisor.study.more_seeds``), and finally confirm the front in pairs against the
baseline (``advisor.study.confirm``). In a training study each configuration runs in two parts
(two-stage evaluation): its probe, then, where ``AccuracyQueue`` decides it can change the
front, its accuracy run. ``Parts`` (advisor/study/parts.py) submits the parts, collects and
stores what comes back and runs a part again when too few of its timed blocks were clean
of interference (``BaselineWatch``); between trials a ``BaselineWatch`` measures the baseline again when due.
Ctrl-C / SIGTERM (or ``stop()`` from another thread) stop it gracefully: running trials
are cancelled and recorded, so storage holds no RUNNING trial.

Other drivers may run the same study (``advisor.study.drivers``): this one joins it,
renews its heartbeat and learns what the others started or stored (``_keep_up``), and
one-off steps (the baseline, the metric's noise, the confirmation) are done by the driver
that claims them while the others wait (``_claim``).
"""

from __future__ import annotations

import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from advisor.core.errors import TrialFailed, WorkloadError
from advisor.core.events import Listener, Note, Started, TimeoutSet, ignore
from advisor.core.feasibility import resolution, seeds_to_resolve
from advisor.core.results import TrialResult
from advisor.core.stop import Stop
from advisor.core.stored import ACCURACY_NOISE, WALL, TrialRecord
from advisor.runner.executor import Executor
from advisor.search.strategy import Proposal, Strategy
from advisor.study import storage as stores
from advisor.study.accuracy_queue import AccuracyQueue
from advisor.study.baseline_watch import BaselineWatch
from advisor.study.confirm import Confirmer
from advisor.study.drivers import Drivers, join_study
from advisor.study.estimate import budget_plan, estimate
from advisor.study.ledger import Ledger
from advisor.study.more_seeds import train_more_seeds
from advisor.study.parts import Parts
from advisor.study.plan import StudyPlan, open_study
from advisor.study.signals import stopped_by_signals
from advisor.study.slots import Slots
from advisor.study.storage_guard import fold_log

if TYPE_CHECKING:
    import optuna

BASELINE_TIMEOUT_S = 1800.0
WAIT_S = 1.0  # how often a driver looks again while another driver's work is under way
LOOKAHEAD = 2  # probed configurations waiting before an accuracy run goes ahead of a new probe


@dataclass(frozen=True)
class StudyOutcome:
    """What ``Tuner.run()`` leaves: the study, and why it stopped early (None if it did not)."""

    study: optuna.Study
    stop_reason: str | None

    @property
    def interrupted(self) -> bool:
        """Stopped by the user (Ctrl-C, SIGTERM, quitting the explorer)."""
        return bool(self.stop_reason and self.stop_reason.startswith("interrupted"))


class Tuner:
    """Runs one planned study.

    Args:
        plan: what ``advisor.study.plan.plan_study`` returned.
        executor: runs the trials; by default a ``RayExecutor`` started by ``run()`` (or
            earlier by ``start_executor()``). The Tuner shuts it down when the study ends.
        on_event: receives every event (``advisor.core.events``), in the study's thread.
    """

    def __init__(self, plan: StudyPlan, executor: Executor | None = None, on_event: Listener = ignore) -> None:
        self.plan, self.options = plan, plan.options
        self.executor = executor
        self.emit = on_event
        self.storage: Any = None  # the Optuna storage, once run() has opened it
        self.strategy: Strategy  # set by run(), once the study is open
        self.ledger: Ledger  # the study's only writer; set by run(), once the study is open
        self.stop_reason: str | None = None  # why no more trials start (the budget, the time, the user)
        self.halt = Stop()  # the user stopped the study (Ctrl-C, SIGTERM, stop())
        self.watch: BaselineWatch | None = None  # once the baseline is in
        self.slots: Slots  # what runs now; set once the executor is started
        self.queue: AccuracyQueue | None = None  # two-stage evaluation: probed, waiting for accuracy
        self.parts: Parts  # submits, collects and stores the parts; set once the study is open
        self.pending: Proposal | None = None  # proposed, waiting for enough free GPUs
        self.drivers: Drivers  # this driver on the study, and the others; set once the study is open
        self.deadline = float("inf")  # when the search stops (--timeout; --budget plans an earlier one)
        self.budget_end = float("inf")  # when everything stops (--budget)
        self.deadline_why = "the study's --timeout was reached"
        self.trial_timeout = self.options.trial_timeout or BASELINE_TIMEOUT_S  # until the baseline's is known

    # ---- the study ------------------------------------------------------------------
    def start_executor(self) -> Executor:
        """Start Ray (or join the cluster) unless an executor was given. ``run()`` calls
        it; call it first in the main thread when the study itself runs in another one
        (Ray's init needs real stdio)."""
        if self.executor is None:
            from advisor.runner.ray_executor import RayExecutor

            self.executor = RayExecutor(self.plan.hardware.device, self.options.ray_address).start()
        self.slots = Slots(self.executor)
        return self.executor

    def run(self) -> StudyOutcome:
        executor = self.start_executor()  # first: if no node can run a trial, no study is written
        try:
            self.storage = stores.open_storage(self.plan.storage_url)
            if hasattr(self.storage, "watch"):  # an RDB storage: say when it waits for the database
                self.storage.watch(lambda text: self.emit(Note(text)))
            study = open_study(self.plan, self.storage, self.emit)
            self.drivers = join_study(study, self.storage, self.plan, self.emit)
            gpu_slots = executor.slots if executor.device == "cuda" else None
            self.strategy = Strategy(self.plan.space, self.plan.baseline, workload=self.options.workload,
                                     sampler=self.options.sampler, budget=self.options.trials,
                                     limits=self.options.limits, max_devices=gpu_slots,
                                     combined=bool(study.user_attrs.get("combined")), on_event=self.emit)
            self.ledger = Ledger(study, self.strategy, self.options.limits, driver=self.drivers.id,
                                 on_event=self.emit)
            if self.options.two_stage:
                self.queue = AccuracyQueue(self.ledger, self.plan.settings, self.options.limits)
                for number in self.queue.adopt_unfinished(self.drivers.alive):
                    self.emit(Note(f"trial {number} was probed by an earlier run: its accuracy part runs now"))
            self.parts = Parts(self.plan, self.ledger, self.slots, self.queue, self.emit)
        except BaseException:
            executor.shutdown()
            raise
        self.emit(Started(executor.startup_s, executor.slots, dict(executor.resources), self.parts.done))
        with stopped_by_signals(self._on_signal):
            try:
                started = time.monotonic()  # the budgets count from here, after Ray has started
                if self.options.timeout:
                    self.deadline = started + self.options.timeout
                if self.options.budget:
                    self.budget_end = started + self.options.budget
                    if self.budget_end < self.deadline:
                        self.deadline, self.deadline_why = self.budget_end, "the study's --budget was spent"
                base = self._baseline()
                if base is not None and self.stop_reason is None:
                    self.watch = self.parts.watch = BaselineWatch(study, self.plan.workload, self.plan.settings,
                                                                  self.plan.baseline, executor, self.halt,
                                                                  self.emit)
                    if self.options.workload == "train":  # inference: no seed changes the metric
                        self._metric_noise(study, base)
                    self._say_how_long(base)
                    self._search(base)
                if base is not None and self.options.workload == "train" and not self.halt.halted:
                    self._cancel_all(self.stop_reason or "the study stopped")
                    if self.drivers.claim("metric_seeds"):  # one driver trains them; the others go on
                        train_more_seeds(study, self.plan.workload, self.plan.settings, executor,
                                         self.options.confirm_top, self._timeout(base), self._stopping(), self.emit,
                                         "accuracy" if self.queue is not None else "full")
                        self.drivers.release("metric_seeds")
                if base is not None and self.options.confirm and not self.halt.halted:
                    self._cancel_all(self.stop_reason or "the study stopped")
                    if self.drivers.claim("confirm"):
                        self._confirm(study, base)
                    else:
                        self.emit(Note(f"driver {self.drivers.holder('confirm')} confirms the front against the "
                                       "baseline; `advisor report` shows the confirmed ratios once it is done"))
            finally:
                try:  # recording the cancelled trials fails when the storage is lost (StorageError)
                    self._cancel_all(self.stop_reason or "the study stopped")
                finally:
                    executor.shutdown()
                    self.drivers.leave()
                    fold_log(self.storage)
        return StudyOutcome(study, self.halt.reason or self.stop_reason)

    def stop(self, reason: str) -> None:
        """Ask a running study to stop: no new trials; running ones are cancelled and
        recorded (not counted), and ``run()`` returns. Safe to call from another thread."""
        if self.halt.request(reason):
            self.stop_reason = self.stop_reason or reason
            self.emit(Note(f"stopping ({reason}): cancelling running trials"))

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
                self.parts.submit_accuracy(w)
            if not self.slots:
                break
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
        raise TrialFailed(message)

    def _metric_noise(self, study: optuna.Study, base: TrialRecord) -> None:
        """The baseline trained with more seeds (once per study, by one driver)."""
        assert self.watch is not None
        if self._claim("accuracy_noise", "measures the metric's noise", lambda: ACCURACY_NOISE in study.user_attrs):
            self.watch.accuracy_noise(base, self.options.accuracy_seeds, self._timeout(base),
                                      stage="accuracy" if self.queue is not None else "full")
            self.drivers.release("accuracy_noise")
        self.watch.load_noise()
        noise = self.watch.noise
        if noise is None or len(noise.values) < 2:
            return
        allowed = self.options.limits.allowed(statistics.fmean(noise.values))
        half = resolution(noise.values)
        if half is not None and half > allowed:
            spec, need = self.plan.workload.metric_spec, seeds_to_resolve(noise.values, allowed)
            self.emit(Note(
                f"this training budget cannot judge --max-metric-drop {self.options.drop_text}: with the seeds' "
                f"spread, one trial's {spec.name} is called feasible only when its 95% bound clears the allowed "
                f"drop, i.e. {spec.delta_text(half - allowed).lstrip('+')} better than the baseline's mean, and "
                f"infeasible only when {spec.delta_text(half + allowed).lstrip('+')} worse; in between a trial is "
                "'undecided' (ranked on its measured value, marked as such). "
                + (f"About {need} seeds a side (--accuracy-seeds {need}) would decide it, or a longer "
                   "--train-samples whose seeds agree more closely" if need is not None else
                   "More seeds cannot fix it at this spread: a longer --train-samples whose seeds agree more "
                   "closely can")))

    def _say_how_long(self, base: TrialRecord) -> None:
        """How long the rest should take, from the baseline's own times (``study.estimate``)."""
        o = self.options
        guess = estimate(base, o.trials - self.parts.done, two_stage=self.queue is not None,
                         seeds=o.accuracy_seeds if o.workload == "train" else 1, confirm=o.confirm,
                         top=o.confirm_top, pairs=o.pairs)
        if guess is not None and guess.trials:
            self.emit(Note(guess.text()))
        if o.budget:
            deadline, text = budget_plan(guess, time.monotonic(), self.budget_end, o.budget)
            if deadline < self.deadline:
                self.deadline, self.deadline_why = deadline, "the search's share of the study's --budget was spent"
            self.emit(Note(text))

    def _stopping(self) -> Stop:
        """What stops the steps after the search: the user, or the spent --budget."""
        return self.halt.by(self.budget_end, "the study's --budget was spent")

    def _timeout(self, base: TrialRecord) -> float:
        return self.options.trial_timeout or max(120.0, 10.0 * base.get(WALL, 60.0))

    def _search(self, base: TrialRecord) -> None:
        """Keep every slot busy until the budget, the space or the time is spent."""
        assert self.watch is not None
        self.trial_timeout = self._timeout(base)
        self.emit(TimeoutSet(self.trial_timeout))
        while self.stop_reason is None:
            self._keep_up()
            done = self.parts.done
            more = done + self.parts.in_flight() < self.options.trials  # trials still to start
            remeasure = self.watch.remeasure_reason(done, self.strategy.seeds_done) if more else None
            if remeasure and not self.slots:  # alone on the machine, like every measurement
                self.watch.remeasure(remeasure, done, self.ledger.last_number, self.trial_timeout)
                continue
            if not remeasure:
                self._start_trials()
            if self.strategy.gave_up:
                self.stop_reason = self.strategy.gave_up
                break
            if time.monotonic() >= self.deadline:
                self.stop_reason = self.deadline_why
                break
            if not self.slots and not (self.queue is not None and self.queue.waiting):
                if self.ledger.others_running and self.parts.done < self.options.trials:
                    time.sleep(WAIT_S)  # other drivers' trials: stored, or failed with their driver
                    continue
                if self.strategy.space_exhausted and self.parts.done < self.options.trials:
                    self.emit(Note(f"every configuration of the space ({self.strategy.space_size}) has been measured"))
                break
            self.parts.collect(self.trial_timeout)

    def _confirm(self, study: optuna.Study, base: TrialRecord) -> None:
        """Paired confirmation of the front against the baseline."""
        assert self.executor is not None
        confirmer = Confirmer(study, self.plan.workload, self.plan.settings, self.executor,
                              self.options.confirm_options, self._timeout(base), self._stopping(), self.emit)
        try:
            confirmer.run()
        except TrialFailed as exc:
            self.emit(Note(f"confirmation stopped: {exc}"))

    def _start_trials(self) -> None:
        """Submit work while a slot is free and time is left: with two-stage evaluation an
        accuracy run when enough probed configurations wait to choose among (or no probe
        can start), else a new configuration's probe while the budget allows."""
        while self.slots.free and time.monotonic() < self.deadline:
            self.ledger.observe()  # what other drivers on the study stored or started meanwhile
            can_probe = self.parts.done + self.parts.in_flight() < self.options.trials
            w = None
            if self.queue is not None:
                self.parts.settle()
                w = self.queue.next_run(anyway=len(self.queue.waiting) >= max(LOOKAHEAD, self.executor.slots)  # type: ignore[union-attr]
                                        or not can_probe)
            proposal = None
            if w is None and can_probe:
                proposal = self.pending or self.ledger.propose()
                if proposal is None and self.queue is not None:  # the strategy waits for results: train meanwhile
                    w = self.queue.next_run(anyway=True)
            if w is not None:
                if not self.slots.fits(w.proposal):
                    return
                self.parts.submit_accuracy(w)
            elif proposal is not None:
                if not self.slots.fits(proposal):
                    self.pending = proposal  # wait until enough GPUs are free for it
                    return
                self.pending = None
                if not self._fits_the_budget(proposal):
                    return
                self.parts.submit(proposal)
            else:
                return

    def _fits_the_budget(self, proposal: Proposal) -> bool:
        """Whether ``proposal``, now numbered, is within ``--trials``: the trials stored that
        count, this driver's others in flight and other drivers' trials started before it
        (lower numbers) leave room. Two drivers taking the last trial at once: the lower
        number runs, the other is stored as cancelled (not counted)."""
        self.ledger.observe()
        mine = self.parts.in_flight_here()
        before = sum(1 for n in self.ledger.others_running if n < proposal.number)
        if self.parts.done + mine + before < self.options.trials:
            return True
        self.ledger.tell(proposal.number, TrialResult.failed(
            "cancelled", "cancelled: other drivers on the study took its last trials"), 0.0)
        return False

    # ---- other drivers on the study (advisor.study.drivers) ---------------------------
    def _keep_up(self) -> None:
        """Every few seconds: renew this driver's heartbeat, mark failed the trials that gone
        drivers left running (their configurations run again), and learn what the other
        drivers stored or started."""
        if not self.drivers.beat():
            return
        for number in self.drivers.fail_stale(self.storage, keep_probed=False):
            self.emit(Note(f"trial {number}: the driver running it is gone; marked failed, its configuration "
                           "runs again"))
        self.ledger.observe()

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
                    self.stop_reason = self.deadline_why
                time.sleep(WAIT_S)
                self._keep_up()
                self.ledger.observe()
                if done():
                    return False
        return False

    def _cancel_all(self, reason: str) -> None:
        """Cancel and record what still runs, waits for its accuracy part or for GPUs."""
        pending, self.pending = self.pending, None
        self.parts.cancel_all(reason, pending)

    # ---- stopping --------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        if not self.halt.request("interrupted by " + signal.Signals(signum).name):  # a second Ctrl-C: stop at once
            raise KeyboardInterrupt
        self.stop_reason = self.stop_reason or self.halt.reason
        self.emit(Note(f"{signal.Signals(signum).name}: stopping, cancelling running trials "
                       "(press Ctrl-C again to abort at once)"))

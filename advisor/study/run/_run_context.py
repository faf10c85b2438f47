"""What a study's run holds fixed once its executor is started and its study open: built
once, by ``RunContext.open``, and never assigned to afterwards (a frozen dataclass).

``open`` settles the default training budget (``advisor.study.run._training_budget``: the
study's own when it resumes one, else from the baseline's probe, timed once), then opens
(or resumes) the study on the started executor, joins it as one of its
drivers (``advisor.study.run._drivers``), and builds the strategy, the ledger (the study's only
writer), two-stage evaluation's queue (adopting what a gone driver left probed), the slots
and the parts. The Tuner's steps (``advisor.study.run._study_run.StudyRun``) are built from it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from advisor.core.events import Listener, Note
from advisor.core.stop import Stop
from advisor.core.study_attrs import StudyAttrs
from advisor.runner.executor import Executor
from advisor.search.strategy import Strategy
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run._drivers import Drivers, join_study
from advisor.study.run._ledger import Ledger
from advisor.study.run._parts import Parts
from advisor.study.run._slots import Slots
from advisor.study.run._training_budget import settle
from advisor.study.run._training_queue import TrainingQueue
from advisor.study.run.plan import StudyPlan, open_study
from advisor.study.storage import stores

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class RunContext:
    """One run of a planned study.

    Attributes:
        plan: what ``advisor.study.run.plan.plan_study`` returned; executor: runs the trials.
        storage: the Optuna storage; study: the Optuna study, created or resumed.
        drivers: this driver on the study, and the others.
        strategy: what runs next; ledger: the study's only writer.
        queue: two-stage evaluation's probed configurations (None: full trials).
        slots: what runs now; parts: submits, collects and stores the parts (the
            baseline's: no watch yet, ``Parts.watched`` for the search).
        stop: the user's stop (Ctrl-C, SIGTERM, ``Tuner.stop()``).
        emit: receives every event.
        opened_at: ``time.monotonic()`` when ``open`` began, after Ray had started: where
            --budget and --timeout count from (the training budget's sizing probe included).
    """

    plan: StudyPlan
    executor: Executor
    storage: Any
    study: optuna.Study
    drivers: Drivers
    strategy: Strategy
    ledger: Ledger
    queue: TrainingQueue | None
    slots: Slots
    parts: Parts
    stop: Stop
    emit: Listener
    opened_at: float

    @property
    def options(self) -> TuneOptions:
        return self.plan.options

    @classmethod
    def open(cls, plan: StudyPlan, executor: Executor, stop: Stop, emit: Listener) -> RunContext:
        """Open the study on the started ``executor``; the executor is shut down when this
        fails (a storage that cannot be reached, a study that cannot be resumed)."""
        options = plan.options
        opened_at = time.monotonic()
        try:
            storage = stores.open_storage(plan.storage_url)
            if hasattr(storage, "watch"):  # an RDB storage: say when it waits for the database
                storage.watch(lambda text: emit(Note(text)))

            waited: list[str] = []  # stored() waited for a study's creator: open_study need not wait as long again

            def waiting(text: str) -> None:
                emit(Note(text))
                waited.append(text)

            def stored() -> dict[str, Any] | None:  # the study's attributes, once it exists
                summary = stores.summary(storage, plan.study_name, wait_s=stores.CREATION_WAIT_S, on_wait=waiting)
                if summary is None:
                    return None
                if not stores.is_advisor_study(summary):
                    return {}  # another program's study: nothing to size; open_study refuses it by name
                return dict(summary.user_attrs)

            plan = settle(plan, stored, executor, stop, emit)  # the default training budget, capped by time
            study = open_study(plan, storage, emit, creation_wait_s=1.0 if waited else stores.CREATION_WAIT_S)
            drivers = join_study(study, storage, plan, emit)
            gpu_slots = executor.slots if executor.device == "cuda" else None
            strategy = Strategy(plan.space, plan.baseline, workload=options.workload, sampler=options.sampler,
                                budget=options.trials, limits=options.limits, max_devices=gpu_slots,
                                device=plan.settings.device,
                                combined=StudyAttrs(study).combined(), remeasures=True, on_event=emit)
            ledger = Ledger(study, strategy, options.limits, driver=drivers.id, on_event=emit)
            queue = None
            if options.two_stage:
                queue = TrainingQueue(ledger, plan.settings, options.limits)
                for number in queue.adopt_unfinished(drivers.alive):
                    emit(Note(f"trial {number} was probed by an earlier run: its training run starts now"))
            slots = Slots(executor)
            parts = Parts(plan, ledger, slots, queue, emit)
        except BaseException:
            executor.shutdown()
            raise
        return cls(plan, executor, storage, study, drivers, strategy, ledger, queue, slots, parts, stop, emit,
                   opened_at)

    def keep_up(self) -> None:
        """Every few seconds: renew this driver's heartbeat, mark failed the trials that gone
        drivers left running (their configurations run again), and learn what the other
        drivers stored or started."""
        if not self.drivers.beat():
            return
        for number in self.drivers.fail_stale(self.storage, keep_probed=False):
            self.emit(Note(f"trial {number}: the driver running it is gone; marked failed, its configuration "
                           "runs again"))
        self.ledger.observe()

"""The Tuner: runs one planned study.

``run()`` starts the executor (first: if no node can run a trial, no study is written),
opens the run's fixed context (``advisor.study.run._run_context.RunContext.open``: the study
created or resumed, this driver joined, the strategy, the ledger, the queue, the slots and
the parts, the executor shut down if that fails), and builds the driver loop's steps once
from it (``advisor.study.run._study_run.StudyRun``): the baseline, the metric's noise, the
search, the front's undecided candidates with more seeds, paired confirmation.

Ctrl-C / SIGTERM (or ``stop()`` from another thread) stop it gracefully: each is a request
on the one ``Stop`` (advisor/core/stop.py) that every wait of the run reads; running
trials are cancelled and recorded, so storage holds no RUNNING trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from advisor.core.errors import BaselineFailed, WorkloadError
from advisor.core.events import Listener, Note, ignore
from advisor.core.stop import Stop
from advisor.runner.executor import Executor
from advisor.study.run._run_context import RunContext
from advisor.study.run._study_run import BASELINE_TIMEOUT_S, LOOKAHEAD, WAIT_S, StudyRun
from advisor.study.run.plan import StudyPlan
from advisor.workload.downloads import trial_switches

if TYPE_CHECKING:
    import optuna

__all__ = ["BASELINE_TIMEOUT_S", "LOOKAHEAD", "WAIT_S", "StudyOutcome", "Tuner"]


@dataclass(frozen=True)
class StudyOutcome:
    """What ``Tuner.run()`` leaves: the study, and why it stopped early (None if it did not)."""

    study: optuna.Study
    stop_reason: str | None
    space_exhausted: bool = False  # short of --trials: every configuration was measured or ruled out

    @property
    def interrupted(self) -> bool:
        """Stopped by the user (Ctrl-C, SIGTERM, quitting the explorer)."""
        return bool(self.stop_reason and self.stop_reason.startswith("interrupted"))


class Tuner:
    """Runs one planned study.

    Args:
        plan: what ``advisor.study.run.plan.plan_study`` returned.
        executor: runs the trials; by default a ``RayExecutor`` started by ``run()`` (or
            earlier by ``start_executor()``). The Tuner shuts it down when the study ends.
        on_event: receives every event (``advisor.core.events``), in the study's thread.
    """

    def __init__(self, plan: StudyPlan, executor: Executor | None = None, on_event: Listener = ignore) -> None:
        self.plan, self.options = plan, plan.options
        self.executor = executor  # started by start_executor() when not given
        self.emit = on_event
        self._stop = Stop()  # the user's: Ctrl-C, SIGTERM, stop()
        self._study_run: StudyRun | None = None  # the run, once run() has opened it

    def start_executor(self) -> Executor:
        """Start Ray (or join the cluster) unless an executor was given. ``run()`` calls
        it; call it first in the main thread when the study itself runs in another one
        (Ray's init needs real stdio)."""
        if self.executor is None:
            from advisor.runner.ray_executor import RayExecutor

            self.executor = RayExecutor(self.plan.hardware.device, self.options.ray_address,
                                        env=trial_env(self.plan), preload=self.plan.preload()).start()
        return self.executor

    def run(self) -> StudyOutcome:
        executor = self.start_executor()
        context = RunContext.open(self.plan, executor, self._stop, self.emit)
        self._study_run = StudyRun(context)
        try:
            self._study_run.run()
        except (BaselineFailed, WorkloadError) as exc:  # the baseline failed (with --skip-preflight: model.py did)
            if _forget_unmeasured(context):
                said = str(exc)
                then = "\n" if "\n" in said else ". "  # below a traceback, not glued onto its last line
                raise type(exc)(f"{said}{then}The study held nothing else, so it was not kept: fix model.py and run "
                                "the same command again") from None
            raise
        return StudyOutcome(context.study, self._stop.reason or self._study_run.stop_reason,
                            self._study_run.space_exhausted)

    def stop(self, reason: str) -> None:
        """Ask a running study to stop: no new trials; running ones are cancelled and
        recorded (not counted), and ``run()`` returns. Safe to call from another thread."""
        if self._stop.request(reason):
            self.emit(Note(f"stopping ({reason}): cancelling running trials"))

    @property
    def storage(self) -> Any:
        """The Optuna storage, once ``run()`` has opened it (None before)."""
        return self._study_run.context.storage if self._study_run is not None else None

    @property
    def stop_reason(self) -> str | None:
        """Why no more trials start (the budget, the time, the user), or None."""
        return self._study_run.stop_reason if self._study_run is not None else self._stop.reason


def _forget_unmeasured(context: RunContext) -> bool:
    """Delete the study when its baseline failed and it holds nothing measured
    (``nothing_measured``): a failed first run leaves nothing behind that would refuse the
    same command once model.py is fixed. True if deleted."""
    import optuna

    from advisor.study.run._drivers import nothing_measured

    if not nothing_measured(context.study, context.drivers):
        return False
    optuna.delete_study(study_name=context.study.study_name, storage=context.storage)
    return True


def trial_env(plan: StudyPlan) -> dict[str, str]:
    """What trials start with beyond the driver's environment: the libraries' offline
    switches (``advisor.workload.downloads``) once the preflight has filled this machine's
    caches. Not with --skip-preflight (nothing was fetched) nor on a Ray cluster (the other
    nodes' caches were not filled: their first trial fetches)."""
    return trial_switches(plan.options.ray_address, fetched=not plan.options.skip_preflight)

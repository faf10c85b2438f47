"""``--log-to``: the study's trials logged to experiment trackers (MLflow, TensorBoard,
Weights & Biases), each through its own library, as the study stores them.

``open_trackers(plan)`` opens the trackers the options name, before the study starts: a
tracker that cannot be opened (its library broken, its store unreachable, W&B not logged
in) is a StudyError (exit status 2), as bad input is. ``Trackers`` is then a listener of
the study's events (``advisor.core.events``), called in the study's thread, the driver,
never in a trial process: what it logs is built once (``advisor.outputs.tracker_logs``)
and handed to each tracker (``tracker_mlflow``, ``tracker_tensorboard``,
``tracker_wandb``), each with its own way of holding it:

- the study starts (``Started``): the study's run, and one note saying where each logs;
- a trial is stored (``Finished``): a run of its own (the baseline's figures also go to
  the study's run);
- a confirmation pair lands (``Paired``): the confirmed ratios and intervals so far;
- ``close(outcome)`` after the study: the front and the counts, the study's run closed.

``advisor confirm --log-to`` (``open_confirm_trackers``, on the stored study) logs its
confirmation pairs to the same places: the trial's MLflow run and TensorBoard folder as
``advisor tune`` left them (found again by the study's and trial's tags or folder), the
study's MLflow run going on; on W&B, whose finished runs take nothing more, a run of its
own (job type ``confirmation``) in the study's group. It logs no trial, and starts only
when the first pair lands (a confirmation refused before it runs logs nothing).

Only the trials this run of the study stores are logged (a ``Finished`` event is emitted
once, when a trial is stored): a resumed study does not log its earlier trials again, and
MLflow and TensorBoard skip a trial they already hold. A tracker that fails (its server
down, its disk full) never stops the study: it is dropped, with one note saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from advisor.core.errors import StudyError
from advisor.core.events import Event, Finished, Listener, Note, Paired, Started, ignore
from advisor.core.metric import DEFAULT_METRIC
from advisor.core.stored import StoredStudy, read_study
from advisor.core.units import first_line
from advisor.outputs.tracker_logs import (
    Confirmed,
    EndLog,
    StudyLog,
    TrialLog,
    baseline_metrics,
    confirmation_log,
    confirmed,
    end_log,
    study_log,
    trial_log,
)
from advisor.study.options.option import naming
from advisor.study.options.tune_options import TuneOptions

if TYPE_CHECKING:
    from advisor.study.run.plan import StudyPlan
    from advisor.study.run.tuner import StudyOutcome


class Tracker(Protocol):
    """One tracker, opened (its library imported, its store reached) for one study."""

    name: str  # as --log-to names it
    where: str  # where it logs, for the note: "MLflow experiment 'x' at sqlite:///mlflow.db"

    def start(self, study: StudyLog) -> None: ...

    def trial(self, trial: TrialLog) -> None: ...

    def study(self, metrics: dict[str, float], tags: dict[str, str]) -> None: ...

    def confirmed(self, c: Confirmed) -> None: ...

    def finish(self, end: EndLog) -> None: ...


def _open(name: str, where: str | None, study: str) -> Tracker:
    if name == "mlflow":
        from advisor.outputs.tracker_mlflow import MlflowTracker

        return MlflowTracker(where, study)
    if name == "tensorboard":
        from advisor.outputs.tracker_tensorboard import TensorBoardTracker

        return TensorBoardTracker(where, study)
    from advisor.outputs.tracker_wandb import WandbTracker

    return WandbTracker(where, study)


def _open_all(log_to: Sequence[str], study: str, option: str, python: bool) -> list[Tracker]:
    opened: list[Tracker] = []
    for entry in log_to:
        name, _, where = entry.partition(":")
        given = f"{option}{entry!r}" if python else f"{option} {entry}"
        try:
            opened.append(_open(name, where or None, study))
        except StudyError as exc:
            raise StudyError(f"{given}: {exc}") from None
        except Exception as exc:  # the library's own error: import, URI, store, credentials
            raise StudyError(f"{given}: cannot log there ({type(exc).__name__}: {first_line(exc, 500)})") from None
    return opened


def open_trackers(plan: StudyPlan, python: bool = False) -> Trackers:
    """The trackers ``plan.options.log_to`` names, opened; a StudyError naming the option as
    the caller wrote it (``--log-to`` or ``log_to=``) for one that cannot be."""
    option = naming(TuneOptions, python)("log_to")
    return Trackers(plan, _open_all(plan.options.log_to, plan.study_name, option, python))


def open_confirm_trackers(study: StoredStudy | None, log_to: Sequence[str]) -> Trackers:
    """``advisor confirm --log-to``: the trackers ``log_to`` names (as ``read_trackers``
    gives them), opened for the stored ``study`` (None: no tracker named, nothing to read);
    a StudyError for one that cannot be."""
    if study is None or not log_to:
        return Trackers(None)
    return Trackers(None, _open_all(log_to, study.name, naming(TuneOptions, False)("log_to"), False), stored=study)


class Trackers:
    """The listener of the opened trackers (none: it does nothing). ``notify`` receives its
    notes (where it logs, a tracker dropped); by default they are lost: set it to the
    study's listener. For a study being run (``plan``), or for ``advisor confirm`` on a
    stored one (``stored``)."""

    def __init__(self, plan: StudyPlan | None, trackers: Sequence[Tracker] = (),
                 stored: StoredStudy | None = None) -> None:
        self.plan = plan
        self.log: Callable[[], StudyLog]
        if plan is not None:
            self.name, self.metric = plan.study_name, plan.workload.metric_spec
            self.log = lambda: study_log(plan)
        elif stored is not None:
            self.name, self.metric = stored.name, stored.metric
            self.log = lambda: confirmation_log(stored)
        else:  # nothing to log to
            assert not trackers, "trackers need a plan or a stored study"
            self.name, self.metric = "", DEFAULT_METRIC
            self.log = lambda: StudyLog("", {}, {})
        self.confirming = plan is None
        self.active: list[Tracker] = list(trackers)
        self.notify: Listener = ignore
        self.started = False
        self.baseline_logged = False

    def begin(self) -> None:
        """The study's run (or the confirmation's) started, and one note saying where."""
        self.started = True
        log = self.log()
        self._each("starting the study's run", lambda t: t.start(log))
        if self.active:
            what = "the confirmation pairs as they land" if self.confirming else "each trial as it is stored"
            self.notify(Note(f"logging {what} to " + "; ".join(t.where for t in self.active)))

    def event(self, event: Event) -> None:
        if not self.active:
            return
        if not self.started and (isinstance(event, Started) or (self.confirming and isinstance(event, Paired))):
            self.begin()
        if not self.started or isinstance(event, Started):
            return
        if isinstance(event, Finished) and not self.confirming:
            trial = trial_log(event, self.name, self.metric)
            self._each(f"logging trial {event.number}", lambda t: t.trial(trial))
            figures = event.record.figures
            if event.record.baseline and figures is not None and not self.baseline_logged:
                self.baseline_logged = True
                metrics = baseline_metrics(figures, self.metric)
                self._each("logging the baseline", lambda t: t.study(metrics, {}))
        elif isinstance(event, Paired):
            c = confirmed(event.confirmation)
            self._each(f"logging trial {c.number}'s confirmation", lambda t: t.confirmed(c))

    def close(self, outcome: StudyOutcome | None) -> None:
        """The study is over (``outcome`` None: it raised): the front and the counts, the
        study's run closed."""
        if not self.started or not self.active:
            self.active = []
            return
        status = "failed" if outcome is None else "interrupted" if outcome.interrupted else "finished"
        if self.confirming and outcome is None:
            status = "interrupted"  # the confirmation failed, not the study: its run is not marked failed
        end = EndLog(status, tags={"status": status})
        if outcome is not None:
            try:
                end = end_log(read_study(outcome.study), status, outcome.stop_reason, self.baseline_logged)
            except Exception as exc:  # the storage gone: the runs are still closed
                self.notify(Note(f"--log-to: the front was not logged ({first_line(exc, 200)})"))
        self._each("closing the study's run", lambda t: t.finish(end))
        self.active = []

    def _each(self, what: str, call: Callable[[Tracker], None]) -> None:
        for tracker in list(self.active):
            try:
                call(tracker)
            except Exception as exc:
                self.active.remove(tracker)
                self.notify(Note(f"--log-to {tracker.name}: {what} failed ({type(exc).__name__}: "
                                 f"{first_line(exc, 300)}); nothing more is logged to {tracker.name}, the study "
                                 "goes on"))

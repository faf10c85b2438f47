"""The events a running study emits, replayed from a real stored study (``recorded_study``:
real Optuna storage, fixed figures) to ``--log-to``'s listener, with a real plan
(``plan_study`` on the digits MLP): Started, a Finished per stored trial, confirmation
pairs landing for trial 2 (stored as the study's attribute, as ``Confirmer`` stores them),
then the end."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import optuna

from advisor.core.events import Event, Finished, Note, Paired, Started
from advisor.core.pairs import Confirmation, Pair
from advisor.core.stored import CONFIRMATION, read_study, stored_result
from advisor.outputs.trackers import Trackers, open_trackers
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run.plan import StudyPlan, plan_study
from advisor.study.run.tuner import StudyOutcome

from conftest import EXAMPLES
from recorded_study import NAME, write_recorded_study

CONFIRMED = 2  # the trial whose confirmation lands
RATIOS = (1.71, 1.74, 1.76)  # its throughput ratio in each pair (made up)


def recorded(tmp_path: Any) -> tuple[str, optuna.Study]:
    url = f"sqlite:///{tmp_path / 'recorded.db'}"
    return url, write_recorded_study(url)


def plan(url: str, log_to: tuple[str, ...], name: str = NAME) -> StudyPlan:
    options = TuneOptions(workload_path=str(EXAMPLES / "digits_mlp.py"), storage=url, study_name=name, trials=11,
                          log_to=log_to)
    return plan_study(options)


def finished(study: optuna.Study) -> list[Finished]:
    """A Finished event per stored trial, as ``Parts`` emits it when the trial is stored."""
    stored = read_study(study)
    events = []
    for r in stored.records:
        result = replace(stored_result(r.attrs), ok=r.state in ("complete", "probed"))
        versus = None if r.baseline else stored.versus_baseline(r)
        events.append(Finished(r.number, r.config, result, r.get("wall_s", 0.0), r, versus))  # type: ignore[arg-type]
    return events


def confirmation(pairs: int) -> Confirmation:
    status = "confirmed" if pairs == len(RATIOS) else "running"
    return Confirmation(CONFIRMED, [Pair(0.5, 6736.0, 6736.0 * ratio, 98.6, 131.0, [0.01, 0.01, 0.01])
                                    for ratio in RATIOS[:pairs]], status)


def replay(study: optuna.Study, trackers: Trackers, stop_reason: str | None = None) -> list[Event]:
    """Hand ``trackers`` a study's events as a study would, then close it; returns the
    notes it sent."""
    notes: list[Event] = []
    trackers.notify = notes.append
    trackers.event(Started(1.0, 1, {"num_cpus": 2}))
    for event in finished(study):
        trackers.event(Note("a note the trackers ignore"))
        trackers.event(event)
    config = read_study(study).records[CONFIRMED].config
    for pairs in range(1, len(RATIOS) + 1):
        c = confirmation(pairs)
        study.set_user_attr(f"{CONFIRMATION}{CONFIRMED}", c.to_dict())  # as Confirmer stores it, then tells
        trackers.event(Paired(CONFIRMED, config, c, 3.0))  # type: ignore[arg-type]
    trackers.close(StudyOutcome(study, stop_reason))
    return notes


def run(tmp_path: Any, log_to: tuple[str, ...]) -> tuple[optuna.Study, list[Event]]:
    """A recorded study replayed to the trackers ``log_to`` names."""
    url, study = recorded(tmp_path)
    return study, replay(study, open_trackers(plan(url, log_to)))


def tune_only(url: str, study: optuna.Study, log_to: tuple[str, ...], events: list[Finished] | None = None) -> None:
    """What ``advisor tune --log-to`` logs of ``study`` without a confirmation: its finished
    trials (or ``events``) handed to the trackers, which are then closed."""
    trackers = open_trackers(plan(url, log_to))
    trackers.event(Started(1.0, 1, {"num_cpus": 2}))
    for event in finished(study) if events is None else events:
        trackers.event(event)
    trackers.close(StudyOutcome(study, None))

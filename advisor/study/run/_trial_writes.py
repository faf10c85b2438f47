"""How a trial ends in storage: ``tell_trial``, the one place Optuna is told a trial is over;
``record_result``, a one-part trial's result stored and told; ``fail_stale``, the trials a
gone driver left running marked failed. ``advisor.study.run._ledger.Ledger`` writes everything
else a trial holds; only it and the drivers (``fail_stale``) call these."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from advisor.core.latency import KEY as LATENCY
from advisor.core.latency import Latency
from advisor.core.objectives import Figures, Limits
from advisor.core.results import TrialResult
from advisor.core.stored import DRIVER, PROBE_DONE, result_attrs

if TYPE_CHECKING:
    import optuna


def tell_trial(study: optuna.Study, trial: optuna.Trial | int, figures: Figures | None = None,
               constraints: dict[str, float] | None = None, pruned: bool = False) -> optuna.trial.FrozenTrial:
    """Tell Optuna that ``trial`` (an ``optuna.Trial``, or a number for a trial asked
    elsewhere) is over: complete with ``figures`` and its ``constraints``, stored as probed
    only (``pruned``), or failed (no figures). The only place a trial is told."""
    import optuna

    if figures is not None:
        assert not isinstance(trial, int), "a complete trial is told through its optuna.Trial"
        for key, value in (constraints or {}).items():
            trial.set_constraint(key, value)
    failed = optuna.trial.TrialState.PRUNED if pruned else optuna.trial.TrialState.FAIL
    return study.tell(trial, None if figures is None else list(figures), state=None if figures is not None else failed)


def record_result(study: optuna.Study, trial: optuna.Trial, result: TrialResult, wall_s: float,
                  limits: Limits, reference: float | None) -> optuna.trial.FrozenTrial:
    """Store one trial's result: every figure as a user attribute, the objectives, and the
    constraints against the baseline's metric (its own, for the baseline) and, for an
    inference trial, its p99 latency against the limit; a failure as FAIL."""
    for key, value in result_attrs(result, wall_s).items():
        trial.set_user_attr(key, value)
    if not result.ok:
        return tell_trial(study, trial)
    figures = Figures(result.throughput, result.peak_memory_bytes, result.score)  # type: ignore[arg-type]
    reference = figures.score if reference is None else reference
    latency = Latency.from_dict(result.telemetry.get(LATENCY))  # an inference trial's: --max-latency-ms
    return tell_trial(study, trial, figures, limits.constraints(figures, reference,
                                                               latency.p99_ms if latency is not None else None))


def fail_stale(study: optuna.Study, storage: Any, keep_probed: bool = True,
               alive: Callable[[str | None], bool] = lambda driver: False, young_s: float = 0.0) -> list[int]:
    """Mark the trials a gone driver left RUNNING as failed ('interrupted', not counted:
    their configurations run again), through Optuna's public storage API. A trial whose
    driver is ``alive`` (``advisor.study.run._drivers``: another driver on the same study) is
    left alone, and so are those whose probe is stored when ``keep_probed`` (two-stage
    evaluation goes on with their training run), and those younger than ``young_s`` that
    name no driver yet. Returns their numbers."""
    import optuna

    now = datetime.datetime.now()  # Optuna's start times are naive local times

    def gone(t: optuna.trial.FrozenTrial) -> bool:
        driver = t.user_attrs.get(DRIVER)
        if driver is None and t.datetime_start is not None and (now - t.datetime_start).total_seconds() < young_s:
            return False  # just asked for by a driver that has not tagged it yet
        return not alive(driver)

    running = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
               # probed: resumed with its probe (advisor.study.run._training_queue)
               if gone(t) and not (keep_probed and t.user_attrs.get(PROBE_DONE))]
    study_id = storage.get_study_id_from_name(study.study_name)
    failed = []
    for t in running:
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        try:
            storage.set_trial_user_attr(trial_id, "failure_class", "interrupted")
            storage.set_trial_user_attr(trial_id, "failure_message",
                                        "the driver running it stopped (marked failed by a later driver)")
            tell_trial(study, t.number)
        except (RuntimeError, ValueError):  # another driver marked it first (UpdateFinishedTrialError)
            continue
        failed.append(t.number)
    return failed

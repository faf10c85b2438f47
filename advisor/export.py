"""Choose a trial (by number or by a pick rule) and write its configuration to a file."""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any

from advisor import storage as st
from advisor.config import FORMAT_VERSION, TrialConfig
from advisor.errors import StudyError

if TYPE_CHECKING:
    import optuna

PICKS = ("fastest", "smallest", "most-accurate", "balanced")


def pick(study: optuna.Study, how: str) -> optuna.trial.FrozenTrial:
    """A trial of the feasible Pareto front.

    fastest: highest throughput; smallest: lowest peak memory; most-accurate: highest
    accuracy; balanced: closest to the ideal point after scaling each objective to [0, 1]
    over the front (ties go to the faster trial).
    """
    front = st.pareto_front(study)
    if not front:
        raise StudyError(f"study {study.study_name!r} has no feasible completed trial to pick from")
    if how == "fastest":
        return max(front, key=lambda t: t.values[0])
    if how == "smallest":
        return min(front, key=lambda t: t.values[1])
    if how == "most-accurate":
        return max(front, key=lambda t: t.values[2])
    if how == "balanced":
        return min(front, key=lambda t: (_distance_to_ideal(t, front), -t.values[0]))
    raise StudyError(f"--pick {how!r} is unknown (expected one of {', '.join(PICKS)})")


def _distance_to_ideal(trial: optuna.trial.FrozenTrial, front: list[optuna.trial.FrozenTrial]) -> float:
    total = 0.0
    for i, direction in enumerate(st.DIRECTIONS):
        values = [t.values[i] for t in front]
        lo, hi = min(values), max(values)
        if hi == lo:
            continue
        score = (trial.values[i] - lo) / (hi - lo)
        if direction == "minimize":
            score = 1.0 - score
        total += (1.0 - score) ** 2
    return total**0.5


def trial_by_number(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    """The completed trial ``number``; a duplicate resolves to the trial it repeated."""
    trials = study.get_trials(deepcopy=False)
    if not 0 <= number < len(trials):
        raise StudyError(f"study {study.study_name!r} has no trial {number} (trials 0-{len(trials) - 1})")
    trial = trials[number]
    if "duplicate_of" in trial.user_attrs:
        trial = trials[trial.user_attrs["duplicate_of"]]
    if trial.state.name != "COMPLETE":
        cls = trial.user_attrs.get("failure_class", trial.state.name.lower())
        raise StudyError(f"trial {number} of study {study.study_name!r} did not complete ({cls}): "
                         f"{trial.user_attrs.get('failure_message', 'no result')}; nothing to export")
    return trial


def export_document(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The export file's content: the config, where it came from, what was measured."""
    u = trial.user_attrs
    base = st.baseline_trial(study)
    measured = {k: u.get(k) for k in ("throughput", "peak_memory_bytes", "accuracy", "step_time_median_s",
                                      "step_time_iqr_s", "compile_s")}
    if base is not None and trial.values:
        b = base.values
        measured["vs_baseline"] = {"throughput_ratio": _ratio(trial.values[0], b[0]),
                                   "memory_ratio": _ratio(trial.values[1], b[1]),
                                   "accuracy_delta": trial.values[2] - b[2]}
    return {
        "advisor_config": FORMAT_VERSION,
        "config": {**TrialConfig().to_dict(), **u["config"]},  # every knob, also for older studies
        "source": {
            "study": study.study_name,
            "trial": trial.number,
            "workload": study.user_attrs.get("workload_path"),
            "workload_sha256": study.user_attrs.get("workload_sha256"),
            "workload_kind": study.user_attrs.get("workload", "train"),  # apply(..., workload=this)
            "train_samples": study.user_attrs.get("settings", {}).get("train_samples"),
            "exported": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
        "measured": measured,
        "hardware": study.user_attrs.get("hardware", {}),
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None

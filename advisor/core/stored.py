"""A trial as the study stores it, and read back.

Every figure a trial measured is an Optuna user attribute (readable by any Optuna tool,
optuna-dashboard included); its three objectives are the trial's ``values`` and its
constraints Optuna's. ``read_trial`` is the one place that turns a stored trial (an Optuna
``FrozenTrial``) back into a ``TrialRecord`` (``read_study``: a whole study into a
``StoredStudy``): the explorer, export, report and the search strategy all read trials
through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.objectives import Figures, Versus, pareto_front, satisfied, versus
from advisor.core.results import NOT_COUNTED, TrialResult

# user-attribute keys besides the TrialResult fields
CONFIG, CONFIG_KEY, WALL = "config", "config_key", "wall_s"
BASELINE, DUPLICATE_OF, SKIPPED = "baseline", "duplicate_of", "skipped"
SEED_CONFIG, COMBINATION = "seed_config", "combination"  # set when the strategy enqueues a trial


@dataclass(frozen=True)
class TrialRecord:
    """One stored trial, typed.

    ``state`` is what a reader needs to tell apart: ``complete``, ``failed`` (it ran and
    failed, or was cut short), ``skipped`` (not run: it could not work, or would run out of
    memory like an earlier trial), ``duplicate`` (answered from trial ``duplicate_of``),
    ``running`` or ``waiting`` (enqueued, not started).
    """

    number: int
    state: str
    config: TrialConfig | None
    figures: Figures | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    baseline: bool = False
    failure_class: str | None = None
    failure_message: str | None = None
    duplicate_of: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)  # every stored attribute, for display

    @property
    def feasible(self) -> bool:
        return self.figures is not None and satisfied(self.constraints)

    @property
    def counted(self) -> bool:
        """Counts towards ``--trials``: it completed, or its configuration failed.

        Duplicates, skipped configurations and trials cut short (Ctrl-C, the study's
        timeout, a killed driver, a lost node) do not count; resuming runs the cut-short
        ones again.
        """
        if self.state == "complete":
            return True
        return self.state == "failed" and self.failure_class not in NOT_COUNTED

    @property
    def description(self) -> str:
        """The configuration in one line ('' when none was stored)."""
        return self.config.describe() if self.config is not None else ""

    @property
    def seed(self) -> bool:
        """Enqueued by the default strategy (a one-knob seed or a combination)."""
        return SEED_CONFIG in self.attrs

    def get(self, key: str, default: Any = None) -> Any:
        """A stored attribute (a TrialResult field such as ``step_time_median_s``)."""
        return self.attrs.get(key, default)


def read_trial(trial: Any) -> TrialRecord:
    """The record of a stored Optuna trial (a ``FrozenTrial``)."""
    attrs = dict(trial.user_attrs)
    stored = attrs.get(CONFIG)
    config = TrialConfig.from_dict(stored) if isinstance(stored, dict) else None
    state_name = trial.state.name
    if DUPLICATE_OF in attrs:
        state = "duplicate"
    elif attrs.get(SKIPPED):
        state = "skipped"
    elif state_name == "COMPLETE":
        state = "complete"
    elif state_name in ("RUNNING", "WAITING"):
        state = state_name.lower()
    else:
        state = "failed"
    figures = Figures(*trial.values) if state_name == "COMPLETE" and trial.values else None
    return TrialRecord(number=trial.number, state=state, config=config, figures=figures,
                       constraints=dict(getattr(trial, "constraints", None) or {}),
                       baseline=bool(attrs.get(BASELINE)), failure_class=attrs.get("failure_class"),
                       failure_message=attrs.get("failure_message"), duplicate_of=attrs.get(DUPLICATE_OF),
                       attrs=attrs)


def config_attrs(config: TrialConfig) -> dict[str, Any]:
    """What is stored about a trial's configuration as soon as it is decided."""
    return {CONFIG: config.to_dict(), CONFIG_KEY: config.key()}


def result_attrs(result: TrialResult, wall_s: float) -> dict[str, Any]:
    """What is stored of a trial's result: every measured field that has a value."""
    attrs = {k: v for k, v in result.to_dict().items() if k != "ok" and v is not None}
    attrs[WALL] = wall_s
    return attrs


def skipped_attrs(config: TrialConfig, reason: str, failure_class: str) -> dict[str, Any]:
    """A configuration recorded without running it, and why."""
    return {**config_attrs(config), SKIPPED: True, "failure_class": failure_class, "failure_message": reason}


@dataclass(frozen=True)
class StoredStudy:
    """A stored study read once: its attributes and every trial as a record."""

    name: str
    attrs: dict[str, Any]
    records: list[TrialRecord]

    @cached_property
    def baseline(self) -> TrialRecord | None:
        """The completed baseline trial (trial 0 unless it had to be re-run), or None."""
        return next((r for r in self.records if r.baseline and r.state == "complete"), None)

    def front(self) -> list[TrialRecord]:
        """The feasible Pareto front: completed feasible trials no other one dominates
        (duplicates left out), by trial number."""
        pool = [r for r in self.records if r.state == "complete" and r.feasible]
        return pareto_front(pool, lambda r: r.figures)  # type: ignore[arg-type, return-value]

    def versus_baseline(self, record: TrialRecord) -> Versus:
        """``record``'s figures relative to the baseline's."""
        base = self.baseline
        return versus(record.figures, base.figures if base is not None else None)


def read_study(study: Any) -> StoredStudy:
    """A stored Optuna study (``optuna.Study``) read into a ``StoredStudy``."""
    return StoredStudy(study.study_name, dict(study.user_attrs),
                       [read_trial(t) for t in study.get_trials(deepcopy=False)])

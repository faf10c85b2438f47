"""The study's own attributes (Optuna study user attributes), typed: every module that
writes one, or reads one back from a live study, does it through ``StudyAttrs``.

Optuna cannot change a finished trial, so what a study learns about its trials later is
stored with the study, keyed by trial number: paired confirmations, the metric over more
seeds. Besides those: what the study is (its model, options and settings: ``identity``,
written once by the plan and checked on resume), what it measured of its baseline (the
metric's noise over seeds, its re-measurements, whether trial 0 ran on a disturbed
machine), its progress (the combination step done) and its drivers (heartbeats, claims of
the steps one driver runs for all). ``advisor.core.stored.StoredStudy`` is the read-once
view of the same keys for everything that reads a stored study.

A live study's attributes are read from its storage on each call: other drivers on the
same study write too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from advisor.core.metric import MetricSpec
from advisor.core.noise import MetricNoise
from advisor.core.pairs import Confirmation
from advisor.core.study_metric import METRIC_SEEDS

CONFIRMATION = "confirmation:"  # + trial number: that trial's paired confirmation
BASELINE_MEASUREMENTS = "baseline_measurements"  # the baseline's re-measurements (probes)
METRIC_NOISE = "accuracy_noise"  # the baseline's metric over several seeds (its stored key)
BASELINE_DISTURBED = "baseline_disturbed"  # why trial 0's speed is not a reference (its sentinel was off)
METRIC = "metric"  # the study's metric (MetricSpec.to_dict)
COMBINED = "combined"  # the default strategy's combination step has run
DRIVER_PREFIX = "driver:"  # + driver id: that driver's heartbeat
CLAIM_PREFIX = "claim:"  # + step: the driver running a step for all of them
TRAINING_BUDGET = "training_budget"  # the default training budget's decision
IDENTITY_MARK = "workload_path"  # written by every advisor study's plan: tells advisor's studies apart


class _Study(Protocol):
    """What of an Optuna study this needs."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...

    def set_user_attr(self, key: str, value: Any) -> None: ...


class StudyAttrs:
    """A live study's own attributes, read and written by name and type."""

    def __init__(self, study: _Study) -> None:
        self.study = study

    def all(self) -> dict[str, Any]:
        """Every attribute as stored now (one read of the storage)."""
        return dict(self.study.user_attrs)

    # ---- what the study is -------------------------------------------------------------
    def write_identity(self, attrs: Mapping[str, Any]) -> None:
        """The plan's attributes of a new study (or a resumed one's, after its checks), the
        identity mark last: another driver opening the same study meanwhile sees it as advisor's
        only once the whole identity is stored (``being_created`` until then)."""
        for key, value in attrs.items():
            if key != IDENTITY_MARK:
                self.study.set_user_attr(key, value)
        if IDENTITY_MARK in attrs:
            self.study.set_user_attr(IDENTITY_MARK, attrs[IDENTITY_MARK])

    def metric(self) -> MetricSpec:
        return MetricSpec.from_dict(self.study.user_attrs.get(METRIC))

    # ---- what it measured of its baseline ----------------------------------------------
    def has_metric_noise(self) -> bool:
        return METRIC_NOISE in self.study.user_attrs

    def metric_noise(self) -> MetricNoise | None:
        return MetricNoise.from_dict(self.study.user_attrs.get(METRIC_NOISE))

    def metric_noise_curves(self) -> list[Any]:
        """The learning curves of the baseline's seed runs (the metric gate reads them)."""
        return list((self.study.user_attrs.get(METRIC_NOISE) or {}).get("curves") or [])

    def set_metric_noise(self, noise: MetricNoise, curves: list[Any]) -> None:
        self.study.set_user_attr(METRIC_NOISE, noise.to_dict() | ({"curves": curves} if curves else {}))

    def baseline_measurements(self) -> list[dict[str, Any]]:
        return list(self.study.user_attrs.get(BASELINE_MEASUREMENTS) or [])

    def add_baseline_measurement(self, entry: dict[str, Any]) -> list[dict[str, Any]]:
        """Appends ``entry`` to the measurements as stored now (another driver may have
        added its own since this one last read them); returns them all."""
        measurements = self.baseline_measurements() + [entry]
        self.study.set_user_attr(BASELINE_MEASUREMENTS, measurements)
        return measurements

    def baseline_disturbed(self) -> bool:
        return bool(self.study.user_attrs.get(BASELINE_DISTURBED))

    def set_baseline_disturbed(self, why: str) -> None:
        self.study.set_user_attr(BASELINE_DISTURBED, why)

    # ---- what it learnt of its trials later --------------------------------------------
    def set_confirmation(self, confirmation: Confirmation) -> None:
        self.study.set_user_attr(f"{CONFIRMATION}{confirmation.trial}", confirmation.to_dict())

    def set_metric_seeds(self, trial: int, seeds: list[int], values: list[float]) -> None:
        self.study.set_user_attr(f"{METRIC_SEEDS}{trial}", {"seeds": seeds, "values": values})

    # ---- its progress and its drivers --------------------------------------------------
    def combined(self) -> bool:
        return bool(self.study.user_attrs.get(COMBINED))

    def mark_combined(self) -> None:
        self.study.set_user_attr(COMBINED, True)

    def heartbeats(self, attrs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every driver's last heartbeat, by driver id (from ``attrs`` when given: one read)."""
        attrs = self.study.user_attrs if attrs is None else attrs
        return {k[len(DRIVER_PREFIX):]: v for k, v in attrs.items() if k.startswith(DRIVER_PREFIX)}

    def set_heartbeat(self, driver: str, beat: dict[str, Any] | None) -> None:
        self.study.set_user_attr(DRIVER_PREFIX + driver, beat)

    def claimed_by(self, step: str, attrs: Mapping[str, Any] | None = None) -> str | None:
        attrs = self.study.user_attrs if attrs is None else attrs
        value = attrs.get(CLAIM_PREFIX + step)
        return value if isinstance(value, str) else None

    def set_claim(self, step: str, driver: str | None) -> None:
        self.study.set_user_attr(CLAIM_PREFIX + step, driver)


def is_advisor_study(attrs: Mapping[str, Any], directions: int) -> bool:
    """A study advisor wrote (three objectives and its plan's attributes), not another
    program's Optuna study in the same storage."""
    return directions == 3 and IDENTITY_MARK in attrs


def being_created(attrs: Mapping[str, Any], directions: int, trials: int) -> bool:
    """A study another `advisor tune` has just created and is still writing its identity
    into (Optuna creates a study first, its attributes follow one by one): advisor's three
    objectives, no identity mark yet and no trial. Another program's empty three-objective
    study looks the same until its creator has had the time to write one."""
    return directions == 3 and IDENTITY_MARK not in attrs and trials == 0

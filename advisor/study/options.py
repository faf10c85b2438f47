"""``TuneOptions``: what a study is asked to do (``advisor tune``'s flags), and their
validation. Problems are named by the flag a user typed."""

from __future__ import annotations

import math
from dataclasses import dataclass

from advisor.core.errors import StudyError
from advisor.core.noise import ACCURACY_SEEDS
from advisor.core.objectives import Limits
from advisor.core.pairs import DEFAULT_MAX_PAIRS, DEFAULT_TARGET, DEFAULT_TOP
from advisor.core.results import check_workload_kind
from advisor.search.samplers import check_sampler
from advisor.study.confirm import ConfirmOptions, check_confirm_options

ACCURACY_MODES = ("selective", "all")


@dataclass(frozen=True)
class TuneOptions:
    """The options of one study; ``check()`` refuses bad values before anything runs."""

    workload_path: str
    space: str | None = None  # None: "default" for training, "inference" for inference
    workload: str = "train"
    storage: str | None = None
    study_name: str | None = None
    trials: int = 20
    timeout: float | None = None
    trial_timeout: float | None = None
    max_accuracy_drop: float = 0.01  # how much worse the metric may get (--max-metric-drop)
    max_drop_relative: bool = False  # ... as a fraction of the baseline's metric ("1%")
    memory_cap: int | None = None
    sampler: str = "default"
    seed: int = 0
    train_samples: int | None = None
    ray_address: str | None = None
    skip_preflight: bool = False
    confirm: bool = True  # paired confirmation of the front at the end (--no-confirm)
    confirm_top: int = DEFAULT_TOP
    pairs: int = DEFAULT_MAX_PAIRS
    confirm_target: float = DEFAULT_TARGET
    accuracy_seeds: int = ACCURACY_SEEDS
    accuracy: str = "selective"  # two-stage evaluation; "all": every trial trains in full, as before
    ignore_doctor: bool = False  # keep the options that failed `advisor doctor` on this machine

    @property
    def two_stage(self) -> bool:
        """Probe every configuration, train only those that could reach the front."""
        return self.accuracy == "selective" and self.workload == "train"

    @property
    def confirm_options(self) -> ConfirmOptions:
        return ConfirmOptions(self.confirm_top, self.pairs, self.confirm_target)

    @property
    def limits(self) -> Limits:
        """What makes a trial feasible in this study."""
        return Limits(self.max_accuracy_drop, self.memory_cap, self.max_drop_relative)

    @property
    def drop_text(self) -> str:
        """The limit as the user wrote it: '0.01' or '1%'."""
        return f"{100 * self.max_accuracy_drop:g}%" if self.max_drop_relative else f"{self.max_accuracy_drop:g}"

    @property
    def space_name(self) -> str:
        """The space asked for, or the workload's default preset."""
        return self.space or ("inference" if self.workload == "inference" else "default")

    def check(self) -> TuneOptions:
        """Raise StudyError for the first bad option; return the options when all are good."""
        if self.trials < 1:
            raise StudyError(f"--trials must be at least 1, found {self.trials}")
        for flag, value in (("--timeout", self.timeout), ("--trial-timeout", self.trial_timeout)):
            if value is not None and not value > 0:
                raise StudyError(f"{flag} must be a positive number of seconds, found {value}")
        if not 0 <= self.max_accuracy_drop < math.inf:
            raise StudyError(f"--max-metric-drop must be >= 0, found {self.drop_text}")
        if self.max_drop_relative and self.max_accuracy_drop > 1:
            raise StudyError(f"--max-metric-drop must be at most 100% of the baseline's metric, found {self.drop_text}")
        if self.memory_cap is not None and not self.memory_cap > 0:
            raise StudyError(f"--memory-cap must be positive, found {self.memory_cap}")
        check_workload_kind(self.workload, "--workload")
        check_sampler(self.sampler)
        if self.train_samples is not None and self.train_samples < 1:
            raise StudyError(f"--train-samples must be at least 1, found {self.train_samples}")
        check_confirm_options(self.confirm_options)
        if self.accuracy_seeds < 1:
            raise StudyError(f"--accuracy-seeds must be at least 1 (1: no noise estimate), found {self.accuracy_seeds}")
        if self.accuracy not in ACCURACY_MODES:
            raise StudyError(f"--accuracy must be one of {', '.join(ACCURACY_MODES)}, found {self.accuracy!r}")
        if self.skip_preflight and self.train_samples is None and self.workload == "train":
            raise StudyError("--train-samples is required with --skip-preflight (how many samples each trial trains on)")
        return self

"""What a trial is given and what it returns: plain data that crosses process
boundaries (Ray, the fork server, a rank's JSON file) unchanged.

- ``TrialPayload``: the workload's identity and code, one ``TrialConfig``, the study's
  ``TrialSettings``;
- ``TrialResult``: what the trial measured, or why it failed (a failure class, never an
  exception).
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.errors import ConfigError, WorkloadError
from advisor.core.settle import MIN_BLOCKS, TOLERANCE

FAILURE_CLASSES = ("oom", "timeout", "crash", "error", "unsupported", "cancelled", "interrupted", "node_lost",
                   "device_busy")
# Stopped by the user, a dead driver, a lost cluster node or a GPU still held by another
# process: not the configuration's doing, so not counted (the configuration may run again).
NOT_COUNTED = ("interrupted", "cancelled", "node_lost", "device_busy")
# Phases of a trial that are the configuration's own work (the rest is per-trial overhead:
# process start, imports, loading the workload and its data).
COMPUTE_PHASES = ("build", "train", "eval", "extra_timing", "timing", "latency", "curve")
EPOCHS_BY_DEFAULT = 5
WORKLOADS = ("train", "inference")  # what a study tunes: training steps, or serving
# The parts a trial runs as (``TrialSettings.part``): "full", timed steps, the training
# budget and the evaluation in one process; or, with two-stage evaluation, a "probe" (timed
# steps and peak memory only) and later a "training" run (the training budget and the
# evaluation only, with a learning curve and the gate: ``TrialPayload.gate``).
PARTS = ("full", "probe", "training")
OLDER_PARTS = {"accuracy": "training"}  # a part by its older name (stored settings: "stage"), read as today's


def check_workload_kind(kind: Any, where: str) -> str:
    """``kind`` if it is "train" or "inference"; else a ConfigError naming ``where``."""
    if kind not in WORKLOADS:
        raise ConfigError(f"{where} is {kind!r}, expected train or inference")
    return kind


def default_train_samples(train_size: int | None) -> int:
    """What each trial trains on when the user does not say: 5 epochs of the training set.
    A training stream (``train_size`` None) has no epochs to count: the user must say."""
    if train_size is None:
        raise WorkloadError("the training set is a stream (no length to count 5 epochs of): say how many samples "
                            "each trial trains on, with --train-samples N (advisor.tune(train_samples=N))")
    return EPOCHS_BY_DEFAULT * train_size


@dataclass
class TrialSettings:
    """How trials measure; the same for every trial of a study (stored with it)."""

    train_samples: int
    seed: int = 0
    warmup_steps: int = 3  # untimed steps before timing starts (the rest of a warm-up is cut as it shows)
    min_steps: int = MIN_BLOCKS  # timed steps before any verdict
    timing_tolerance: float = TOLERANCE  # stop once the step time's median is known to +-this (advisor.core.settle)
    max_timing_s: float = 5.0
    warmup_s: float = 0.0  # seconds of steps left untimed, besides warmup_steps
    device: str = "cpu"
    workload: str = "train"  # or "inference": forward passes only, no training
    part: str = "full"  # which of ``PARTS`` the trial runs
    # the batch every trial's validation runs in (the baseline's): a metric that does not average
    # over batches (macro-F1) then reads the same whatever a trial's batch_size; None: the trial's own
    eval_batch_size: int | None = None

    def __post_init__(self) -> None:
        self.part = OLDER_PARTS.get(self.part, self.part)
        if self.part not in PARTS:
            raise ValueError(f"TrialSettings.part is {self.part!r}, expected one of {', '.join(PARTS)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSettings:
        """Settings as stored; fields a newer version added take their defaults, and the
        part's older key ("stage", from before issue 28) is read as ``part``."""
        known = {f.name for f in fields(cls)}
        data = {"part": data["stage"], **data} if "stage" in data else data
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class TrialPayload:
    """Everything a trial process needs: the workload's code (so a node without the file
    runs the same code) and hash, one configuration and the study's settings."""

    workload_path: str
    workload_source: str
    workload_sha256: str
    config: TrialConfig
    settings: TrialSettings
    gate: dict[str, Any] | None = None  # a training run's early-stop gate (``advisor.core.two_stage.Gate``)
    # estimate the peak memory first (``advisor.trial.estimate``) and do not run a configuration
    # whose estimate is over ``memory_cap`` (bytes per rank) or the device's memory
    estimate: bool = False
    memory_cap: int | None = None
    # the study's interference limit (``advisor.core.interference``); None: the trial's own blocks decide
    interference_limit: float | None = None
    # the study's timing tolerance from its own noise (``advisor.core.settle.tolerance_from``);
    # None: the settings' ``timing_tolerance``
    timing_tolerance: float | None = None
    # the process that made the payload (the study's, or a user's notebook): "host:pid". It waits
    # while the trial runs, so a CUDA context it holds is not another job's (advisor.machine.device_idle)
    driver: str | None = None
    # a file the trial's process creates as it starts (set by an executor on the trial's machine):
    # its trial timeout counts from then, not from the submission (``advisor.runner.executor.overran``)
    started_file: str | None = None
    # what the trial's fork server imports ahead, as "module:name" (``Technique.preload``): set by
    # the executor from the knob values its study may try; a running server is not replaced for it
    preload: tuple[str, ...] = ()

    @classmethod
    def of(cls, workload: Any, config: TrialConfig, settings: TrialSettings,
           gate: dict[str, Any] | None = None, estimate: bool = False, memory_cap: int | None = None,
           interference_limit: float | None = None, timing_tolerance: float | None = None) -> TrialPayload:
        """From a loaded workload (anything with ``path``, ``source`` and ``sha256``), made
        by this process (its ``driver``)."""
        return cls(str(workload.path), workload.source, workload.sha256, config, settings, gate, estimate, memory_cap,
                   interference_limit, timing_tolerance, this_process())

    def to_dict(self) -> dict[str, Any]:
        return {"workload_path": self.workload_path, "workload_source": self.workload_source,
                "workload_sha256": self.workload_sha256, "config": self.config.to_dict(),
                "settings": self.settings.to_dict(), "gate": self.gate, "estimate": self.estimate,
                "memory_cap": self.memory_cap, "interference_limit": self.interference_limit,
                "timing_tolerance": self.timing_tolerance, "driver": self.driver, "started_file": self.started_file,
                "preload": list(self.preload)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialPayload:
        return cls(data["workload_path"], data["workload_source"], data["workload_sha256"],
                   TrialConfig.from_dict(data["config"]), TrialSettings.from_dict(data["settings"]), data.get("gate"),
                   bool(data.get("estimate", False)), data.get("memory_cap"), data.get("interference_limit"),
                   data.get("timing_tolerance"), data.get("driver"), data.get("started_file"),
                   tuple(data.get("preload") or ()))

    def driver_pid_here(self) -> int | None:
        """The driver's pid when it runs on this machine, else None."""
        host, _, pid = (self.driver or "").rpartition(":")
        return int(pid) if pid.isdigit() and host == socket.gethostname() else None


def this_process() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class TrialResult:
    """What one trial measured, or why it failed. Plain data only."""

    ok: bool
    failure_class: str | None = None
    failure_message: str | None = None
    throughput: float | None = None          # samples/s (batch_size / median step time)
    peak_memory_bytes: int | None = None
    score: float | None = None               # the workload's metric on the whole validation set, as its
    #                                          score (higher is better: advisor.core.metric); stored as "accuracy"
    step_time_median_s: float | None = None
    step_time_iqr_s: float | None = None
    timed_steps: int = 0
    timing_converged: bool = False
    first_step_s: float | None = None
    compile_s: float = 0.0
    train_samples: int = 0
    final_loss: float | None = None
    phase_s: dict[str, float] = field(default_factory=dict)
    telemetry: dict[str, Any] = field(default_factory=dict)
    host: str = ""
    pid: int = 0
    skipped: bool = False  # not run: the trial's own check refused it first (a memory estimate over the limit)
    memory_estimate: dict[str, Any] | None = None  # the peak per rank estimated before it ran (advisor.trial.estimate)
    # joules per sample over the timed steps, from each GPU's total-energy counter (NVML;
    # all ranks' GPUs together); None without a GPU or the counter
    energy_per_sample_j: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def compute_s(self) -> float:
        return sum(v for k, v in self.phase_s.items() if k.removeprefix("training_") in COMPUTE_PHASES)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        return cls(**data)

    @classmethod
    def failed(cls, failure_class: str, message: str, **extra: Any) -> TrialResult:
        if failure_class not in FAILURE_CLASSES:
            raise ValueError(f"unknown failure class {failure_class!r} (known: {', '.join(FAILURE_CLASSES)})")
        return cls(ok=False, failure_class=failure_class, failure_message=message, **extra)

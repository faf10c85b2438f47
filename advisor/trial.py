"""run_trial(): one configuration, measured in the current (fresh) process.

Runs in a process of its own (forked by advisor/warm.py, or a fresh Ray worker); returns plain data (a dict of a TrialResult) and never raises
for a failure of the configuration: that is a result with a failure class.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from advisor.errors import UnsupportedError, WorkloadError

FAILURE_CLASSES = ("oom", "timeout", "crash", "error", "unsupported", "cancelled", "interrupted", "node_lost",
                   "device_busy")


@dataclass
class TrialSettings:
    """How trials measure; the same for every trial of a study (stored with it)."""

    train_samples: int
    seed: int = 0
    warmup_steps: int = 3
    min_steps: int = 10
    target_rel_iqr: float = 0.10
    max_timing_s: float = 5.0
    warmup_s: float = 0.25
    device: str = "cpu"
    workload: str = "train"  # or "inference": forward passes only, no training

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Phases of a trial that are the configuration's own work (the rest is per-trial overhead:
# process start, imports, loading the workload and its data).
COMPUTE_PHASES = ("build", "train", "eval", "extra_timing", "timing")


@dataclass
class TrialResult:
    """What one trial measured, or why it failed. Plain data only."""

    ok: bool
    failure_class: str | None = None
    failure_message: str | None = None
    throughput: float | None = None          # samples/s (batch_size / median step time)
    peak_memory_bytes: int | None = None
    accuracy: float | None = None            # the workload's metric on the whole validation set
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def compute_s(self) -> float:
        return sum(self.phase_s.get(p, 0.0) for p in COMPUTE_PHASES)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        return cls(**data)

    @classmethod
    def failed(cls, failure_class: str, message: str, **extra: Any) -> TrialResult:
        assert failure_class in FAILURE_CLASSES, failure_class
        return cls(ok=False, failure_class=failure_class, failure_message=message, **extra)


def classify(exc: BaseException) -> str:
    """Map an exception raised while running a configuration to a failure class."""
    import torch

    if isinstance(exc, UnsupportedError):
        return "unsupported"
    if isinstance(exc, torch.OutOfMemoryError) or isinstance(exc, MemoryError):
        return "oom"
    text = str(exc).lower()
    if isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text):
        return "oom"
    return "error"


def make_payload(workload: Any, config: Any, settings: TrialSettings) -> dict[str, Any]:
    """What a trial worker needs: the workload's code (so a node without the file runs the
    same code), its hash, one configuration and the study's settings. Plain data."""
    return {"workload_path": str(workload.path), "workload_source": workload.source,
            "workload_sha256": workload.sha256, "config": config.to_dict(), "settings": settings.to_dict()}


def run_trial(payload: dict[str, Any]) -> dict[str, Any]:
    """Measure one configuration. ``payload`` holds the workload, config and settings.

    Returns ``TrialResult.to_dict()``; failures come back as data with a class.
    """
    started = time.perf_counter()
    host, pid = socket.gethostname(), os.getpid()
    devices = payload["config"].get("devices", 1)
    parallel = payload["config"].get("parallelism", "single") != "single" and devices > 1
    idle = _devices_idle(payload["settings"].get("device", "cpu"), devices if parallel else 1)
    if idle is not None and not all(c.ok for c in idle):
        result = TrialResult.failed("device_busy", "; ".join(c.note for c in idle if not c.ok) +
                                    ": not measured, so that no figure is polluted (the configuration may run again)")
    elif parallel:
        from advisor.ranks import run_ranks

        result = run_ranks(payload, devices)  # one process per rank; this one supervises
    else:
        result = measure_here(payload, started)
    if idle is not None:
        result.telemetry["device_idle_check"] = [c.to_dict() for c in idle]
    result.phase_s["total"] = time.perf_counter() - started
    result.host, result.pid = host, pid
    return result.to_dict()


def _devices_idle(device: str, count: int) -> list[Any] | None:
    """On CUDA: wait until each of this trial's GPUs is free of other processes (NVML)."""
    if device != "cuda":
        return None
    from advisor.device_idle import nvml_index, wait_until_idle

    return [wait_until_idle(nvml_index(i)) for i in range(count)]


def measure_here(payload: dict[str, Any], started: float) -> TrialResult:
    """Measure in this process; a failure of the configuration comes back as a result."""
    # Imported before anything is measured: part of the "import" phase (instant in a warm
    # process), never of a trial's peak memory. torch._dynamo is imported lazily by every
    # optimizer's constructor (~70 MiB here), which would otherwise land inside the measured window.
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401

    from advisor.steps import NonFiniteLoss, measure
    from advisor.workload import load_workload

    phases: dict[str, float] = {"import": time.perf_counter() - started}
    try:
        return measure(payload, lambda p: _load(p, load_workload), phases)
    except Exception as exc:  # a failure of the configuration is a result, not a crash
        if isinstance(exc, (UnsupportedError, WorkloadError, NonFiniteLoss)):
            message = str(exc)
        else:
            tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
            message = f"{type(exc).__name__}: {exc}\n{tail}".strip()
        return TrialResult.failed(classify(exc), message[-4000:], phase_s=phases)


def _load(payload: dict[str, Any], load_workload: Any) -> Any:
    """Load model.py from its path; if this node lacks the file, from the shipped source."""
    path, source, sha = payload["workload_path"], payload["workload_source"], payload["workload_sha256"]
    workload = load_workload(path, source=None if os.path.exists(path) else source)
    if workload.sha256 != sha:
        raise WorkloadError(f"{path} changed since the study started (content hash differs); "
                            "start a new study (--study NAME) to tune the new version")
    return workload

"""run_trial(): one configuration, measured in the current (fresh) process.

Runs inside a Ray worker; returns plain data (a dict of a TrialResult) and never raises
for a failure of the configuration: that is a result with a failure class.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from advisor.config import TrialConfig
from advisor.errors import UnsupportedError, WorkloadError

FAILURE_CLASSES = ("oom", "timeout", "crash", "error", "unsupported", "cancelled", "interrupted")


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Phases of a trial that are the configuration's own work (the rest is per-trial overhead:
# process start, imports, loading the workload and its data).
COMPUTE_PHASES = ("build", "train", "eval", "extra_timing")


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


class NonFiniteLoss(Exception):
    pass


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


def run_trial(payload: dict[str, Any]) -> dict[str, Any]:
    """Measure one configuration. ``payload`` holds the workload, config and settings.

    Returns ``TrialResult.to_dict()``; failures come back as data with a class.
    """
    started = time.perf_counter()
    host, pid = socket.gethostname(), os.getpid()
    try:
        result = _measure({**payload, "_t0": started})
    except Exception as exc:  # a failure of the configuration is a result, not a crash
        if isinstance(exc, (UnsupportedError, WorkloadError, NonFiniteLoss)):
            message = str(exc)
        else:
            tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
            message = f"{type(exc).__name__}: {exc}\n{tail}".strip()
        result = TrialResult.failed(classify(exc), message[-4000:])
    result.phase_s["total"] = time.perf_counter() - started
    result.host, result.pid = host, pid
    return result.to_dict()


def _measure(payload: dict[str, Any]) -> TrialResult:
    import torch
    from torch.utils.data import DataLoader

    from advisor.apply import apply
    from advisor.measure import NvmlSampler, StepTimer, peak_memory_for
    from advisor.workload import build_model, check_metric, load_datasets, load_workload

    phases: dict[str, float] = {"import": time.perf_counter() - payload.get("_t0", time.perf_counter())}
    t = time.perf_counter()
    config = TrialConfig.from_dict(payload["config"])
    settings = TrialSettings(**payload["settings"])
    workload = _load(payload, load_workload)
    train, val = load_datasets(workload)
    device = torch.device("cuda", 0) if settings.device == "cuda" else torch.device("cpu")
    phases["load"] = time.perf_counter() - t

    t = time.perf_counter()
    memory = peak_memory_for(device)
    memory.reset()
    torch.manual_seed(settings.seed)
    prepared = apply(build_model(workload), config, device)
    optimizer = workload.optimizer(prepared.module.parameters())
    phases["build"] = time.perf_counter() - t
    generator = torch.Generator().manual_seed(settings.seed)
    bs = config.batch_size
    if bs > len(train):
        raise UnsupportedError(f"batch size {bs} is larger than the training set ({len(train)} samples)")
    loader = DataLoader(train, batch_size=bs, shuffle=True, drop_last=True, generator=generator,
                        pin_memory=device.type == "cuda")
    batches = _cycle(loader)
    sampler = NvmlSampler(device.index or 0).start() if device.type == "cuda" else None
    timer = StepTimer(settings.min_steps, settings.target_rel_iqr, settings.max_timing_s, prepared.synchronize)

    def step(timed: bool) -> Any:
        with timer.step() if timed else contextlib.nullcontext():  # data loading is timed too
            x, y = next(batches)
            return prepared.train_step(x, y, workload.loss, optimizer)

    # 1. Train for the study's fixed number of samples; warm-up steps are untimed.
    t = time.perf_counter()
    t_warm = t
    steps = max(1, round(settings.train_samples / bs))
    first_step_s, loss, warm = 0.0, None, False
    for i in range(steps):
        t_step = time.perf_counter()
        # Warm-up: at least warmup_steps and warmup_s of steps before timing starts.
        warm = warm or (i >= settings.warmup_steps and t_step - t_warm >= settings.warmup_s + first_step_s)
        loss = step(timed=warm and not timer.done())
        if i == 0:
            prepared.synchronize()
            first_step_s = time.perf_counter() - t_step
        if i % 10 == 0 or i == steps - 1:
            _check_finite(loss, i)
    phases["train"] = time.perf_counter() - t

    # 2. Accuracy on the whole validation set.
    t = time.perf_counter()
    prepared.model.eval()
    total, weighted = 0, 0.0
    with torch.inference_mode():
        for x, y in DataLoader(val, batch_size=bs):
            out = prepared.predict(x)
            n = len(y)
            weighted += check_metric(workload, workload.metric(out, prepared.to_device(y))) * n
            total += n
    accuracy = weighted / total
    phases["eval"] = time.perf_counter() - t

    # 3. More timed steps if the timing has not settled yet (accuracy is already taken).
    t = time.perf_counter()
    prepared.model.train()
    while not timer.done():
        step(timed=True)
    phases["extra_timing"] = time.perf_counter() - t

    timing = timer.result()
    telemetry = sampler.stop() if sampler else {}
    peak = memory.peak_bytes()
    if hasattr(memory, "reserved_bytes"):
        telemetry["reserved_peak_bytes"] = memory.reserved_bytes()
    telemetry["peak_memory_exact"] = getattr(memory, "exact", True)
    telemetry["timing"] = timing.to_dict()  # the measurement's spread, for a reader to judge
    return TrialResult(
        ok=True,
        throughput=bs / timing.median_s,
        peak_memory_bytes=peak,
        accuracy=accuracy,
        step_time_median_s=timing.median_s,
        step_time_iqr_s=timing.iqr_s,
        timed_steps=timing.steps,
        timing_converged=timing.converged,
        first_step_s=first_step_s,
        compile_s=max(0.0, first_step_s - timing.median_s) if prepared.compiled else 0.0,
        train_samples=steps * bs,
        final_loss=float(loss) if loss is not None else None,
        phase_s=phases,
        telemetry=telemetry,
    )


def _load(payload: dict[str, Any], load_workload: Any) -> Any:
    """Load model.py from its path; if this node lacks the file, from the shipped source."""
    path, source, sha = payload["workload_path"], payload["workload_source"], payload["workload_sha256"]
    workload = load_workload(path, source=None if os.path.exists(path) else source)
    if workload.sha256 != sha:
        raise WorkloadError(f"{path} changed since the study started (content hash differs); "
                            "start a new study (--study NAME) to tune the new version")
    return workload


def _cycle(loader: Any) -> Any:
    while True:
        yield from loader


def _check_finite(loss: Any, step: int) -> None:
    value = float(loss)
    if not math.isfinite(value):
        raise NonFiniteLoss(f"loss became {value} at step {step}: this configuration diverged")

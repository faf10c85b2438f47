"""``run_trial(payload)``: the entry point of a trial's process. Measures one
configuration and returns a ``TrialResult``; a failure of the configuration is a result
with a failure class, never an exception.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.core.results import TrialPayload, TrialResult
from advisor.machine.device_idle import IdleCheck

if TYPE_CHECKING:
    from advisor.trial.single import Loaded


def run_trial(payload: TrialPayload) -> TrialResult:
    """Measure ``payload.config``: in this process, or with one process per rank when it
    is data-parallel. On CUDA, first wait until this trial's GPUs are free of other
    processes; a GPU still held is ``device_busy`` (not the configuration's doing)."""
    started = time.perf_counter()
    if payload.started_file:  # this trial's timeout counts from now (advisor.runner.executor.overran)
        with contextlib.suppress(OSError):
            Path(payload.started_file).touch()
    config = payload.config
    parallel = config.parallelism != "single" and config.devices > 1
    loaded = None
    if _estimated(payload) and not parallel:  # loaded once, for the estimate (a fork of this process) and the trial
        from advisor.trial.single import load_first

        loaded = load_first(payload, started)
    # a failure to load is the trial's result (run_in_this_process gives it back)
    estimate, too_big = _estimate(payload, loaded) if not isinstance(loaded, TrialResult) else (None, None)
    idle = None if too_big else _devices_idle(payload, config.devices if parallel else 1)
    if too_big:
        result = TrialResult.failed("oom", too_big, skipped=True)
    elif idle is not None and not all(c.ok for c in idle):
        result = TrialResult.failed("device_busy", "; ".join(c.note for c in idle if not c.ok) +
                                    ": not measured, so that no figure is polluted (the configuration may run again)")
    elif parallel:
        from advisor.trial.ranks import run_ranks

        result = run_ranks(payload, config.devices)  # one process per rank; this one supervises
    else:
        from advisor.trial.single import run_in_this_process

        result = run_in_this_process(payload, started, loaded)
    if idle is not None:
        result.telemetry["device_idle_check"] = [c.to_dict() for c in idle]
    if estimate is not None:
        result.memory_estimate = estimate
        result.phase_s["estimate"] = estimate.get("seconds", 0.0)
    result.phase_s["total"] = time.perf_counter() - started
    result.host, result.pid = socket.gethostname(), os.getpid()
    return result


def _estimated(payload: TrialPayload) -> bool:
    """Whether the study asks for this trial's memory estimate: a training trial's probe or full run."""
    settings = payload.settings
    return payload.estimate and settings.workload == "train" and settings.part != "training"


def _estimate(payload: TrialPayload, loaded: Loaded | None) -> tuple[dict | None, str | None]:
    """The configuration's peak memory estimated first, where the study asks for it, and
    why it cannot fit, if it cannot."""
    if not _estimated(payload):
        return None, None
    from advisor.trial.estimate import estimate_memory, over_limit

    estimate = estimate_memory(payload, loaded=loaded)
    return estimate, over_limit(estimate, payload.settings.device, payload.memory_cap)


def _devices_idle(payload: TrialPayload, count: int) -> list[IdleCheck] | None:
    """On CUDA: wait until each of this trial's GPUs is free of other processes (NVML);
    the study's own process, waiting for this trial, is not another."""
    if payload.settings.device != "cuda":
        return None
    import os

    from advisor.machine.device_idle import nvml_index, wait_until_idle

    ours = tuple(p for p in (os.getpid(), os.getppid(), payload.driver_pid_here()) if p is not None)
    return [wait_until_idle(nvml_index(i), own_pids=ours) for i in range(count)]

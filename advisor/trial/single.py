"""One process measures the configuration: load model.py, run the loop, and turn a
failure of the configuration into a result with its class (``oom``, ``unsupported``,
``error``). Runs in the trial's process, or in each rank's."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from advisor.core.errors import UnsupportedError, WorkloadError
from advisor.core.results import TrialPayload, TrialResult
from advisor.trial.errors import NonFiniteLoss
from advisor.workload.contract import Workload, load_datasets, load_workload
from advisor.workload.user_code import describe_exit, user_frames


@dataclass
class Loaded:
    """model.py and its datasets, loaded once in the trial's process: the memory estimate
    (forked from it) and the trial itself use them instead of loading them twice."""

    workload: Workload
    datasets: tuple[Any, Any]
    phases: dict[str, float]


def load_first(payload: TrialPayload, started: float) -> Loaded | TrialResult:
    """Load model.py and its datasets before anything else; a failure is the trial's result."""
    _import_before_measuring()
    phases: dict[str, float] = {"import": time.perf_counter() - started}
    try:
        t = time.perf_counter()
        workload = load_same_workload(payload)
        datasets = load_datasets(workload)
        phases["load"] = time.perf_counter() - t
        return Loaded(workload, datasets, phases)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a failure is a result, not a crash
        return TrialResult.failed(classify(exc), failure_message(exc)[-4000:], phase_s=phases)


def run_in_this_process(payload: TrialPayload, started: float,
                        loaded: Loaded | TrialResult | None = None) -> TrialResult:
    """Measure in this process; ``started`` is when the process began (import time);
    ``loaded``: what ``load_first`` loaded already, else it is loaded here."""
    from advisor.trial.loop import run_configuration

    loaded = loaded or load_first(payload, started)
    if isinstance(loaded, TrialResult):  # model.py or its datasets failed to load
        return loaded
    phases = dict(loaded.phases)
    try:
        return run_configuration(payload, loaded.workload, phases, loaded.datasets)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a failure is a result, not a crash
        # (a cancelled trial is killed, never interrupted: SystemExit and KeyboardInterrupt
        # here come from model.py's own code)
        return TrialResult.failed(classify(exc), failure_message(exc)[-4000:], phase_s=phases)


def _import_before_measuring() -> None:
    # Imported before anything is measured: part of the "import" phase (instant in a warm
    # process), never of a trial's peak memory. torch._dynamo is imported lazily by every
    # optimizer's constructor (~70 MiB here), which would otherwise land inside the measured window.
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401


def failure_message(exc: BaseException) -> str:
    """What a failed trial says: advisor's own errors as they are; an error raised in the
    user's code in its frames (``user_frames``: the last frames where it was raised when
    none is the user's)."""
    if isinstance(exc, (UnsupportedError, WorkloadError, NonFiniteLoss)):
        return str(exc)
    if isinstance(exc, SystemExit):
        return (f"model.py called {describe_exit(exc)} during the trial: model.py must not end "
                f"the process (its functions return, or raise an exception)\n{user_frames(exc)}").rstrip()
    if isinstance(exc, KeyboardInterrupt):
        return f"model.py raised KeyboardInterrupt itself during the trial\n{user_frames(exc)}".rstrip()
    return f"{type(exc).__name__}: {exc}\n{user_frames(exc)}".rstrip()


def load_same_workload(payload: TrialPayload) -> Workload:
    """Load model.py from its path (from the shipped source if this node lacks the file),
    refusing a file that changed since the study started."""
    path = payload.workload_path
    workload = load_workload(path, source=None if os.path.exists(path) else payload.workload_source)
    if workload.sha256 != payload.workload_sha256:
        raise WorkloadError(f"{path} changed since the study started (content hash differs); "
                            "start a new study (--study NAME) to tune the new version")
    return workload


def classify(exc: BaseException) -> str:
    """The failure class of an exception raised while running a configuration."""
    import torch

    if isinstance(exc, UnsupportedError):
        return "unsupported"
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return "oom"
    text = str(exc).lower()
    if isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text):
        return "oom"
    return "error"

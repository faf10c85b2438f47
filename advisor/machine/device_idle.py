"""Before a trial measures on a GPU: is the device back to its idle state? A previous
trial's process that has not yet exited (or another job) still holding memory or compute
on the device would pollute this trial's memory and speed figures, so the trial waits for
it to go, and if it does not, the trial is not run (failure class ``device_busy``, not
counted: the configuration may run again). Checked through NVML, without touching CUDA.

Ours, never waited for: the trial's process, its parent, and the study's own process (the
payload's driver: ``advisor tune``, or a notebook that called ``advisor.tune()`` with a
model on the GPU). Each waits while the trial runs; what they hold on the device is
recorded (``ours``), since the trial has that much less memory.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class IdleCheck:
    """The outcome: ``idle`` at once, ``released`` after waiting, ``busy`` when the wait
    ran out, or ``unchecked`` (no NVML, no driver) with the reason in ``note``."""

    status: str
    waited_s: float = 0.0
    used_bytes: int | None = None
    foreign: list[dict[str, Any]] = field(default_factory=list)  # pid, used_bytes of other processes
    ours: list[dict[str, Any]] = field(default_factory=list)  # pid, used_bytes of our processes holding it
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "busy"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def nvml_index(local_index: int = 0, visible: str | None = None) -> int | str:
    """NVML's handle key for torch's CUDA device ``local_index``: under
    ``CUDA_VISIBLE_DEVICES`` (Ray sets it per task) torch renumbers devices from 0 while
    NVML counts every GPU; a UUID entry is returned as is."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible:
        return local_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    entry = entries[local_index] if local_index < len(entries) else str(local_index)
    return int(entry) if entry.isdigit() else entry


def wait_until_idle(device: int | str, timeout_s: float = 30.0, poll_s: float = 0.5,
                    own_pids: tuple[int, ...] | None = None, nvml: Any = None) -> IdleCheck:
    """Wait until no process other than ours holds the GPU ``device`` (an NVML index or a
    UUID), for at most ``timeout_s``.

    Args:
        nvml: the ``pynvml`` module (tests pass a stand-in); imported when None.
    """
    own = set(own_pids if own_pids is not None else (os.getpid(), os.getppid()))
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded
        return IdleCheck("unchecked", note=f"NVML unavailable ({type(exc).__name__}); "
                                           "the device was not checked for leftover processes")
    started = time.monotonic()
    try:
        if isinstance(device, str):
            handle = nvml.nvmlDeviceGetHandleByUUID(device if device.startswith(("GPU-", "MIG-")) else f"GPU-{device}")
        else:
            handle = nvml.nvmlDeviceGetHandleByIndex(device)
        while True:
            holders = [{"pid": int(p.pid), "used_bytes": p.usedGpuMemory}
                       for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            foreign = [h for h in holders if h["pid"] not in own]
            used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
            waited = time.monotonic() - started
            if not foreign:
                return IdleCheck("idle" if waited < poll_s else "released", waited, used,
                                 ours=[h for h in holders if h["pid"] in own])
            if waited >= timeout_s:
                return IdleCheck("busy", waited, used, foreign,
                                 note=f"{len(foreign)} other process(es) still hold the GPU after {waited:.0f} s "
                                      f"(pids {', '.join(_named(f['pid']) for f in foreign)})")
            time.sleep(poll_s)
    except Exception as exc:
        return IdleCheck("unchecked", time.monotonic() - started, note=f"NVML query failed: {exc}")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _named(pid: int) -> str:
    """'4242 python3': a pid with its command's name, where this machine's /proc has it
    (NVML gives host pids: in a container another process's may not be visible)."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return f"{pid} {fh.read().strip()}"
    except OSError:
        return str(pid)


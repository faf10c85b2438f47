"""The noise sentinel: a fixed, tiny calibration kernel timed in every trial process just
before and just after its measured region.

The kernel never changes (a float32 matmul of fixed size, on a fixed number of CPU threads
or on the trial's GPU), so its time says how fast *the machine* was during the trial,
whatever the configuration does. A trial whose sentinel is far off the study's median ran
on a disturbed machine (another process, a throttled GPU) and is run again; the study
judges that (``advisor.study.sentinel``), this module only measures.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

SIZE = 256  # a 256 x 256 float32 matmul: ~34 MFLOP, about a millisecond on one CPU core
REPEATS = 5  # timed repeats; the median is the reading
INNER = 32  # matmuls per timed repeat (~5 ms on 2 CPU cores: longer than a scheduler slice)
# NVML clock-event reasons that slow a GPU down (SW power cap, HW slowdown, SW thermal,
# HW thermal, HW power brake)
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def sentinel_threads() -> int:
    """The CPU threads the kernel always uses: the CPUs this process may run on (a trial's
    own ``threads`` knob must not change the reading)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def read_sentinel(device: Any) -> dict[str, Any]:
    """Time the kernel on ``device`` (a torch.device); returns ``{"s": median seconds of
    one repeat, ...}`` and, on CUDA, the GPU's slowdown reasons at that moment."""
    import torch

    cuda = device.type == "cuda"
    threads = torch.get_num_threads()
    if not cuda:
        torch.set_num_threads(sentinel_threads())
    try:
        gen = torch.Generator(device="cpu").manual_seed(0)
        a = torch.rand(SIZE, SIZE, generator=gen).to(device)
        b = torch.rand(SIZE, SIZE, generator=gen).to(device)
        inner = INNER * 8 if cuda else INNER
        times = []
        for i in range(REPEATS + 1):  # the first repeat warms up and is not kept
            if cuda:
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            for _ in range(inner):
                torch.mm(a, b)
            if cuda:
                torch.cuda.synchronize(device)
            if i:
                times.append(time.perf_counter() - t)
    finally:
        torch.set_num_threads(threads)
    reading: dict[str, Any] = {"s": statistics.median(times)}
    if cuda:
        reading["slowdown_reasons"] = _slowdown_reasons(device)
    return reading


def _slowdown_reasons(device: Any) -> int | None:
    """The GPU's current slowdown reasons (an NVML bit mask, SLOWDOWN_MASK bits only), or
    None when NVML cannot say."""
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        try:
            uuid = getattr(torch.cuda.get_device_properties(device.index or 0), "uuid", None)
            if uuid:
                text = str(uuid)
                handle = pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}")
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
            return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)) & SLOWDOWN_MASK
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, an old driver without the call, nvidia-ml-py missing
        return None


def describe_kernel(device: Any) -> str:
    """What was timed, for a reader of the stored figures."""
    if device.type == "cuda":
        return f"{INNER * 8} float32 matmuls {SIZE}x{SIZE} on {device}, median of {REPEATS}"
    return f"{INNER} float32 matmuls {SIZE}x{SIZE} on {sentinel_threads()} CPU thread(s), median of {REPEATS}"

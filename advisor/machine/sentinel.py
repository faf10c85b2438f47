"""The noise sentinel: a fixed, tiny calibration kernel timed in every trial process just
before and just after its measured region.

The kernel never changes (a float32 matmul of fixed size, in plain float32 arithmetic
whatever TF32 setting the trial made, on a fixed number of CPU threads or on the trial's
GPU), so its time says how fast *the machine* was during the trial,
whatever the configuration does. A trial whose sentinel is far off the study's median ran
on a disturbed machine (another process, a throttled GPU) and is run again; the study
judges that (``advisor.study.confirmation.baseline_watch``, with ``advisor.core.noise``), this
module only measures.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

# CPU: 160 float32 128x128 matmuls a repeat (~4 ms on 2 cores: longer than a scheduler
# slice, so another busy process shows; 192 KiB of tensors, small beside any model's
# peak). Measured here: 3.7 ms quiet, 6.4-7.4 ms with one or two busy processes.
CPU_SIZE, CPU_INNER = 128, 160
GPU_SIZE, GPU_INNER = 1024, 64  # a GPU: 64 1024x1024 matmuls a repeat (12 MiB of tensors)
REPEATS = 5  # timed repeats; the median is the reading
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
    # plain float32 arithmetic, whatever the trial set: under its precision=tf32 the same
    # matmuls ran 3.9x faster on an H200, and the study took that for the machine drifting
    tf32, precision = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        size, inner = (GPU_SIZE, GPU_INNER) if cuda else (CPU_SIZE, CPU_INNER)
        gen = torch.Generator(device="cpu").manual_seed(0)
        a = torch.rand(size, size, generator=gen).to(device)
        b = torch.rand(size, size, generator=gen).to(device)
        out = torch.empty(size, size, device=device)
        times = []
        for i in range(REPEATS + 1):  # the first repeat warms up and is not kept
            if cuda:
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            for _ in range(inner):
                torch.mm(a, b, out=out)
            if cuda:
                torch.cuda.synchronize(device)
            if i:
                times.append(time.perf_counter() - t)
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)
        torch.backends.cuda.matmul.allow_tf32 = tf32
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
        return f"{GPU_INNER} float32 matmuls {GPU_SIZE}x{GPU_SIZE} on {device}, median of {REPEATS}"
    return f"{CPU_INNER} float32 matmuls {CPU_SIZE}x{CPU_SIZE} on {sentinel_threads()} CPU thread(s), median of {REPEATS}"

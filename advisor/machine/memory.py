"""Peak memory of the configuration being measured.

On CUDA, ``max_memory_allocated`` per device after ``reset_peak_memory_stats``; on CPU,
the process's peak resident set (``VmHWM`` in /proc/self/status, reset through
/proc/self/clear_refs) above its pre-model baseline. ``reset()`` before the model is
built; ``restart_peak()`` once it is built and the knobs applied, so that the figure is
the steady state's (the build's fp32 transient, before bf16 weights, quantization or FSDP
sharding, is kept apart as telemetry by the trial).
"""

from __future__ import annotations

import sys
from typing import Any


def _proc_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class CpuPeakMemory:
    """Peak resident memory of this process above a baseline, from VmHWM.

    ``ru_maxrss`` cannot be used: it is inherited across fork/exec and never resets.
    ``reset()`` clears the high-water mark (writing 5 to /proc/self/clear_refs) and
    takes the current resident size as the baseline.
    """

    def __init__(self) -> None:
        self.baseline = 0
        self.exact = True

    def reset(self) -> None:
        _map_library_pages()
        _release_free_heap()
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            self.exact = False  # cannot reset: the peak then includes what came before
        self.baseline = (_proc_status_kib("VmRSS") or 0) * 1024

    def restart_peak(self) -> None:
        """Forget the peak so far, keep the baseline: from here the peak is the steady
        state's (what is resident now, the built model, counts; a higher transient before
        it, the build, does not)."""
        _release_free_heap()
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            self.exact = False

    def peak_bytes(self) -> int:
        hwm = _proc_status_kib("VmHWM")
        if hwm is None:
            import resource

            self.exact = False
            maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return max(0, (maxrss if sys.platform == "darwin" else maxrss * 1024) - self.baseline)  # macOS: bytes
        return max(0, hwm * 1024 - self.baseline)


def _release_free_heap() -> None:
    """Give the heap's free pages back to the system (glibc ``malloc_trim``), so that what
    the configuration allocates next needs pages of its own and shows in the resident set.
    A process forked from the warm fork server inherits the server's free heap, resident
    already: allocations that reuse it would not raise the peak, by an amount that depends
    on the server's history (the same configuration measured 0.88x or 1.13x the baseline).
    No-op where glibc is absent."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # musl and others: nothing to trim
        return


def _map_library_pages() -> None:
    """Map every page of this process's file-backed mappings (shared libraries) now, so
    that code first run during the measured window does not count as the configuration's
    memory. (A process forked from the warm fork server starts with none of them mapped, a
    fresh one with those its imports touched: without this the two would differ by ~8 MiB.)
    Linux 5.14+ (MADV_POPULATE_READ); elsewhere it changes nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    try:
        with open("/proc/self/maps") as fh:
            lines = fh.readlines()
    except OSError:
        return
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or not parts[5].startswith("/") or "r" not in parts[1] or parts[5].startswith("/dev/"):
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        libc.madvise(start, end - start, 22)  # MADV_POPULATE_READ; an error leaves the mapping as it was


class CudaPeakMemory:
    """Peak bytes allocated by PyTorch on one CUDA device since ``reset()``."""

    def __init__(self, device: Any) -> None:
        self.device = device

    def reset(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def restart_peak(self) -> None:
        """Forget the peak so far: from here it is the steady state's (the allocator counts
        what is allocated now, the built model, and not the build's transients)."""
        self.reset()

    def peak_bytes(self) -> int:
        import torch

        return int(torch.cuda.max_memory_allocated(self.device))

    def reserved_bytes(self) -> int:
        import torch

        return int(torch.cuda.max_memory_reserved(self.device))


def peak_memory_for(device: Any) -> CpuPeakMemory | CudaPeakMemory:
    return CudaPeakMemory(device) if device.type == "cuda" else CpuPeakMemory()


def device_memory(device: str) -> int | None:
    """A GPU's total memory (NVML; CUDA stays uninitialised here), or the memory this
    machine has available now (/proc/meminfo)."""
    if device == "cuda":
        try:
            import pynvml

            from advisor.machine.device_idle import nvml_index

            pynvml.nvmlInit()
            return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(nvml_index(0))).total)
        except Exception:  # noqa: BLE001 - no NVML: no device limit to hold the estimate to
            return None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None

"""The measurement protocol: step timing, peak memory, NVML telemetry.

Timing: warm-up steps are excluded (the first steps, where torch.compile compiles, are
timed apart as compile time); every timed step ends with a device synchronisation; steps
are pooled into blocks of equal step count lasting about ``block_s`` seconds (so timer
noise does not dominate short steps) and timed until the interquartile range of the per-step block times is within
``target_rel_iqr`` of their median (at least ``min_steps`` steps and ``min_blocks`` blocks) or
``max_seconds`` of timed steps have run. Median and IQR are kept.

Peak memory: on CUDA, ``max_memory_allocated`` per device after ``reset_peak_memory_stats``
plus NVML device-level samples; on CPU, the process's peak resident set (``VmHWM`` in
/proc/self/status, reset through /proc/self/clear_refs) above its pre-model baseline.
"""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    median_s: float
    iqr_s: float
    steps: int
    timed_s: float
    converged: bool

    @property
    def rel_iqr(self) -> float:
        return self.iqr_s / self.median_s if self.median_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"rel_iqr": self.rel_iqr}



def median_iqr(samples: list[float]) -> tuple[float, float]:
    if len(samples) < 2:
        return (samples[0] if samples else 0.0), 0.0
    q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q2, q3 - q1


class StepTimer:
    """Collects per-step durations and decides when the estimate is good enough.

    Example:
        >>> timer = StepTimer(min_steps=5, max_seconds=1.0)
        >>> while not timer.done():
        ...     with timer.step():
        ...         pass
    """

    def __init__(self, min_steps: int = 10, target_rel_iqr: float = 0.10, max_seconds: float = 5.0,
                 sync: Any = None, block_s: float = 0.05, min_blocks: int = 10) -> None:
        self.min_steps = min_steps
        self.target_rel_iqr = target_rel_iqr
        self.max_seconds = max_seconds
        self.block_s = block_s
        self.min_blocks = min_blocks
        self.sync = sync or (lambda: None)
        self.samples: list[float] = []  # seconds per step, one per block
        self.steps = 0
        self.total_s = 0.0
        self._block = [0.0, 0]
        self._per_block = 0

    def step(self) -> _TimedStep:
        return _TimedStep(self)

    def add(self, seconds: float) -> None:
        """Record one step. Short steps are pooled into blocks of equal step count (sized
        from the first timed step to last about ``block_s``) so that timer and scheduler
        noise does not dominate a sample; the median is over the blocks' mean step time."""
        if self._per_block == 0:
            self._per_block = max(1, math.ceil(self.block_s / max(seconds, 1e-9)))
        self.steps += 1
        self.total_s += seconds
        self._block[0] += seconds
        self._block[1] += 1
        if self._block[1] >= self._per_block:
            self.samples.append(self._block[0] / self._block[1])
            self._block = [0.0, 0]

    def converged(self) -> bool:
        if self.steps < self.min_steps or len(self.samples) < self.min_blocks:
            return False
        median, iqr = median_iqr(self.samples)
        return median > 0 and iqr / median <= self.target_rel_iqr

    def capped(self) -> bool:
        return self.total_s >= self.max_seconds and bool(self.samples)

    def done(self) -> bool:
        return self.converged() or self.capped()

    def result(self) -> Timing:
        samples = self.samples or ([self._block[0] / self._block[1]] if self._block[1] else [])
        median, iqr = median_iqr(samples)
        return Timing(median, iqr, self.steps, self.total_s, self.converged())


class _TimedStep:
    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def __enter__(self) -> None:
        self.timer.sync()
        self.start = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.timer.sync()
            self.timer.add(time.perf_counter() - self.start)


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
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            self.exact = False  # cannot reset: the peak then includes what came before
        self.baseline = (_proc_status_kib("VmRSS") or 0) * 1024

    def peak_bytes(self) -> int:
        hwm = _proc_status_kib("VmHWM")
        if hwm is None:
            import resource

            self.exact = False
            maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return max(0, (maxrss if sys.platform == "darwin" else maxrss * 1024) - self.baseline)  # macOS: bytes
        return max(0, hwm * 1024 - self.baseline)


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

    def peak_bytes(self) -> int:
        import torch

        return int(torch.cuda.max_memory_allocated(self.device))

    def reserved_bytes(self) -> int:
        import torch

        return int(torch.cuda.max_memory_reserved(self.device))


def nvml_sampler_for(device: Any) -> NvmlSampler:
    """An NVML sampler for a torch CUDA device, matched by UUID when torch reports one."""
    import torch

    index = device.index or 0
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return NvmlSampler(index, uuid=str(uuid) if uuid else None)


def peak_memory_for(device: Any) -> CpuPeakMemory | CudaPeakMemory:
    return CudaPeakMemory(device) if device.type == "cuda" else CpuPeakMemory()


class NvmlSampler:
    """Samples one GPU's used memory, utilisation, power and throttle reasons via NVML.

    Runs in a background thread between ``start()`` and ``stop()``. Without an NVIDIA
    driver (or without nvidia-ml-py) it records nothing and says why in ``note``.
    """

    def __init__(self, index: int, interval_s: float = 0.05, uuid: str | None = None) -> None:
        self.index = index
        self.uuid = uuid  # NVML counts GPUs physically; under CUDA_VISIBLE_DEVICES, match by UUID
        self.interval_s = interval_s
        self.samples: list[dict[str, float]] = []
        self.note = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None

    def start(self) -> NvmlSampler:
        try:
            import pynvml

            pynvml.nvmlInit()
            if self.uuid:
                uuid = self.uuid if self.uuid.startswith(("GPU-", "MIG-")) else f"GPU-{self.uuid}"
                self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            else:
                self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self._nvml = pynvml
        except Exception as exc:  # ImportError or NVMLError_LibraryNotFound and kin
            self.note = f"NVML unavailable: {type(exc).__name__}"
            return self
        self._thread = threading.Thread(target=self._run, daemon=True, name="advisor-nvml")
        self._thread.start()
        return self

    def _run(self) -> None:
        nv = self._nvml
        while not self._stop.is_set():
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(self._handle)
                util = nv.nvmlDeviceGetUtilizationRates(self._handle)
                sample = {"used_bytes": float(mem.used), "gpu_util": float(util.gpu),
                          "power_w": nv.nvmlDeviceGetPowerUsage(self._handle) / 1000.0,
                          "sm_clock_mhz": float(nv.nvmlDeviceGetClockInfo(self._handle, nv.NVML_CLOCK_SM)),
                          "throttle": float(nv.nvmlDeviceGetCurrentClocksEventReasons(self._handle))}
                self.samples.append(sample)
            except Exception as exc:
                self.note = f"NVML sampling failed: {exc}"
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> dict[str, Any]:
        """Stop sampling; return a summary (peak used memory, mean utilisation, ...)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
        if not self.samples:
            return {"note": self.note or "no NVML samples"}
        # Power-cap and thermal slowdowns invalidate a timing: report them.
        slowdown = 0x4 | 0x20 | 0x40 | 0x80  # SW power cap, SW thermal, HW thermal, HW power brake
        throttled = sum(1 for s in self.samples if int(s["throttle"]) & slowdown)
        return {
            "device_peak_used_bytes": max(s["used_bytes"] for s in self.samples),
            "gpu_util_mean": statistics.fmean(s["gpu_util"] for s in self.samples),
            "power_w_mean": statistics.fmean(s["power_w"] for s in self.samples),
            "sm_clock_mhz_mean": statistics.fmean(s["sm_clock_mhz"] for s in self.samples),
            "throttled_fraction": throttled / len(self.samples),
            "samples": len(self.samples),
        }

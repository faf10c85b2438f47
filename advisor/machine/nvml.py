"""GPU telemetry through NVML: used memory, utilisation, power, clocks and throttle
reasons, sampled in a background thread while a trial runs."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any


def nvml_sampler_for(device: Any) -> NvmlSampler:
    """An NVML sampler for a torch CUDA device, matched by UUID when torch reports one."""
    import torch

    index = device.index or 0
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return NvmlSampler(index, uuid=str(uuid) if uuid else None)


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
        self.unavailable: dict[str, str] = {}  # reading -> why NVML could not give it
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
        """Sample until stopped. Each reading fails alone: one the driver does not support
        (clock-event reasons on an older driver, power on some boards) is noted in
        ``unavailable`` and no longer asked for; the others go on."""
        nv = self._nvml
        while not self._stop.is_set():
            sample = {}
            for name, read in READINGS.items():
                if name in self.unavailable:
                    continue
                try:
                    sample[name] = read(nv, self._handle)
                except Exception as exc:  # NVMLError_NotSupported and kin: this reading only
                    self.unavailable[name] = f"{type(exc).__name__}: {exc}"[:200]
            if not sample:  # nothing can be read any more
                self.note = "NVML sampling failed: " + "; ".join(f"{k}: {v}" for k, v in self.unavailable.items())
                return
            sample["t"] = time.perf_counter()
            self.samples.append(sample)
            self._stop.wait(self.interval_s)

    def _last_reading(self) -> None:
        """One more energy reading as sampling stops, so that the last timed window has a
        reading after it."""
        if self._nvml is None or "energy_mj" in self.unavailable or not self.samples:
            return
        try:
            reading = READINGS["energy_mj"](self._nvml, self._handle)
            self.samples.append({"energy_mj": reading, "t": time.perf_counter()})
        except Exception:  # noqa: BLE001 - the counter stopped answering: the windows before it still count
            pass

    def energy_over(self, windows: list[tuple[float, float]]) -> dict[str, float] | None:
        """The energy the GPU drew over ``windows`` (``perf_counter`` stretches, the timed
        steps), read from its total-energy counter (millijoules since the driver loaded)
        interpolated at each window's ends: ``{"joules", "seconds", "power_w"}``; None
        without the counter or without readings on both sides of every window."""
        points = [(s["t"], s["energy_mj"]) for s in self.samples if "energy_mj" in s]
        if len(points) < 2 or not windows:
            return None
        joules = seconds = 0.0
        for start, end in windows:
            if start < points[0][0] or end > points[-1][0]:
                return None
            joules += (_at(points, end) - _at(points, start)) / 1000.0
            seconds += end - start
        if seconds <= 0 or joules < 0:
            return None
        return {"joules": joules, "seconds": seconds, "power_w": joules / seconds}

    def stop(self) -> dict[str, Any]:
        """Stop sampling; return a summary (peak used memory, mean utilisation, ...) of the
        readings there are, and which readings NVML could not give (``unavailable``)."""
        from advisor.machine.sentinel import SLOWDOWN_MASK

        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self._last_reading()
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
        if not self.samples:
            return {"note": self.note or "no NVML samples"}

        def values(name: str) -> list[float]:
            return [s[name] for s in self.samples if name in s]

        summary: dict[str, Any] = {"samples": len(self.samples)}
        for key, name, reduce in (("device_peak_used_bytes", "used_bytes", max),
                                  ("gpu_util_mean", "gpu_util", statistics.fmean),
                                  ("power_w_mean", "power_w", statistics.fmean),
                                  ("sm_clock_mhz_mean", "sm_clock_mhz", statistics.fmean)):
            if values(name):
                summary[key] = reduce(values(name))
        throttle = values("throttle")
        if throttle:  # power-cap, thermal and hardware slowdowns invalidate a timing: report them
            summary["throttled_fraction"] = sum(1 for t in throttle if int(t) & SLOWDOWN_MASK) / len(throttle)
        if self.unavailable:
            summary["unavailable"] = dict(self.unavailable)
        return summary

    def util_over(self, windows: list[tuple[float, float]]) -> float | None:
        """The GPU's mean utilisation (NVML: the share of time a kernel ran) over the readings
        taken inside ``windows`` (the timed steps, without the build and the warm-up); None
        with fewer than 3 such readings."""
        inside = [s["gpu_util"] for s in self.samples
                  if "gpu_util" in s and any(a <= s["t"] <= b for a, b in windows)]
        return statistics.fmean(inside) if len(inside) >= 3 else None


STARVED_BELOW = 60.0  # percent: a baseline whose GPU is busier than this is not host-bound


def starved_text(telemetry: dict[str, Any] | None) -> str | None:
    """What to tell a user whose baseline kept its GPU busy less than ``STARVED_BELOW``
    percent of its timed steps, or None. (On an H200 a check model that fed 1,024
    TensorDataset rows a step kept its GPU 11-35% busy, and bf16 gained 1.05x.)"""
    util = (telemetry or {}).get("gpu_util_timed")
    if util is None or util >= STARVED_BELOW:
        return None
    return (f"the GPU was busy only {util:.0f}% of the baseline's timed steps (NVML): each step waits on the host "
            "(loading and collating the batch, Python, a synchronisation), so knobs that make the GPU's arithmetic "
            "faster (precision, fp8, compile) can gain little until that wait shrinks; num_workers and pin_memory "
            "act on the loading, a larger batch_size spreads it")


def _at(points: list[tuple[float, float]], t: float) -> float:
    """The counter's value at ``t``, interpolated between the readings around it."""
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]


# What each sample reads (nvidia-ml-py's functions), by name.
READINGS: dict[str, Callable[[Any, Any], float]] = {
    "used_bytes": lambda nv, h: float(nv.nvmlDeviceGetMemoryInfo(h).used),
    "gpu_util": lambda nv, h: float(nv.nvmlDeviceGetUtilizationRates(h).gpu),
    "power_w": lambda nv, h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
    "sm_clock_mhz": lambda nv, h: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
    "throttle": lambda nv, h: float(nv.nvmlDeviceGetCurrentClocksEventReasons(h)),
    "energy_mj": lambda nv, h: float(nv.nvmlDeviceGetTotalEnergyConsumption(h)),  # Volta and later
}

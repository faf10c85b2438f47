"""GPU telemetry through NVML: used memory, utilisation, power, clocks and throttle
reasons, sampled in a background thread while a trial runs."""

from __future__ import annotations

import statistics
import threading
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

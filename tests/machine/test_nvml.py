"""advisor/machine/nvml.py: GPU telemetry.

Correctness only: these tests check what the protocol reports, not how fast anything is.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from advisor.machine.nvml import NvmlSampler

# ---- NVML -----------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_nvml_sampler_without_a_gpu_reports_a_note():
    sampler = NvmlSampler(0, interval_s=0.01).start()
    time.sleep(0.05)
    summary = sampler.stop()
    assert set(summary) == {"note"}
    assert summary["note"].startswith("NVML unavailable")
    assert sampler.samples == []


def test_nvml_sampler_stopped_without_start():
    assert NvmlSampler(0).stop() == {"note": "no NVML samples"}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nvml_sampler_on_a_gpu():
    """Runs on a REAL CUDA GPU with its NVIDIA driver."""
    sampler = NvmlSampler(0, interval_s=0.01).start()
    a = torch.randn(2048, 2048, device="cuda")
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    summary = sampler.stop()
    assert "note" not in summary, summary
    assert summary["samples"] >= 1
    assert summary["device_peak_used_bytes"] > 0
    assert 0 <= summary["gpu_util_mean"] <= 100
    assert summary["power_w_mean"] > 0
    assert 0 <= summary["throttled_fraction"] <= 1


class FakeNvml:
    """A stand-in for nvidia-ml-py's module (no NVIDIA driver exists here): answers every
    reading but those named in ``unsupported``, which raise as NVML does on an old driver."""

    NVML_CLOCK_SM = 1

    def __init__(self, unsupported=(), throttle=0x8):
        self.unsupported, self.throttle = set(unsupported), throttle

    def _maybe_fail(self, name):
        if name in self.unsupported:
            raise RuntimeError(f"Not Supported ({name})")

    def nvmlDeviceGetMemoryInfo(self, h):
        self._maybe_fail("memory")
        return type("Memory", (), {"used": 2 ** 30})()

    def nvmlDeviceGetUtilizationRates(self, h):
        self._maybe_fail("utilization")
        return type("Utilization", (), {"gpu": 50})()

    def nvmlDeviceGetPowerUsage(self, h):
        self._maybe_fail("power")
        return 300_000

    def nvmlDeviceGetClockInfo(self, h, clock):
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._maybe_fail("throttle")
        return self.throttle

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        """Millijoules since the driver loaded: a board drawing a steady 300 W."""
        self._maybe_fail("energy")
        return 300.0 * 1000.0 * time.perf_counter()

    def nvmlShutdown(self):
        pass


def _sample_with(fake):
    sampler = NvmlSampler(0, interval_s=0.005)
    sampler._nvml, sampler._handle = fake, object()
    sampler._thread = threading.Thread(target=sampler._run, daemon=True)
    sampler._thread.start()
    time.sleep(0.05)
    return sampler.stop()


def test_an_unsupported_reading_fails_alone():
    """An older driver without clock-event reasons (and a board without power readings):
    memory, utilisation and clocks are still sampled the whole time."""
    summary = _sample_with(FakeNvml(unsupported={"throttle", "power", "energy"}))
    assert summary["samples"] >= 3
    assert summary["device_peak_used_bytes"] == 2 ** 30 and summary["gpu_util_mean"] == 50
    assert "throttled_fraction" not in summary and "power_w_mean" not in summary
    assert set(summary["unavailable"]) == {"throttle", "power_w", "energy_mj"}
    assert "Not Supported" in summary["unavailable"]["throttle"]


def test_energy_over_the_timed_windows_comes_from_the_counter():
    """The energy counter read around each timed window (interpolated between readings)
    gives the board's power over those windows only; a window outside the readings has no
    figure, and neither has a sampler without the counter."""
    sampler = NvmlSampler(0, interval_s=0.005)
    sampler._nvml, sampler._handle = FakeNvml(), object()
    sampler._thread = threading.Thread(target=sampler._run, daemon=True)
    sampler._thread.start()
    time.sleep(0.02)
    windows = []
    for _ in range(3):  # three timed stretches with untimed work between them
        start = time.perf_counter()
        time.sleep(0.03)
        windows.append((start, time.perf_counter()))
        time.sleep(0.01)
    summary = sampler.stop()
    energy = sampler.energy_over(windows)
    assert energy is not None and "energy_mj" not in summary.get("unavailable", {})
    assert energy["seconds"] == pytest.approx(sum(b - a for a, b in windows))
    assert energy["power_w"] == pytest.approx(300.0, rel=2e-3)  # under load a reading and its time stamp drift apart
    assert sampler.energy_over([(windows[0][0] - 10.0, windows[0][1])]) is None  # before the first reading
    without = NvmlSampler(0)
    without.samples = [{"used_bytes": 1.0, "t": 1.0}, {"used_bytes": 1.0, "t": 2.0}]
    assert without.energy_over([(1.2, 1.8)]) is None


def test_hardware_slowdown_counts_as_throttled():
    """HW slowdown (0x8: the board's own clock reduction) invalidates a timing as the
    power cap and thermal slowdowns do; a GPU idle reason (0x1) does not."""
    assert _sample_with(FakeNvml(throttle=0x8))["throttled_fraction"] == 1.0
    assert _sample_with(FakeNvml(throttle=0x1))["throttled_fraction"] == 0.0


class _NothingNvml(FakeNvml):
    """Every reading unsupported (clocks too)."""

    def __init__(self):
        super().__init__(unsupported={"memory", "utilization", "power", "throttle", "energy"})

    def nvmlDeviceGetClockInfo(self, h, clock):
        raise RuntimeError("Not Supported (clocks)")


def test_nothing_readable_ends_sampling_with_a_note():
    summary = _sample_with(_NothingNvml())
    assert set(summary) == {"note"}
    assert summary["note"].startswith("NVML sampling failed") and "clocks" in summary["note"]


def test_utilisation_over_the_timed_windows_leaves_out_the_rest():
    """The build and the warm-up (GPU idle or busy compiling) do not count: only readings
    taken inside the timed stretches, and three of them at least."""
    from advisor.machine.nvml import starved_text

    sampler = NvmlSampler(0)
    sampler.samples = [{"gpu_util": u, "t": t} for t, u in
                       [(0.0, 0.0), (0.5, 0.0), (1.0, 30.0), (1.1, 40.0), (1.2, 50.0), (1.5, 100.0), (2.0, 20.0)]]
    assert sampler.util_over([(0.9, 1.25), (1.9, 2.1)]) == pytest.approx(35.0)  # 30, 40, 50, 20
    assert sampler.util_over([(1.9, 2.1)]) is None  # one reading says too little
    assert starved_text({"gpu_util_timed": 35.0}).startswith("the GPU was busy only 35% of the baseline's timed")
    assert starved_text({"gpu_util_timed": 90.0}) is None and starved_text({"gpu_util_mean": 10.0}) is None
    assert starved_text(None) is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_host_bound_loop_reads_as_starved_and_a_matmul_loop_does_not():
    """Runs on a REAL CUDA GPU: NVML's utilisation over a timed window tells a loop that
    waits on the host (a sleep between small kernels) from one that keeps the GPU busy."""
    from advisor.machine.nvml import STARVED_BELOW

    def window(busy: bool) -> float | None:
        sampler = NvmlSampler(0, interval_s=0.02).start()
        a = torch.randn(4096, 4096, device="cuda")
        start = time.perf_counter()
        while time.perf_counter() < start + 1.5:
            if busy:
                a = (a @ a).clamp_(-1, 1)
            else:
                a.add_(1.0)
                torch.cuda.synchronize()
                time.sleep(0.01)
        torch.cuda.synchronize()
        span = [(start + 0.5, time.perf_counter())]  # NVML averages over its last period: skip the start
        sampler.stop()
        return sampler.util_over(span)

    busy, idle = window(True), window(False)
    assert busy is not None and idle is not None
    assert busy > STARVED_BELOW > idle

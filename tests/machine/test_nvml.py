"""advisor/machine/nvml.py: GPU telemetry.

Correctness only: these tests check what the protocol reports, not how fast anything is.
"""

from __future__ import annotations

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

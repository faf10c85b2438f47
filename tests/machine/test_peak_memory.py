"""advisor/machine/memory.py: peak memory of a configuration.

Correctness only: these tests check what the protocol reports, not how fast anything is.
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest
import torch

from advisor.machine.memory import CpuPeakMemory, CudaPeakMemory, peak_memory_for

MB = 1_000_000


# ---- CPU peak memory ------------------------------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux-only")
def test_cpu_peak_memory_sees_a_large_allocation_and_resets():
    mem = CpuPeakMemory()
    gc.collect()
    mem.reset()
    assert mem.baseline > 0
    big = np.ones(25_000_000, dtype=np.float64)  # 200 MB, every page touched
    assert big.sum() == 25_000_000
    peak = mem.peak_bytes()
    assert peak >= 180 * MB
    del big
    gc.collect()
    assert mem.peak_bytes() >= 180 * MB  # a peak stays a peak after the memory is freed
    if not mem.exact:
        pytest.skip("this kernel does not let the process reset its high-water mark")
    mem.reset()
    small = np.ones(1_000_000, dtype=np.float64)  # 8 MB
    assert small.sum() == 1_000_000
    assert mem.peak_bytes() < 60 * MB


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux-only")
def test_cpu_peak_memory_counts_torch_tensors():
    mem = CpuPeakMemory()
    gc.collect()
    mem.reset()
    t = torch.ones(50_000_000, dtype=torch.float32)  # 200 MB
    assert mem.peak_bytes() >= 180 * MB
    del t


def test_peak_memory_for_picks_the_device_kind():
    assert isinstance(peak_memory_for(torch.device("cpu")), CpuPeakMemory)
    assert isinstance(peak_memory_for(torch.device("cuda", 0)), CudaPeakMemory)  # not touched yet


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_peak_memory():
    """Runs on a REAL CUDA GPU."""
    device = torch.device("cuda", 0)
    mem = peak_memory_for(device)
    mem.reset()
    t = torch.ones(50_000_000, dtype=torch.float32, device=device)  # 200 MB
    del t
    assert mem.peak_bytes() >= 200 * MB
    assert mem.reserved_bytes() >= mem.peak_bytes()
    mem.reset()
    assert mem.peak_bytes() < 200 * MB




@pytest.mark.parametrize("part", ["probe", "training"])
def test_the_peak_is_the_steady_states_and_the_build_is_telemetry(part):
    """A model built through a 128 MiB temporary: before, every trial of it reported at least
    128 MiB (the peak counted from before the build), hiding what the configuration itself
    needs (on a GPU: bf16 weights, int8 / fp8, FSDP shards behind the fp32 build)."""
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.trial.entry import run_trial
    from advisor.workload.contract import load_workload

    from conftest import WORKLOADS

    result = run_trial(TrialPayload.of(load_workload(WORKLOADS / "big_build.py"), TrialConfig(batch_size=32),
                                       TrialSettings(train_samples=448, max_timing_s=0.3, part=part)))
    assert result.ok, result.failure_message
    assert result.telemetry["build_peak_bytes"] >= 120 * 2**20
    assert result.peak_memory_bytes < 64 * 2**20

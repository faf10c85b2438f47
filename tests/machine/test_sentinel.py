"""The noise sentinel: what it reads and what it leaves behind (its timing is never
asserted; tests/study/test_confirm.py shows it catching a real disturbance)."""

from __future__ import annotations

import pytest
import torch

from advisor.machine.memory import CpuPeakMemory
from advisor.machine.sentinel import describe_kernel, read_sentinel, sentinel_threads


def test_cpu_reading_uses_a_fixed_thread_count_and_restores_the_trials():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # what a trial's threads=1 knob does
    try:
        reading = read_sentinel(torch.device("cpu"))
        assert reading["s"] > 0 and "slowdown_reasons" not in reading
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert f"on {sentinel_threads()} CPU thread(s)" in describe_kernel(torch.device("cpu"))


def test_its_tensors_are_small_beside_a_peak():
    memory = CpuPeakMemory()
    memory.reset()
    read_sentinel(torch.device("cpu"))
    assert memory.peak_bytes() < 2 * 2**20  # three 128x128 float32 tensors, and the allocator's slack


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_reading_reads_the_slowdown_reasons():
    reading = read_sentinel(torch.device("cuda", 0))
    assert reading["s"] > 0
    assert reading["slowdown_reasons"] is None or isinstance(reading["slowdown_reasons"], int)
    assert "cuda" in describe_kernel(torch.device("cuda", 0))

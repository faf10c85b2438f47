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


def test_the_kernel_runs_in_plain_float32_whatever_the_trial_set(monkeypatch):
    """A trial's precision=tf32 (or a float32 matmul precision below "highest") made the
    sentinel's matmuls 3.9x faster on an H200, and the study saw the machine drift. The
    kernel runs with TF32 off and the trial's settings come back after it."""
    seen = []
    mm = torch.mm

    def watched(*args, **kwargs):  # the real matmul, noting the math mode it runs under
        seen.append((torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()))
        return mm(*args, **kwargs)

    tf32, precision = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = True  # what precision=tf32 sets
    try:
        monkeypatch.setattr(torch, "mm", watched)
        read_sentinel(torch.device("cpu"))
        assert seen and set(seen) == {(False, "highest")}
        assert torch.backends.cuda.matmul.allow_tf32 is True  # the trial's, back
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.set_float32_matmul_precision(precision)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_tf32_does_not_change_the_reading():
    """Runs on a REAL CUDA GPU: with the trial's TF32 on, the reading is the plain one's
    (within the 1.3x the study calls a disturbance; it was 3.9x faster on an H200)."""
    cuda = torch.device("cuda", 0)
    plain = read_sentinel(cuda)["s"]
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        under_tf32 = read_sentinel(cuda)["s"]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    assert 1 / 1.3 < under_tf32 / plain < 1.3


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_reading_reads_the_slowdown_reasons():
    reading = read_sentinel(torch.device("cuda", 0))
    assert reading["s"] > 0
    assert reading["slowdown_reasons"] is None or isinstance(reading["slowdown_reasons"], int)
    assert "cuda" in describe_kernel(torch.device("cuda", 0))

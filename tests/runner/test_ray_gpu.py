"""A trial through the Ray executor on a real GPU (run by the GPU check,
benchmarks/gpu/README.md; skipped without CUDA): Ray gives the trial's task one GPU
(``CUDA_VISIBLE_DEVICES``), the forked trial process trains on it, and NVML on the real
driver reads its telemetry and its energy over the timed steps."""

from __future__ import annotations

import pytest
import torch

from conftest import EXAMPLES

pytestmark = [pytest.mark.cuda, pytest.mark.ray,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_a_trial_through_ray_runs_on_its_gpu_with_energy():
    """Runs on a REAL CUDA GPU, through a real local Ray started for CUDA trials. Its state
    in a short directory: Ray's unix sockets lie four levels below it, and a socket's path
    has at most 107 bytes (pytest's tmp_path was too long on the GPU machine)."""
    import shutil
    import tempfile
    from pathlib import Path

    import ray

    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.runner.executor import run_one
    from advisor.runner.ray_executor import RayExecutor
    from advisor.workload.contract import load_workload

    if ray.is_initialized():  # the session's CPU Ray (a full suite on a GPU machine)
        pytest.skip("a Ray for CPU trials is already running in this process")
    state = Path(tempfile.mkdtemp(prefix="advr-gpu-"))
    executor = RayExecutor("cuda", state_dir=state).start()
    try:
        assert executor.resources["num_gpus"] == 1 and executor.slots == torch.cuda.device_count()
        workload = load_workload(str(EXAMPLES / "digits_mlp.py"))
        settings = TrialSettings(train_samples=2048, device="cuda", workload="train")
        payload = TrialPayload.of(workload, TrialConfig(batch_size=64, precision="bf16"), settings, estimate=True)
        result = run_one(executor, 0, payload, timeout=300)
    finally:
        executor.shutdown()
        shutil.rmtree(state, ignore_errors=True)
    assert result.ok, result.failure_message
    assert result.telemetry["cuda_visible_devices"] not in (None, ""), "Ray set no CUDA_VISIBLE_DEVICES"
    assert result.telemetry["samples"] >= 1 and result.telemetry["power_w_mean"] > 0
    assert result.telemetry["energy"]["joules"] > 0
    assert 0 < result.energy_per_sample_j < 10, result.telemetry["energy"]
    assert result.score > 0.5
    assert result.memory_estimate and result.memory_estimate.get("peak_bytes"), result.memory_estimate

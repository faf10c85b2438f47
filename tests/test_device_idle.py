"""Resource release on GPUs: before a trial measures, its GPUs must be free of other
processes (a previous trial's not-yet-exited worker). No GPU here: NVML is absent for
real (checked first), and a stand-in NVML (FakeNvml, named as such) plays the driver."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from advisor import storage as st
from advisor import trial as trial_mod
from advisor.device_idle import IdleCheck, nvml_index, wait_until_idle


class FakeNvml:
    """Stands in for pynvml on a machine without an NVIDIA driver: one GPU whose process
    list is scripted (each poll pops the next list; the last one stays)."""

    def __init__(self, polls: list[list[tuple[int, int]]]) -> None:
        self.polls, self.shutdown = polls, False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        assert index == 3
        return "gpu3"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        assert uuid == "GPU-abc"
        return "gpu-abc"

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        procs = self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in procs]

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(used=512 * 2**20)


def test_without_nvml_the_check_says_so_and_lets_the_trial_run(monkeypatch):
    real = wait_until_idle(0, timeout_s=0.1)  # this machine: nvidia-ml-py installed, no driver
    assert real.status == "unchecked" and real.ok and "NVML unavailable" in real.note
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed at all
    missing = wait_until_idle(0, timeout_s=0.1)
    assert missing.status == "unchecked" and "NotFoundError" in missing.note


def test_idle_device_passes_at_once():
    nvml = FakeNvml([[(111, 0)]])
    check = wait_until_idle(3, nvml=nvml, own_pids=(111,))  # only our own process
    assert check.status == "idle" and check.ok and check.used_bytes == 512 * 2**20 and nvml.shutdown


def test_leftover_process_is_waited_for():
    nvml = FakeNvml([[(999, 2**30)], [(999, 2**30)], []])
    check = wait_until_idle("abc", poll_s=0.05, timeout_s=5, own_pids=(111,), nvml=nvml)
    assert check.status == "released" and check.ok and check.waited_s >= 0.1


def test_process_that_never_goes_makes_the_device_busy():
    nvml = FakeNvml([[(999, 2**30), (111, 5)]])
    check = wait_until_idle(3, poll_s=0.05, timeout_s=0.3, own_pids=(111,), nvml=nvml)
    assert check.status == "busy" and not check.ok
    assert check.foreign == [{"pid": 999, "used_bytes": 2**30}] and "pids 999" in check.note


def test_nvml_index_follows_cuda_visible_devices():
    assert nvml_index(0, visible="") == 0
    assert nvml_index(1, visible="3,5") == 5
    assert nvml_index(0, visible="GPU-abc,GPU-def") == "GPU-abc"


def test_busy_gpu_fails_the_trial_as_device_busy_not_counted(monkeypatch):
    busy = IdleCheck("busy", 30.0, 2**30, [{"pid": 999, "used_bytes": 2**30}], note="1 other process(es) ...")
    monkeypatch.setattr("advisor.device_idle.wait_until_idle", lambda device: busy)
    payload = {"config": {"batch_size": 64}, "settings": {"device": "cuda", "train_samples": 10}}
    result = trial_mod.TrialResult.from_dict(trial_mod.run_trial(payload))  # never builds a model
    assert result.failure_class == "device_busy" and "not measured" in result.failure_message
    assert result.telemetry["device_idle_check"][0]["status"] == "busy"
    assert "device_busy" in st.NOT_COUNTED
    stored = SimpleNamespace(user_attrs={"failure_class": "device_busy"}, state=SimpleNamespace(name="FAIL"))
    assert not st.measured(stored)  # the configuration may run again


def test_cpu_trials_are_not_checked():
    assert trial_mod._devices_idle("cpu", 2) is None

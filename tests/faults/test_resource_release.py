"""Resource release: after a failed trial the next trial's figures are not polluted.
Every trial runs in a fresh process (checked in a real study with crashes and OOMs); on
GPUs a trial first waits until its GPUs are free of other processes (a previous trial's
not-yet-exited worker). No GPU here: NVML is absent for real (checked first), and a
stand-in NVML (FakeNvml, named as such) plays the driver."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import optuna
import pytest

from advisor.cli.main import main
from advisor.core.config import TrialConfig
from advisor.core.results import NOT_COUNTED, TrialPayload, TrialSettings
from advisor.core.stored import read_trial
from advisor.machine.device_idle import IdleCheck, nvml_index, wait_until_idle
from advisor.trial import entry

from conftest import WORKLOADS


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


def _nvidia_driver() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(_nvidia_driver(), reason="checks a machine without an NVIDIA driver")
def test_without_a_driver_the_check_says_so_and_lets_the_trial_run():
    real = wait_until_idle(0, timeout_s=0.1)  # nvidia-ml-py installed, no driver
    assert real.status == "unchecked" and real.ok and "NVML unavailable" in real.note


def test_without_nvml_the_check_says_so_and_lets_the_trial_run(monkeypatch):
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
    monkeypatch.setattr("advisor.machine.device_idle.wait_until_idle", lambda device, own_pids=None: busy)
    payload = TrialPayload("model.py", "", "0" * 64, TrialConfig(batch_size=64),
                           TrialSettings(train_samples=10, device="cuda"))
    result = entry.run_trial(payload)  # never builds a model
    assert result.failure_class == "device_busy" and "not measured" in result.failure_message
    assert result.telemetry["device_idle_check"][0]["status"] == "busy"
    assert "device_busy" in NOT_COUNTED
    stored = SimpleNamespace(number=3, user_attrs={"failure_class": "device_busy", "config": {}},
                             state=SimpleNamespace(name="FAIL"), values=None, constraints={})
    assert not read_trial(stored).counted  # the configuration may run again


def test_cpu_trials_are_not_checked():
    payload = TrialPayload("model.py", "", "0" * 64, TrialConfig(), TrialSettings(train_samples=10, device="cpu"))
    assert entry._devices_idle(payload, 2) is None


def test_the_study_s_own_process_holding_the_gpu_is_not_waited_for(monkeypatch):
    """A driver that initialised CUDA (pytest on the H200 after its first CUDA test; a
    notebook with its model on the GPU) waits while its trial runs: every trial was
    device_busy after 30 s. Its pid, on this host, is ours and its memory recorded; a
    driver on another host names no pid here."""
    import os

    from advisor.core.results import this_process

    driver = os.getppid() + 1000  # the driver is no parent of the trial's process (Ray, the fork server)
    nvml = FakeNvml([[(driver, 2**30)]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(nvml, "nvmlDeviceGetHandleByIndex", lambda index: "gpu0", raising=False)
    settings = TrialSettings(train_samples=10, device="cuda")
    payload = TrialPayload("model.py", "", "0" * 64, TrialConfig(), settings,
                           driver=this_process().rpartition(":")[0] + f":{driver}")
    [check] = entry._devices_idle(payload, 1)
    assert check.status == "idle" and check.ours == [{"pid": driver, "used_bytes": 2**30}]
    elsewhere = TrialPayload("model.py", "", "0" * 64, TrialConfig(), settings, driver=f"another-host:{driver}")
    assert elsewhere.driver_pid_here() is None
    assert TrialPayload.from_dict(payload.to_dict()).driver == payload.driver
    made = TrialPayload.of(SimpleNamespace(path="m.py", source="", sha256="0" * 64), TrialConfig(), settings)
    assert made.driver_pid_here() == os.getpid()


@pytest.mark.ray
def test_after_crash_and_oom_the_next_trials_are_clean(ray_session, workdir, capsys):
    """A worker that aborts and one that runs out of memory, then healthy trials: each in
    its own process, and the healthy trials' peak memory matches the baseline's."""
    space = workdir / "release.yaml"
    space.write_text("batch_size: {choices: [64, 256, 512, 48, 96]}\nprecision: fp32\n")
    assert main(["tune", str(WORKLOADS / "faulty.py"), "--space", str(space), "--trials", "5",
                 "--sampler", "random", "--train-samples", "300"]) == 0
    trials = [t for t in optuna.load_study(study_name="faulty-release", storage="sqlite:///advisor.db").trials
              if read_trial(t).counted]
    assert len(trials) == 5
    outcomes = {t.user_attrs["config"]["batch_size"]: t.user_attrs.get("failure_class", "ok") for t in trials}
    assert outcomes == {64: "ok", 256: "crash", 512: "oom", 48: "ok", 96: "ok"}
    completed = [t for t in trials if t.state.name == "COMPLETE"]
    pids = [t.user_attrs["pid"] for t in completed]
    assert len(set(pids)) == len(pids)  # a fresh worker process per trial
    base = next(t for t in completed if t.user_attrs.get("baseline"))
    for t in completed:  # peaks of ~1.5 MiB move in allocator steps of a few hundred KiB between
        # batch sizes and runs (benchmarks/fidelity.py); a crashed or OOM-killed worker's leftovers would add tens of MiB
        assert abs(t.values[1] - base.values[1]) < max(0.15 * base.values[1], 2**20), (t.number, t.values[1], base.values[1])


def test_a_busy_gpu_names_the_processes_that_hold_it():
    import os

    nvml = FakeNvml([[(os.getpid(), 2**30)]])  # this test's own process, as a stranger holding the GPU
    check = wait_until_idle(3, poll_s=0.05, timeout_s=0.1, own_pids=(111,), nvml=nvml)
    with open(f"/proc/{os.getpid()}/comm") as fh:
        name = fh.read().strip()
    assert f"(pids {os.getpid()} {name})" in check.note

"""The Executor protocol: the Ray executor and the benchmarks' replay executor both satisfy
it (checked by mypy, as the protocol is meant to be used), and ``run_one`` on top of it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialResult, TrialSettings
from advisor.runner.executor import run_one
from advisor.runner.ray_executor import RayExecutor

from conftest import REPO

CHECK = '''
from advisor.runner.executor import Executor
from advisor.runner.ray_executor import RayExecutor
from replay import Grid, ReplayExecutor


def takes(executor: Executor) -> None: ...


takes(RayExecutor("cpu"))
takes(ReplayExecutor(Grid({}), 0))


class NotAnExecutor:
    device = "cpu"

    def submit(self, number: int, payload: int) -> None: ...


takes(NotAnExecutor())  # the control: this line must be reported


def takes_a_number(x: int) -> None: ...


takes_a_number(RayExecutor("cpu"))  # reported only if mypy read the class (not Any): so is the next
takes_a_number(ReplayExecutor(Grid({}), 0))
'''
# mypy reads advisor's modules and the replay's, but not the big libraries they import
# (torch alone takes it about 18 s here): what they give is Any, which no line above needs
SKIPPED = "torch.*,ray.*,optuna.*,numpy.*,sqlalchemy.*,scipy.*,sklearn.*,transformers.*"


def test_both_executors_satisfy_the_protocol_and_mypy_would_say_otherwise(tmp_path):
    pytest.importorskip("mypy")
    probe = tmp_path / "probe.py"
    probe.write_text(CHECK)
    config = tmp_path / "mypy.ini"
    config.write_text(f"[mypy]\n[mypy-{SKIPPED}]\nfollow_imports = skip\n")
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--ignore-missing-imports",
                          "--follow-imports=silent", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                          str(probe)],
                         capture_output=True, text=True, cwd=REPO, env={"MYPYPATH": str(REPO / "benchmarks"),
                                                                        "PATH": "/usr/bin:/bin"})
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 3, run.stdout + run.stderr
    assert "NotAnExecutor" in errors[0] and '"Executor"' in errors[0], errors
    assert '"RayExecutor"' in errors[1] and '"ReplayExecutor"' in errors[2], errors


class NeverFinishes:
    """A stand-in runner (named as such) whose trial never finishes: what a hung trial
    looks like to the caller."""

    device, slots, startup_s, resources = "cpu", 1, 0.0, {}

    def __init__(self) -> None:
        self.cancelled: list[int] = []

    def submit(self, number, payload):
        return type("Handle", (), {"number": number, "submitted": time.monotonic()})()

    def wait(self, handles, timeout):
        time.sleep(min(timeout, 0.05))
        return []

    def cancel(self, handle):
        self.cancelled.append(handle.number)

    def shutdown(self):
        pass


def test_run_one_cancels_a_trial_past_its_timeout():
    runner = NeverFinishes()
    payload = TrialPayload("model.py", "", "0" * 64, TrialConfig(), TrialSettings(train_samples=1))
    result = run_one(runner, 7, payload, timeout=0.2)
    assert isinstance(result, TrialResult) and result.failure_class == "timeout"
    assert runner.cancelled == [7]


def _nodes(*resources):
    """Ray's node records as ``ray.nodes()`` returns them (declared: no cluster is started)."""
    return [{"Alive": True, "Resources": r} for r in resources]


def test_a_trial_wider_than_a_node_spans_nodes_and_takes_their_slots():
    cpu = RayExecutor(device="cpu")
    cpu._plan_resources(_nodes({"CPU": 1.0}, {"CPU": 1.0}))
    ddp2 = TrialConfig(parallelism="ddp", devices=2)
    assert cpu.spans(ddp2) and cpu.slots_for(ddp2) == 2 and cpu.slots == 2 and cpu.cluster_devices == 2
    assert not cpu.spans(TrialConfig()) and cpu.slots_for(TrialConfig()) == 1
    cpu._plan_resources(_nodes({"CPU": 4.0}, {"CPU": 4.0}))
    assert not cpu.spans(ddp2) and cpu.slots_for(ddp2) == 1  # fits on one node, as before
    gpu = RayExecutor(device="cuda")
    gpu._plan_resources(_nodes({"CPU": 32.0, "GPU": 4.0}, {"CPU": 32.0, "GPU": 4.0}))
    eight = TrialConfig(parallelism="fsdp", devices=8)
    assert gpu.spans(eight) and gpu.slots_for(eight) == 8 and gpu.cluster_devices == 8
    assert not gpu.spans(TrialConfig(parallelism="ddp", devices=4))


def test_the_timeout_counts_from_the_trials_start_where_the_handle_can_tell(tmp_path):
    """A trial whose process has not started (its fresh Ray worker and fork server still
    importing, as after a timed-out trial's worker was killed) is given START_ALLOWANCE_S
    more; once started, it is timed from its start; a handle without a started_file, from
    its submission."""
    import os
    from types import SimpleNamespace

    from advisor.runner.executor import NOT_STARTED, RAN_LONGER, START_ALLOWANCE_S, overran, timeout_failure

    marker = tmp_path / "started"
    handle = SimpleNamespace(number=3, submitted=time.monotonic() - 50, started_file=str(marker))
    assert not overran(handle, timeout=10)  # 50 s since submission, not started: within 10 + allowance
    handle.submitted = time.monotonic() - (10 + START_ALLOWANCE_S + 1)
    assert overran(handle, timeout=10) == NOT_STARTED  # never started within the allowance
    result = timeout_failure(NOT_STARTED, 10, "the trial timeout (10 s)")
    assert result.failure_class == "timeout" and result.failure_message == (
        f"the trial's process had not started {10 + START_ALLOWANCE_S:.0f} s after it was submitted (the trial "
        f"timeout (10 s) from its start, plus {START_ALLOWANCE_S:.0f} s for its Ray worker and fork server to start)")
    assert timeout_failure(RAN_LONGER, 10, "10 s").failure_message == "the trial ran longer than 10 s"
    marker.touch()
    now = time.time()
    os.utime(marker, (now - 4, now - 4))
    assert not overran(handle, timeout=10)  # started 4 s ago: 4 of its 10 s, however long its start took
    os.utime(marker, (now - 11, now - 11))
    assert overran(handle, timeout=10) == RAN_LONGER
    plain = SimpleNamespace(number=4, submitted=time.monotonic() - 11)
    assert overran(plain, timeout=10) and not overran(plain, timeout=12)


@pytest.mark.ray
def test_a_trial_on_this_machine_says_when_its_process_started(ray_session):
    """On a one-node local Ray, the trial's process creates its handle's started_file as it
    starts (through the worker's fork server), and the file is gone once the trial is done."""
    import os

    from advisor.workload.contract import load_workload

    from conftest import EXAMPLES

    executor = RayExecutor("cpu").start()  # joins the session's Ray: one node, this machine
    payload = TrialPayload.of(load_workload(str(EXAMPLES / "digits_mlp.py")), TrialConfig(batch_size=32),
                              TrialSettings(train_samples=64))
    handle = executor.submit(0, payload)
    assert handle.started_file and not os.path.exists(handle.started_file)
    seen, done = False, []
    deadline = time.monotonic() + 120
    while not done and time.monotonic() < deadline:
        seen = seen or os.path.exists(handle.started_file)
        done = executor.wait([handle], timeout=0.05)
    ((_, result),) = done
    assert result.ok, result.failure_message
    assert seen  # while it ran (it runs for seconds)
    assert not os.path.exists(handle.started_file)
    # its worker noted where its fork server listens (multiprocessing's pymp-* folder in the
    # temp folder), for the executor to remove once the worker is gone (runner/leftovers.py)
    notes = list(Path(handle.started_file).parent.glob("mp-*"))
    assert notes, "the worker did not note its temp folder"
    folders = [Path(n.read_text()) for n in notes]
    assert all(f.name.startswith("pymp-") for f in folders)
    assert any(f.is_dir() and list(f.glob("listener-*")) for f in folders)  # a live worker's, kept

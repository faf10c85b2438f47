"""Faults in the driver. SIGINT and SIGTERM stop gracefully (running trials cancelled and
recorded, the front printed). SIGKILL mid-study, then the same command again: the study resumes with no
completed trial lost or measured twice, the trial left RUNNING marked failed, and the
study reaches its total."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import optuna
import pytest

from advisor.cli.main import main

from conftest import EXAMPLES, WORKLOADS

pytestmark = pytest.mark.ray

ARGS = ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", "--train-samples", "300"]


def _kill_processes_of(state_dir: str) -> None:
    """The killed driver's embedded Ray outlives it (raylet, GCS): end it by its temp dir."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if state_dir.encode() in fh.read():
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.timeout(300)
def test_sigkill_of_the_driver_then_resume(ray_session, workdir, capsys):
    state = tempfile.mkdtemp(prefix="advk-")
    env = {**os.environ, "ADVISOR_RAY_DIR": state}
    env.pop("RAY_AUTH_TOKEN_PATH", None)  # its own embedded Ray, not the session's
    proc = subprocess.Popen([sys.executable, "-m", "advisor", *ARGS, "--trials", "5"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("trial   2"):  # trial 3 is submitted right after
                time.sleep(1.0)
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=30)
    finally:
        proc.kill()
        _kill_processes_of(state)
    assert proc.returncode == -signal.SIGKILL

    storage = "sqlite:///advisor.db"
    before = optuna.load_study(study_name="digits_mlp-eager", storage=storage).get_trials()
    completed = {t.number: t.values for t in before if t.state.name == "COMPLETE"}
    running = [t.number for t in before if t.state.name == "RUNNING"]
    assert len(completed) >= 3 and running, [t.state.name for t in before]

    assert main([*ARGS, "--trials", "5"]) == 0  # the same command again
    out = capsys.readouterr().out
    after = optuna.load_study(study_name="digits_mlp-eager", storage=storage).get_trials()
    for number, values in completed.items():  # nothing lost, nothing re-measured
        assert after[number].state.name == "COMPLETE" and after[number].values == values
    for number in running:
        assert after[number].user_attrs["failure_class"] == "interrupted"
    measured = [t for t in after if t.state.name == "COMPLETE" and "duplicate_of" not in t.user_attrs]
    keys = [t.user_attrs["config_key"] for t in measured]
    assert len(keys) == len(set(keys)) == 5  # the study reached its total, each config once
    assert sum(1 for t in after if t.user_attrs.get("baseline")) == 1
    assert "left running by an earlier run" in out


def _wait_for_a_running_trial(db, name: str, after: int, timeout: float = 60.0) -> None:
    """Until the study holds a RUNNING trial numbered above ``after`` (its config decided)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trials = optuna.load_study(study_name=name, storage=f"sqlite:///{db}").trials
        if any(t.state.name == "RUNNING" and t.number > after and "config" in t.user_attrs for t in trials):
            return
        time.sleep(0.05)
    raise AssertionError(f"no trial of {name} was running within {timeout:.0f} s")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_and_sigterm_stop_gracefully(workdir, signum):
    """Ctrl-C or SIGTERM to a real `advisor tune` process: the running trial is cancelled
    and recorded, the front so far is printed, exit status 130, no RUNNING trial left."""
    env = {**os.environ, "ADVISOR_RAY_DIR": tempfile.mkdtemp(prefix="advs-")}
    env.pop("RAY_AUTH_TOKEN_PATH", None)  # its own embedded Ray, not the session's
    space = workdir / "bs.yaml"
    space.write_text("batch_size: {choices: [16, 32, 64]}\n")
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "tune", str(WORKLOADS / "slow_steps.py"), "--space",
                             str(space), "--train-samples", "320", "--trials", "10"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("trial   1"):  # trial 2 is submitted right after and runs for seconds
            _wait_for_a_running_trial(workdir / "advisor.db", "slow_steps-bs", after=1)
            proc.send_signal(signum)
            break
    rest, _ = proc.communicate(timeout=120)
    out = "".join(lines) + rest
    assert proc.returncode == 130, out
    assert f"interrupted by {signal.Signals(signum).name}" in out and "Pareto front" in out
    study = optuna.load_study(study_name="slow_steps-bs", storage=f"sqlite:///{workdir / 'advisor.db'}")
    assert "RUNNING" not in [t.state.name for t in study.trials]
    assert any(t.user_attrs.get("failure_class") == "cancelled" for t in study.trials)
    assert study.best_trials  # the front so far is stored

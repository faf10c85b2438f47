"""Faults in the driver. SIGINT and SIGTERM stop gracefully (running trials cancelled and
recorded, the front printed). SIGKILL mid-study, then the same command again: the study resumes with no
completed trial lost or measured twice, the trial left RUNNING marked failed, and the
study reaches its total."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from advisor.cli.main import main

from conftest import EXAMPLES, WORKLOADS, end_private_ray, private_ray
from peek import peek_trials

pytestmark = pytest.mark.ray

ARGS = ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", "--train-samples", "300"]
# the killed study's total: killed after 2 trials with a third under way, the resumed run
# still has at least one trial of its own to run after the one it adopts or fails
TOTAL = 4


@pytest.mark.timeout(300)
def test_sigkill_of_the_driver_then_resume(ray_session, workdir, capsys):
    state, env = private_ray("advk-")
    proc = subprocess.Popen([sys.executable, "-m", "advisor", *ARGS, "--trials", str(TOTAL)], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # killed as soon as two trials are stored and another is under way (its config decided)
        _wait_for(workdir / "advisor.db", "digits_mlp-eager", lambda trials: len(
            [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]) >= 2 and any(
            t.state.name == "RUNNING" and "config" in t.user_attrs for t in trials), proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        end_private_ray(state)
    assert proc.returncode == -signal.SIGKILL

    storage = "sqlite:///advisor.db"
    before = optuna.load_study(study_name="digits_mlp-eager", storage=storage).get_trials()
    completed = {t.number: t.values for t in before if t.state.name in ("COMPLETE", "PRUNED")}
    running = [t.number for t in before if t.state.name == "RUNNING"]
    probed = [n for n in running if before[n].user_attrs.get("probe_done")]  # between its two parts
    assert len(completed) >= 2 and running, [t.state.name for t in before]  # a trial may still be in its second part

    assert main([*ARGS, "--trials", str(TOTAL)]) == 0  # the same command again
    out = capsys.readouterr().out
    after = optuna.load_study(study_name="digits_mlp-eager", storage=storage).get_trials()
    for number, values in completed.items():  # nothing lost, nothing re-measured
        assert after[number].state == before[number].state and after[number].values == values
    for number in running:  # probed ones go on with their training run; the others ran again
        if number in probed:
            assert after[number].state.name in ("COMPLETE", "PRUNED")
            assert after[number].user_attrs["throughput"] == before[number].user_attrs["throughput"]
            assert f"trial {number} was probed by an earlier run" in out
        else:
            assert after[number].user_attrs["failure_class"] == "interrupted"
            assert "left running by an earlier run" in out
    measured = [t for t in after if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs]
    keys = [t.user_attrs["config_key"] for t in measured]
    assert len(keys) == len(set(keys)) == TOTAL  # the study reached its total, each config once
    assert sum(1 for t in after if t.user_attrs.get("baseline")) == 1
    assert main([*ARGS, "--trials", str(TOTAL)]) == 0  # once more: a review's rerun said nothing of why it ran nothing
    assert (f"the study already holds its {TOTAL} trial(s) (--trials {TOTAL} is the study's total): nothing more "
            "to search; a larger --trials runs more") in " ".join(capsys.readouterr().out.split())


def _wait_for(db, name: str, condition, proc, timeout: float = 400.0) -> list:
    """Until the study's trials meet ``condition`` (while ``proc`` runs); those trials. The limit only
    catches a hang: a loaded machine (5x slower) must not fail it, and a quiet one returns at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        trials = peek_trials(db, name)  # [] until the study is created
        if condition(trials):
            return trials
        time.sleep(0.02)
    raise AssertionError(f"{name}: the condition was not met while the driver ran ({timeout:.0f} s)")


def _wait_for_a_running_trial(db, name: str, after: int, timeout: float = 240.0) -> None:
    """Until the study holds a RUNNING trial numbered above ``after`` (its config decided)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trials = peek_trials(db, name)
        if any(t.state.name == "RUNNING" and t.number > after and "config" in t.user_attrs for t in trials):
            return
        time.sleep(0.05)
    raise AssertionError(f"no trial of {name} was running within {timeout:.0f} s")


def test_sigint_and_sigterm_reach_the_study_and_the_old_handlers_come_back():
    """Both signals go to the study's handler (which stops it gracefully, below for a real
    SIGINT), and the previous handlers are back afterwards."""
    from advisor.study.run._signals import stopped_by_signals

    got, before = [], {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with stopped_by_signals(lambda signum, frame: got.append(signum)):
        for signum in (signal.SIGINT, signal.SIGTERM):
            os.kill(os.getpid(), signum)
            deadline = time.monotonic() + 5
            while signum not in got and time.monotonic() < deadline:
                time.sleep(0.01)
    assert got == [signal.SIGINT, signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum", [signal.SIGINT], ids=["SIGINT"])
def test_sigint_and_sigterm_stop_gracefully(workdir, signum):
    """Ctrl-C to a real `advisor tune` process (SIGTERM takes the same handler, above): the
    running trial is cancelled and recorded, the front so far is printed, exit status 130,
    no RUNNING trial left."""
    state, env = private_ray("advs-")
    try:
        _interrupt(workdir, signum, env)
    finally:
        end_private_ray(state)


def _interrupt(workdir, signum: int, env: dict[str, str]) -> None:
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
    # the embedded Ray keeps token authentication on, with our token, without Ray's notice of it
    assert (Path(env["ADVISOR_RAY_DIR"]) / "auth_token").is_file()
    assert "Token authentication is enabled" not in out
    study = optuna.load_study(study_name="slow_steps-bs", storage=f"sqlite:///{workdir / 'advisor.db'}")
    assert "RUNNING" not in [t.state.name for t in study.trials]
    assert any(t.user_attrs.get("failure_class") == "cancelled" for t in study.trials)
    assert study.best_trials  # the front so far is stored


@pytest.mark.timeout(300)
def test_sigkill_between_the_two_parts_then_resume(ray_session, workdir, capsys):
    """Two-stage evaluation: the driver is killed after the baseline's probe is stored and
    while its training run runs. The same command again adopts the trial: the probe is
    kept (not measured again), the training run runs, the study reaches its total."""
    state, env = private_ray("advk2-")
    args = ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", "--train-samples", "30000",
            "--metric-seeds", "1", "--trials", "2"]  # the training run trains ~1,000 steps: a second or more
    proc = subprocess.Popen([sys.executable, "-m", "advisor", *args], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = workdir / "advisor.db"
    try:
        def between(t):
            return t.state.name == "RUNNING" and t.user_attrs.get("probe_done")

        probed = next(filter(between, _wait_for(db, "digits_mlp-eager", lambda ts: any(map(between, ts)), proc)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        end_private_ray(state)
    assert probed.number == 0 and "accuracy" not in probed.user_attrs

    assert main(args) == 0  # the same command again
    out = capsys.readouterr().out
    assert "trial 0 was probed by an earlier run: its training run starts now" in out
    after = optuna.load_study(study_name="digits_mlp-eager", storage=f"sqlite:///{db}").get_trials()
    base = after[0]
    assert base.state.name == "COMPLETE" and base.user_attrs["baseline"] is True
    assert base.user_attrs["throughput"] == probed.user_attrs["throughput"]  # the probe kept, not re-run
    assert base.values[0] == probed.user_attrs["throughput"] and base.user_attrs["accuracy"] > 0.5
    assert base.user_attrs["accuracy_run"]["wall_s"] > 0 and base.user_attrs["curve"]
    assert sum(1 for t in after if t.user_attrs.get("baseline")) == 1
    assert not [t for t in after if t.state.name == "RUNNING"]
    counted = [t for t in after if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs]
    assert len(counted) == 2

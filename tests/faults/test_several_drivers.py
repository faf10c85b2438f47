"""Several `advisor tune` processes on one PostgreSQL study (as on machines that share a
database server but no Ray cluster): the baseline runs once, each configuration is measured once, ``--trials``
is the study's total, and killing one driver leaves the other finishing the study.

Each driver has its own embedded Ray (ADVISOR_RAY_DIR), as on separate machines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest

from conftest import EXAMPLES, end_private_ray, private_ray
from peek import peek_trials
from pg_server import pg_database, pg_server, read_trials  # noqa: F401  (fixtures)

pytestmark = pytest.mark.ray

STUDY = "two-drivers"
# one driver is killed once both have started a trial after the baseline: the survivor runs the rest. With
# 5, under heavy load the first driver ran every other trial while the second still waited (2 runs in 9)
TRIALS = 7


def _driver(workdir, storage: str, *extra: str) -> tuple[subprocess.Popen, str]:
    state, env = private_ray("adv2-")
    log = open(workdir / f"driver-{os.path.basename(state)}.log", "w")  # noqa: SIM115 - closed with the test's tmp dir
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "tune", str(EXAMPLES / "digits_mlp.py"), "--space",
                             "eager", "--train-samples", "300", "--trials", str(TRIALS), "--study", STUDY,
                             "--storage", storage, "--no-tui", *extra],
                            cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, state


def _end(proc: subprocess.Popen, state: str) -> None:
    proc.kill()
    end_private_ray(state)


def _trials(url: str) -> list:
    """The study's trials, as Optuna reads them (none before it is created)."""
    try:
        return read_trials(url, STUDY)
    except KeyError:  # not created yet
        return []


def _check_the_study(storage: str, logs: str = "") -> list:
    """The study's invariants across drivers (``logs`` shown when one fails); its trials."""
    trials = _trials(storage)
    measured = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs]
    keys = [t.user_attrs["config_key"] for t in measured]
    assert len(keys) == len(set(keys)) == TRIALS, (keys, logs)  # the total across drivers, each configuration once
    assert sum(1 for t in trials if t.user_attrs.get("baseline") and t.state.name == "COMPLETE") == 1, logs
    assert not [t.number for t in trials if t.state.name == "RUNNING"], logs
    return trials


@pytest.mark.timeout(600)
def test_two_drivers_share_one_study_and_one_killed_leaves_the_other_finishing_it(workdir, pg_database):  # noqa: F811
    storage = pg_database
    a = _driver(workdir, storage, "--metric-seeds", "2")
    b = _driver(workdir, storage, "--metric-seeds", "2")
    drivers = {str(d[0].pid): d for d in (a, b)}
    try:  # once both have started a trial after the baseline: kill one while a trial of its runs
        deadline, victim, seen = time.monotonic() + 400, None, []
        while victim is None and time.monotonic() < deadline and a[0].poll() is None and b[0].poll() is None:
            trials = [t for t in peek_trials(storage, STUDY)  # light: polled ten times a second
                      if "config" in t.user_attrs and not t.user_attrs.get("baseline")]
            started = {_pid(t) for t in trials}
            running = [_pid(t) for t in trials if t.state.name == "RUNNING"]
            seen = [(t.number, _pid(t), t.state.name) for t in trials]
            if started == set(drivers) and running:
                victim = _stopped_mid_trial(drivers[running[0]], storage)
            time.sleep(0.1)
        if victim is None:
            pytest.fail(f"the two drivers did not both start a trial with one still running; seen {seen}\n"
                        f"{_logs(workdir, a, b)}")
        survivor = b if victim is a else a
        victim[0].send_signal(signal.SIGKILL)  # stopped, with a trial of its own still running
        victim[0].wait(timeout=30)
        _end(*victim)
        code = survivor[0].wait(timeout=400)
        assert code == 0, _logs(workdir, a, b)
    finally:
        _end(*a)
        _end(*b)
    logs = {p.name: p.read_text() for p in workdir.glob("driver-*.log")}
    trials = _check_the_study(storage, _logs(workdir, a, b))
    study = optuna.load_study(study_name=STUDY, storage=storage)
    assert len(study.user_attrs["accuracy_noise"]["seeds"]) == 2, logs  # measured once, by one driver
    assert sum("waiting for it" in text for text in logs.values()) >= 1, logs  # the other waited for the baseline
    interrupted = [t for t in trials if t.user_attrs.get("failure_class") == "interrupted"]
    # the victim's: its running trial, and any it had asked for but not tagged yet when it was stopped
    # (a trial with no driver, older than the grace, is a gone driver's: trial_writes.fail_stale)
    assert {_pid(t) for t in interrupted if "driver" in t.user_attrs} == {str(victim[0].pid)}, logs
    assert "the driver running it is gone" in logs[f"driver-{os.path.basename(survivor[1])}.log"]


def _logs(workdir, *drivers: tuple[subprocess.Popen, str]) -> str:
    """The end of each driver's output, with its exit status (not pytest's shortened repr)."""
    return "\n".join(f"--- {p.name} (exit {d[0].poll()}):\n{p.read_text()[-4000:]}" for p, d in
                     ((workdir / f"driver-{os.path.basename(d[1])}.log", d) for d in drivers))


def _stopped_mid_trial(driver: tuple[subprocess.Popen, str], storage: str) -> tuple[subprocess.Popen, str] | None:
    """``driver``, stopped (SIGSTOP) while a trial of its own is still running in the study,
    or None (it resumed: its trial finished between the poll and the stop). Stopped, it
    cannot tell that trial, so the kill that follows lands mid-trial, however loaded the
    machine is."""
    proc = driver[0]
    proc.send_signal(signal.SIGSTOP)
    if any(t.state.name == "RUNNING" and "driver" in t.user_attrs and _pid(t) == str(proc.pid)
           and not t.user_attrs.get("baseline")
           for t in peek_trials(storage, STUDY)):
        return driver
    proc.send_signal(signal.SIGCONT)
    return None


def _pid(trial) -> str:
    """The pid of the driver that started ``trial`` (its id is host:pid:suffix)."""
    return trial.user_attrs["driver"].split(":")[-2]

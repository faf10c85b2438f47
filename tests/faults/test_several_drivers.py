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

from advisor.core.study_attrs import DRIVER_PREFIX
from advisor.study.run._drivers import BEAT_S, GRACE_S

from conftest import EXAMPLES, end_private_ray, private_ray
from peek import peek_study_attrs, peek_trials
from pg_server import pg_database, pg_server, read_trials  # noqa: F401  (fixtures)

pytestmark = pytest.mark.ray

STUDY = "two-drivers"
# the first driver to run a trial after the baseline is stopped mid-trial until the other has started one, then
# killed: the other runs the rest. Before that hold, under heavy load (CI) the first driver ran every trial while
# the second still started its Ray
TRIALS = 7
HOLD_S = GRACE_S / 2  # at most this long stopped at a time: other drivers count one gone after GRACE_S


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
    try:
        deadline = time.monotonic() + 420
        # however slowly the machine starts the later driver: the one running the baseline is held
        # (stopped, let beat now and then) until the other waits for it, so that wait is seen
        first = _until(lambda: _driver_of(storage, drivers, baseline=True), deadline, a, b)
        if first is None:
            pytest.fail(f"no driver ran the baseline\n{_logs(workdir, a, b)}")
        other = b if first is a else a
        if not _hold(first, lambda: "waiting for it" in _log(workdir, other), deadline, storage):
            pytest.fail(f"the other driver did not wait for the baseline\n{_logs(workdir, a, b)}")
        # the first to run a trial after the baseline is stopped with it still running, until the
        # other has started one too: then it is killed mid-trial, and the other finishes the study
        victim = _until(lambda: _stopped_mid_trial(_driver_of(storage, drivers, baseline=False), storage),
                        deadline, a, b)
        if victim is None:
            pytest.fail(f"no driver ran a trial after the baseline\n{_logs(workdir, a, b)}")
        survivor = b if victim is a else a
        if _until(lambda: str(survivor[0].pid) in _starters(storage), deadline, survivor) is None:
            pytest.fail(f"the other driver started no trial\n{_logs(workdir, a, b)}")
        victim[0].send_signal(signal.SIGKILL)  # stopped, with a trial of its own still running
        victim[0].wait(timeout=30)
        _end(*victim)
        code = survivor[0].wait(timeout=max(60.0, deadline + 120 - time.monotonic()))
        assert code == 0, _logs(workdir, a, b)
    finally:
        _end(*a)
        _end(*b)
    logs = {p.name: p.read_text() for p in workdir.glob("driver-*.log")}
    trials = _check_the_study(storage, _logs(workdir, a, b))
    study = optuna.load_study(study_name=STUDY, storage=storage)
    assert len(study.user_attrs["accuracy_noise"]["seeds"]) == 2, logs  # measured once, by one driver
    interrupted = [t for t in trials if t.user_attrs.get("failure_class") == "interrupted"]
    # the victim's: its running trial, and any it had asked for but not tagged yet when it was stopped
    # (a trial with no driver, older than the grace, is a gone driver's: trial_writes.fail_stale)
    assert {_pid(t) for t in interrupted if "driver" in t.user_attrs} == {str(victim[0].pid)}, logs
    assert "the driver running it is gone" in logs[f"driver-{os.path.basename(survivor[1])}.log"]


def _until(found, deadline: float, *procs: tuple[subprocess.Popen, str]):
    """``found()``'s first truthy value, polled ten times a second; None once ``deadline``
    passes or one of ``procs`` has ended."""
    while time.monotonic() < deadline and all(p[0].poll() is None for p in procs):
        value = found()
        if value:
            return value
        time.sleep(0.1)
    return None


def _hold(driver: tuple[subprocess.Popen, str], released, deadline: float, storage: str) -> bool:
    """Stop ``driver`` (SIGSTOP) until ``released()``; every ``HOLD_S`` it runs again only
    until it has renewed its heartbeat (about half a second), so that other drivers never
    count it gone (``advisor.study.run._drivers.GRACE_S``) and it barely moves on. Whether
    ``released()`` came."""
    proc = driver[0]
    while time.monotonic() < deadline and proc.poll() is None:
        proc.send_signal(signal.SIGSTOP)
        beat = _heartbeat(storage, proc.pid)
        held = _until(released, min(deadline, time.monotonic() + HOLD_S))
        proc.send_signal(signal.SIGCONT)
        if held or released():
            return True
        _until(lambda: _heartbeat(storage, proc.pid) != beat, time.monotonic() + 2 * BEAT_S, driver)
    return bool(released())


def _heartbeat(storage: str, pid: int) -> float | None:
    """The latest heartbeat of the driver with ``pid`` (POSIX seconds), as the study records it."""
    beats = [v.get("at") for k, v in peek_study_attrs(storage, STUDY).items()
             if k.startswith(DRIVER_PREFIX) and isinstance(v, dict) and v.get("pid") == pid]
    return max(beats, default=None)


def _log(workdir, driver: tuple[subprocess.Popen, str]) -> str:
    return (workdir / f"driver-{os.path.basename(driver[1])}.log").read_text()


def _tagged(storage: str, baseline: bool) -> list:
    """The study's trials that a driver has started and tagged: the baseline, or those after it."""
    return [t for t in peek_trials(storage, STUDY)  # light: polled ten times a second
            if "config" in t.user_attrs and "driver" in t.user_attrs and bool(t.user_attrs.get("baseline")) == baseline]


def _driver_of(storage: str, drivers: dict, baseline: bool) -> tuple[subprocess.Popen, str] | None:
    """The driver running a trial of the study now: the baseline, or one after it."""
    running = [t for t in _tagged(storage, baseline) if t.state.name == "RUNNING"]
    return drivers.get(_pid(running[0])) if running else None


def _starters(storage: str) -> set[str]:
    """The pids of the drivers that have started a trial after the baseline."""
    return {_pid(t) for t in _tagged(storage, baseline=False)}


def _logs(workdir, *drivers: tuple[subprocess.Popen, str]) -> str:
    """The end of each driver's output, with its exit status (not pytest's shortened repr)."""
    return "\n".join(f"--- {p.name} (exit {d[0].poll()}):\n{p.read_text()[-4000:]}" for p, d in
                     ((workdir / f"driver-{os.path.basename(d[1])}.log", d) for d in drivers))


def _stopped_mid_trial(driver: tuple[subprocess.Popen, str] | None, storage: str) -> tuple[subprocess.Popen, str] | None:
    """``driver`` (if any), stopped (SIGSTOP) while a trial of its own is still running in the study,
    or None (it resumed: its trial finished between the poll and the stop). Stopped, it
    cannot tell that trial, so the kill that follows lands mid-trial, however loaded the
    machine is."""
    if driver is None:
        return None
    proc = driver[0]
    proc.send_signal(signal.SIGSTOP)
    if any(t.state.name == "RUNNING" and _pid(t) == str(proc.pid) for t in _tagged(storage, baseline=False)):
        return driver
    proc.send_signal(signal.SIGCONT)
    return None


def _pid(trial) -> str:
    """The pid of the driver that started ``trial`` (its id is host:pid:suffix)."""
    return trial.user_attrs["driver"].split(":")[-2]

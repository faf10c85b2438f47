"""Several drivers on one study (advisor.study.run._drivers): who is alive, claims, and which
RUNNING trials are stale — on a real SQLite study, with real processes for the pids."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import optuna
import pytest

from advisor.core.results import TrialResult
from advisor.core.stored import DRIVER
from advisor.core.study_attrs import StudyAttrs
from advisor.runner.executor import run_one
from advisor.study.run import _drivers as drv
from advisor.study.run._drivers import Beating, Drivers
from advisor.study.run._trial_writes import fail_stale


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def study(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")


def _record(study, driver_id: str, host: str, pid: int, at: float, stopped: bool = False) -> None:
    study.set_user_attr(drv.PREFIX + driver_id, {"host": host, "pid": pid, "at": at, "hardware": "h",
                                                 "stopped": stopped})


def test_who_is_alive(study):
    clock = Clock()
    me = Drivers(study, "h", clock=clock)
    me.beat(force=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        _record(study, "here-live", me.host, sleeper.pid, clock.now)
        _record(study, "here-dead", me.host, dead.pid, clock.now)  # its process is gone: at once
        _record(study, "there-fresh", "elsewhere", 1, clock.now - drv.GRACE_S + 1)
        _record(study, "there-old", "elsewhere", 1, clock.now - drv.GRACE_S - 1)
        _record(study, "stopped", "elsewhere", 1, clock.now, stopped=True)
        peers = me.peers()
        assert {p: me.alive(p, peers) for p in peers} == {
            me.id: True, "here-live": True, "here-dead": False, "there-fresh": True, "there-old": False,
            "stopped": False}
        assert me.alive(None) is False  # a trial from before drivers were recorded
        assert sorted(p.id for p in me.others()) == ["here-live", "there-fresh"] and me.shared
        clock.now += drv.GRACE_S  # no heartbeat from anyone since
        assert me.alive(me.id) and not me.alive("here-live") and not me.alive("there-fresh")
    finally:
        sleeper.kill()


def test_an_earlier_driver_of_this_process_that_never_left_is_gone_at_once(study):
    """`advisor.tune()` run again in one process (a notebook) after the storage failed under
    the first run, which could not record that it stopped: the first run's record has this
    host and pid, but it runs no more, so its RUNNING trials are stale at once, not after
    GRACE_S of silence. A driver of this process that still runs is alive."""
    clock = Clock()
    first = Drivers(study, "h", clock=clock)
    first.beat(force=True)
    second = Drivers(study, "h", clock=clock)
    second.beat(force=True)
    assert second.alive(first.id) and first.alive(second.id)  # two live drivers of one process
    first.attrs.set_heartbeat = lambda *args: (_ for _ in ()).throw(OSError("disk full"))  # FAKE: storage fails
    with pytest.raises(OSError):
        first.leave()
    assert not second.alive(first.id) and second.others() == []
    _record(study, "a-run-before", second.host, os.getpid(), clock.now)  # an earlier run of this process
    assert not second.alive("a-run-before")


def test_the_heartbeat_is_written_when_due(study):
    clock = Clock()
    me = Drivers(study, "h", clock=clock)
    assert me.beat(force=True)
    assert not me.beat()
    clock.now += drv.BEAT_S
    assert me.beat()
    assert study.user_attrs[drv.PREFIX + me.id]["at"] == clock.now
    me.leave()
    assert Drivers(study, "h", clock=clock).alive(me.id) is False


class SlowExecutor:
    """One measurement that lasts ``lasts`` seconds of the drivers' clock: each wait moves
    that clock on by a second."""

    device, slots, resources, startup_s = "cpu", 1, {"num_cpus": 1}, 0.0

    def __init__(self, clock: Clock, lasts: float) -> None:
        self.clock, self.ends = clock, clock.now + lasts

    def submit(self, number, payload):
        return type("Handle", (), {"number": number, "submitted": time.monotonic()})()

    def wait(self, handles, timeout):
        self.clock.now += 1.0
        return [(handles[0], TrialResult(ok=True))] if self.clock.now >= self.ends else []

    def cancel(self, handle):
        raise AssertionError("not cancelled")

    def shutdown(self):
        pass


def test_the_heartbeat_goes_on_while_a_step_waits_on_one_long_measurement(study):
    """The baseline's re-measurements and extra seeds, the front's extra seeds and the
    confirmation wait on one measurement at a time (run_one), through ``Beating``: a
    measurement longer than GRACE_S leaves the driver alive to the other hosts' drivers."""
    clock = Clock()
    me = Drivers(study, "h", clock=clock)
    me.beat(force=True)
    executor = SlowExecutor(clock, lasts=2 * drv.GRACE_S)
    beating = Beating(executor, me)
    assert (beating.device, beating.slots, beating.resources, beating.startup_s) == ("cpu", 1, {"num_cpus": 1}, 0.0)
    beats = []
    study_set = study.set_user_attr
    study.set_user_attr = lambda key, value: (beats.append(clock.now), study_set(key, value))
    assert run_one(beating, 0, None, timeout=3600).ok
    assert clock.now - study.user_attrs[drv.PREFIX + me.id]["at"] < drv.BEAT_S + 1
    assert len(beats) >= 2 * drv.GRACE_S // (drv.BEAT_S + 1)
    assert all(drv.BEAT_S <= b - a < drv.BEAT_S + 1 for a, b in zip(beats, beats[1:]))  # when due, not more often
    other = Drivers(study, "h", clock=clock)
    other.host = "elsewhere"
    assert other.alive(me.id)


def test_one_driver_holds_a_step_until_it_releases_it_or_is_gone(study):
    clock = Clock()
    a, b = Drivers(study, "h", clock=clock), Drivers(study, "h", clock=clock)
    a.beat(force=True)
    b.beat(force=True)
    assert a.claim("baseline", sleep=lambda s: None)
    assert not b.claim("baseline", sleep=lambda s: None) and b.holder("baseline") == a.id
    assert a.claim("baseline", sleep=lambda s: None)  # its own: still its
    a.release("baseline")
    assert b.holder("baseline") is None and b.claim("baseline", sleep=lambda s: None)
    a.claim("confirm", sleep=lambda s: None)
    a.leave()  # gone without releasing it: the step is free again
    assert b.holder("confirm") is None and b.claim("confirm", sleep=lambda s: None)


def test_a_claim_written_by_another_driver_meanwhile_is_lost(study):
    a, b = Drivers(study, "h"), Drivers(study, "h")
    a.beat(force=True)
    b.beat(force=True)

    def b_claims_too(seconds):  # b writes its claim while a's settles: the later write wins
        StudyAttrs(study).set_claim("confirm", b.id)

    assert not a.claim("confirm", sleep=b_claims_too)
    assert b.claim("confirm", sleep=lambda s: None)


def test_a_driver_alone_claims_at_once_and_one_that_joins_later_sees_the_claim(study):
    """No settling while no other live driver is recorded once the claim is written: a
    driver that announces itself afterwards reads the claim and leaves the step alone."""
    slept: list[float] = []
    a = Drivers(study, "h")
    a.beat(force=True)
    assert a.claim("baseline", sleep=slept.append) and slept == []
    b = Drivers(study, "h")
    b.beat(force=True)
    assert not b.claim("baseline", sleep=slept.append) and slept == []
    assert a.claim("confirm", sleep=slept.append) and slept == [drv.SETTLE_S]  # b is live: a's claim settles
    c = Drivers(study, "h")
    c.beat(force=True)
    c.leave()  # a stopped driver is not live: no settling for it
    b.leave()
    assert a.claim("metric_seeds", sleep=slept.append) and slept == [drv.SETTLE_S]


def test_stale_trials_are_those_of_gone_drivers(study, tmp_path):
    clock = Clock()
    me = Drivers(study, "h", clock=clock)
    me.beat(force=True)
    _record(study, "gone", "elsewhere", 1, clock.now - drv.GRACE_S - 1)
    _record(study, "live", "elsewhere", 1, clock.now)
    trials = {}
    for name in ("mine", "gone", "live", None):
        t = study.ask()
        if name is not None:
            t.set_user_attr(DRIVER, me.id if name == "mine" else name)
        trials[name] = t.number
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}")
    peers = me.peers()
    failed = me.fail_stale(storage, keep_probed=True)  # a live driver ("live") may just have asked for it
    assert failed == [trials["gone"]]  # the untagged one was just asked for: left alone
    assert fail_stale(study, storage, alive=lambda d: me.alive(d, peers), young_s=0.0) == [trials[None]]
    states = {n: study.trials[n].state.name for n in trials.values()}
    assert states == {trials["mine"]: "RUNNING", trials["live"]: "RUNNING", trials["gone"]: "FAIL",
                      trials[None]: "FAIL"}
    assert study.trials[trials["gone"]].user_attrs["failure_class"] == "interrupted"


def test_a_driver_is_not_alive_once_its_process_is_gone(study):
    """The same host: a killed driver's trials are stale at once (no grace period)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    me = Drivers(study, "h")
    _record(study, "child", me.host, child.pid, me.clock())
    assert me.alive("child")
    child.kill()
    child.wait()
    assert not me.alive("child")
    assert os.getpid() != child.pid


def test_a_driver_on_other_hardware_is_refused_with_nothing_written(study, tmp_path):
    """Every ratio in a study is to one baseline: joining while a live driver measures it
    on other hardware is a StudyError (exit 2), and the study is left as it was."""
    from types import SimpleNamespace

    from advisor.core.errors import StudyError
    from advisor.machine.hardware import detect
    from advisor.study.run._drivers import join_study

    other = Drivers(study, "another-machine")
    other.beat(force=True)
    before = dict(study.user_attrs)
    plan = SimpleNamespace(hardware=detect(), study_name="s", storage_url="postgresql+psycopg://u:SECRET@db/x",
                           options=SimpleNamespace(two_stage=True, trials=10))
    with pytest.raises(StudyError, match="is being run by driver .* on different hardware") as err:
        join_study(study, None, plan, lambda event: None)
    assert "SECRET" not in str(err.value)
    assert dict(study.user_attrs) == before
    other.leave()  # gone: the same join goes through
    joined = join_study(study, optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}"), plan, lambda event: None)
    assert drv.PREFIX + joined.id in study.user_attrs

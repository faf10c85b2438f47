"""Trials run at the usual CPU priority, not at the niceness of the Ray worker they start
under (Ray's default ``worker_niceness`` is 15: beside one busy program, a trial at 15
trained the built-in model 50-150 times slower on this 2-core machine)."""

from __future__ import annotations

import os

import pytest

from advisor.core.results import TrialResult
from advisor.study.run._parts import Parts
from advisor.trial.process import normal_priority

NOBODY = 65534


def _in_a_fork(niceness: int, user: int | None) -> int:
    """normal_priority() in a forked child started at ``niceness`` (as ``user`` when given)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.nice(niceness)
            if user is not None:
                os.setgid(user)
                os.setuid(user)
            os.write(write, str(normal_priority()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as fh:
        value = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and value, "the child failed"
    return int(value)


def test_a_trial_process_goes_back_to_niceness_0_where_it_may():
    allowed = os.geteuid() == 0  # raising priority needs root (or CAP_SYS_NICE)
    assert _in_a_fork(15, None) == (0 if allowed else 15)
    assert _in_a_fork(0, None) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_an_unprivileged_trial_process_says_the_niceness_it_keeps():
    assert _in_a_fork(15, NOBODY) == 15


@pytest.mark.ray
def test_the_ray_advisor_starts_runs_its_workers_and_trials_at_niceness_0(ray_session):
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.runner.executor import run_one
    from advisor.runner.ray_executor import RayExecutor
    from advisor.workload.contract import load_workload

    from conftest import EXAMPLES

    @ray_session.remote
    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, 0)

    assert ray_session.get(niceness.remote()) == 0
    executor = RayExecutor("cpu").start()  # joins the session's Ray
    workload = load_workload(str(EXAMPLES / "digits_mlp.py"))
    result = run_one(executor, 0, TrialPayload.of(workload, TrialConfig(batch_size=32),
                                                  TrialSettings(train_samples=64)), 120)
    assert result.ok and "niceness" not in result.telemetry


class _Done:
    def __init__(self, number: int, niceness: int | None, host: str) -> None:
        self.number = number
        self.result = TrialResult(ok=True, host=host, telemetry={} if niceness is None else {"niceness": niceness})


def test_a_study_says_once_per_host_that_its_trials_ran_at_a_low_priority():
    events = []
    parts = Parts(None, None, None, None, events.append)  # type: ignore[arg-type] - only the note is used
    for number, nice, host in [(1, None, "a"), (2, 15, "a"), (3, 15, "a"), (4, 10, "b")]:
        parts._note_priority(_Done(number, nice, host))  # type: ignore[arg-type]
    later = parts.watched(None)  # type: ignore[arg-type] - the watched parts remember the hosts said
    later._note_priority(_Done(5, 15, "b"))  # type: ignore[arg-type]
    texts = [e.text for e in events]
    assert len(texts) == 2, texts
    assert texts[0].startswith("trial 2 ran at niceness 15 on a ") and "RAY_worker_niceness=0" in texts[0]
    assert texts[1].startswith("trial 4 ran at niceness 10 on b ")

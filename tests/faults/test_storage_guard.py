"""The storage's rules for calls tried again (advisor.study.storage.guard), on real SQLite.

A write whose commit went through but whose answer was lost cannot be produced on cue
by a real server (the window is a network round trip), so these tests lose the answer on
purpose: the real call runs and commits, then an ``OperationalError`` as a dropped
connection gives is raised in its place, once. The restarts of a real PostgreSQL server
are in test_storage_server.py."""

from __future__ import annotations

import optuna
import pytest
import sqlalchemy.exc
from optuna.storages import RDBStorage

from advisor.core.errors import StorageError, StudyError
from advisor.study.storage import guard as storage_guard
from advisor.study.storage.stores import open_storage


def _lost_answer() -> sqlalchemy.exc.OperationalError:
    return sqlalchemy.exc.OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))


def _once_then_lose_the_answer(real):
    calls = []

    def call(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append(result)
        if len(calls) == 1:
            raise _lost_answer()
        return result

    return call, calls


@pytest.fixture
def study(workdir, quiet_optuna):
    storage = open_storage("sqlite:///advisor.db")
    return optuna.create_study(study_name="s", storage=storage, directions=["maximize"]), storage


def test_a_new_trial_whose_answer_was_lost_is_not_created_twice(study, monkeypatch):
    study, storage = study
    cls = type(storage)
    call, calls = _once_then_lose_the_answer(cls._create_once)
    monkeypatch.setattr(cls, "_create_once", call)
    trial = study.ask()
    assert len(calls) == 1  # committed once; the second attempt found it by its token
    trials = optuna.load_study(study_name="s", storage="sqlite:///advisor.db").trials
    assert [t.number for t in trials] == [trial.number] == [0]
    assert trials[0].system_attrs[storage_guard.TOKEN]


def test_an_enqueued_trial_whose_answer_was_lost_is_not_enqueued_twice(study, monkeypatch):
    study, storage = study
    real = type(storage)._create_once
    call, calls = _once_then_lose_the_answer(real)
    monkeypatch.setattr(type(storage), "_create_once", call)
    study.enqueue_trial({"x": 1}, user_attrs={"baseline": True})
    assert len(calls) == 1
    monkeypatch.setattr(type(storage), "_create_once", real)
    trial = study.ask()
    assert trial.user_attrs == {"baseline": True} and trial.number == 0
    assert len(optuna.load_study(study_name="s", storage="sqlite:///advisor.db").trials) == 1


def test_a_finished_trial_whose_answer_was_lost_is_finished_once(study, monkeypatch):
    study, _ = study
    trial = study.ask()
    call, calls = _once_then_lose_the_answer(RDBStorage.set_trial_state_values)
    monkeypatch.setattr(RDBStorage, "set_trial_state_values", call)
    study.tell(trial, [1.5])
    assert len(calls) == 1  # the retry found it finished with these values: success
    stored = optuna.load_study(study_name="s", storage="sqlite:///advisor.db").trials
    assert [(t.state.name, t.values) for t in stored] == [("COMPLETE", [1.5])]


def test_a_trial_finished_meanwhile_with_other_values_is_a_conflict(study, monkeypatch):
    """The first attempt's connection dropped before its commit, and another writer
    finished the trial with other values: trying again reports the conflict."""
    study, storage = study
    trial = study.ask()
    real = RDBStorage.set_trial_state_values

    def other_writer_then_drop(self, trial_id, state, values=None):
        monkeypatch.setattr(RDBStorage, "set_trial_state_values", real)
        real(self, trial_id, state, [2.0])
        raise _lost_answer()

    monkeypatch.setattr(RDBStorage, "set_trial_state_values", other_writer_then_drop)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.COMPLETE, [1.0])


def test_a_study_whose_answer_was_lost_is_created_once(workdir, monkeypatch, quiet_optuna):
    storage = open_storage("sqlite:///advisor.db")
    call, calls = _once_then_lose_the_answer(RDBStorage.create_new_study)
    monkeypatch.setattr(RDBStorage, "create_new_study", call)
    study = optuna.create_study(study_name="once", storage=storage)
    assert len(calls) == 1
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["once"] == [study.study_name]


def test_a_database_error_that_is_not_a_lost_connection_is_raised_at_once(study):
    _, storage = study
    with pytest.raises(KeyError):  # no trial 99: Optuna's own error, not waited for
        storage.get_trial(99)
    assert storage.lost is None


def test_the_wait_is_bounded_and_says_how_to_resume(workdir, monkeypatch, quiet_optuna):
    """An unreachable database, retried for the wait, then StorageError; the next call
    is tried once (stopping the study does not wait again)."""
    import time

    storage = open_storage("sqlite:///advisor.db")
    storage.wait_s = 0.5
    said = []
    storage.watch(said.append)
    optuna.create_study(study_name="s", storage=storage)

    def refuse(*args, **kwargs):
        raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("connection refused"))

    monkeypatch.setattr(RDBStorage, "get_all_studies", refuse)
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"did not answer for 0\.5 s .*run the same command to resume") as lost:
        storage.get_all_studies()
    assert 0.3 < time.monotonic() - started < 2.0
    assert lost.value.exit_code == 1 and "connection refused" in str(lost.value)
    assert said and "waiting up to 0.5 s" in said[0]
    started = time.monotonic()
    with pytest.raises(StorageError):
        storage.get_all_studies()
    assert time.monotonic() - started < 0.1


def test_ctrl_c_while_waiting_stops_without_waiting_again(workdir, monkeypatch, quiet_optuna):
    storage = open_storage("sqlite:///advisor.db")
    optuna.create_study(study_name="s", storage=storage)

    def refuse(*args, **kwargs):
        raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("connection refused"))

    def interrupted(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(RDBStorage, "get_all_studies", refuse)
    monkeypatch.setattr(storage_guard.time, "sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        storage.get_all_studies()
    with pytest.raises(StorageError, match="connection refused"):  # cancelling trials then: no second wait
        storage.get_all_studies()


def test_storage_wait_from_the_environment(monkeypatch):
    monkeypatch.setenv("ADVISOR_STORAGE_WAIT", "5")
    assert storage_guard.wait_s_from_env() == 5.0
    monkeypatch.setenv("ADVISOR_STORAGE_WAIT", "soon")
    with pytest.raises(StudyError, match=r"\$ADVISOR_STORAGE_WAIT is 'soon'"):
        storage_guard.wait_s_from_env()


def test_messages_hide_the_password():
    assert storage_guard.shown_url("postgresql+psycopg://me:secret@db/advisor") == \
        "postgresql+psycopg://me:***@db/advisor"

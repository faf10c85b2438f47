"""Two `advisor tune` started together on one study: Optuna creates the study first and its
attributes follow one by one, so the second driver can find it with no identity yet. It
waits for the identity instead of refusing the study as another program's (seen in the
suite: one of two drivers on one PostgreSQL study exited 2 with "another program's Optuna
study"). Real SQLite storage, real plans; the other driver is a thread here."""

from __future__ import annotations

import threading
import time

import optuna
import pytest

from advisor.core.errors import StudyError
from advisor.core.objectives import DIRECTIONS
from advisor.core.study_attrs import IDENTITY_MARK, StudyAttrs
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run.plan import open_study, plan_study
from advisor.study.storage import stores

from conftest import EXAMPLES


def _plan(tmp_path, samples=64):
    path = tmp_path / "model.py"
    if not path.exists():
        path.write_text((EXAMPLES / "digits_mlp.py").read_text())
    return plan_study(TuneOptions(workload_path=str(path), space="quick", train_samples=samples,
                                  storage=f"sqlite:///{tmp_path / 's.db'}"))


class Recorder:
    """A study's set_user_attr calls, in order (the real study's, recorded)."""

    def __init__(self, study):
        self.study, self.keys = study, []

    @property
    def user_attrs(self):
        return self.study.user_attrs

    def set_user_attr(self, key, value):
        self.keys.append(key)
        self.study.set_user_attr(key, value)


def test_the_identity_mark_is_written_last(tmp_path, quiet_optuna):
    plan = _plan(tmp_path)
    study = optuna.create_study(storage=plan.storage_url, study_name="s", directions=list(DIRECTIONS))
    recorder = Recorder(study)
    StudyAttrs(recorder).write_identity(plan.study_attrs())
    assert recorder.keys[-1] == IDENTITY_MARK and len(recorder.keys) == len(plan.study_attrs())
    assert recorder.keys.count(IDENTITY_MARK) == 1


def test_a_study_another_driver_is_creating_is_waited_for_and_joined(tmp_path, quiet_optuna):
    plan = _plan(tmp_path)
    storage = stores.open_storage(plan.storage_url)
    made = optuna.create_study(storage=storage, study_name=plan.study_name, directions=list(DIRECTIONS))
    StudyAttrs(made).write_identity({k: v for k, v in plan.study_attrs().items() if k != IDENTITY_MARK})

    def finish():  # the other driver, a second later, writes the mark that ends its identity
        time.sleep(1.0)
        made.set_user_attr(IDENTITY_MARK, plan.study_attrs()[IDENTITY_MARK])

    other = threading.Thread(target=finish)
    other.start()
    t, notes = time.monotonic(), []
    study = open_study(plan, storage, lambda e: notes.append(e.text))  # before: "another program's Optuna study"
    other.join()
    assert 0.8 < time.monotonic() - t < stores.CREATION_WAIT_S
    assert notes == [f"study {plan.study_name!r} is being created by another `advisor tune` (no identity stored "
                     "yet): waiting up to 20 s for it"]
    assert study._study_id == made._study_id and StudyAttrs(study).all() == plan.study_attrs()


def test_a_half_made_study_joined_with_another_setup_is_refused(tmp_path, quiet_optuna):
    """The other driver's identity, once stored, is checked as on resuming."""
    mine, theirs = _plan(tmp_path, 64), _plan(tmp_path, 128)
    storage = stores.open_storage(mine.storage_url)
    made = optuna.create_study(storage=storage, study_name=mine.study_name, directions=list(DIRECTIONS))
    threading.Timer(0.5, lambda: StudyAttrs(made).write_identity(theirs.study_attrs())).start()
    with pytest.raises(StudyError, match="was run with another setup: settings: train_samples 128 then, 64 now"):
        open_study(mine, storage)
    assert StudyAttrs(made).all()["settings"]["train_samples"] == 128  # theirs, untouched


def test_a_study_that_never_gets_an_identity_is_refused_saying_what_it_may_be(tmp_path, quiet_optuna, monkeypatch):
    monkeypatch.setattr(stores, "CREATION_WAIT_S", 0.5)
    plan = _plan(tmp_path)
    storage = stores.open_storage(plan.storage_url)
    optuna.create_study(storage=storage, study_name=plan.study_name, directions=list(DIRECTIONS))
    with pytest.raises(StudyError, match=r"is another program's Optuna study, not advisor's: advisor would not add "
                                         r"its trials to it \(or an `advisor tune` stopped as it created it: it "
                                         r"holds no trial and no identity\)\. Use --study NEW_NAME"):
        open_study(plan, storage)
    assert optuna.load_study(study_name=plan.study_name, storage=storage).user_attrs == {}  # nothing written


def test_a_study_another_driver_created_after_this_one_looked_is_checked_not_written(tmp_path, quiet_optuna,
                                                                                    monkeypatch):
    """Both looked and found none; the other created it and wrote its identity first. This
    driver's create_study loads it, and its identity is checked, not overwritten. (The look
    finding none is a stand-in: the storage is read once before the other driver writes.)"""
    mine, theirs = _plan(tmp_path, 64), _plan(tmp_path, 128)
    storage = stores.open_storage(mine.storage_url)
    real = stores.summary

    def look_first_then_the_other_creates(*args, **kwargs):
        found = real(*args, **kwargs)
        made = optuna.create_study(storage=storage, study_name=mine.study_name, directions=list(DIRECTIONS))
        StudyAttrs(made).write_identity(theirs.study_attrs())
        return found

    monkeypatch.setattr(stores, "summary", look_first_then_the_other_creates)
    with pytest.raises(StudyError, match="was run with another setup"):
        open_study(mine, storage)
    study = optuna.load_study(study_name=mine.study_name, storage=storage)
    assert StudyAttrs(study).all() == theirs.study_attrs()  # not replaced: the other driver's to run

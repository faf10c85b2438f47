"""A study an earlier version kept with only its failed baseline (nothing measured, no
driver on it) is replaced when model.py changed, instead of refusing the same command;
one that measured anything, or that a live driver is on, is still refused."""

from __future__ import annotations

import time

import optuna
import pytest

from advisor.core.errors import StudyError
from advisor.core.events import Note
from advisor.core.study_attrs import StudyAttrs
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run.plan import open_study, plan_study
from advisor.study.storage.stores import open_storage

from conftest import EXAMPLES


def _plan(tmp_path, extra=""):
    path = tmp_path / "model.py"
    path.write_text((EXAMPLES / "digits_mlp.py").read_text() + extra)
    return plan_study(TuneOptions(workload_path=str(path), space="quick", train_samples=64,
                                  storage=f"sqlite:///{tmp_path / 's.db'}"))


@pytest.mark.parametrize("left", ["failed", "failed-and-waiting", "measured", "driver", "running"])
def test_a_study_of_only_a_failed_baseline_is_replaced_when_model_py_changed(tmp_path, quiet_optuna, left):
    first = _plan(tmp_path)
    study = open_study(first, open_storage(first.storage_url))
    trial = study.ask()
    if left == "measured":
        study.tell(trial, [100.0, 1e6, 0.9])
    elif left != "running":
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    if left == "failed-and-waiting":  # a proposal queued before the baseline failed: nothing measured
        study.enqueue_trial({})
    if left == "running":  # asked by a driver that has not told it (another, possibly alive)
        study.ask()
    if left == "driver":  # another driver beat on it a second ago
        StudyAttrs(study).set_heartbeat("host:1:ab", {"host": "host", "pid": 1, "at": time.time(), "hardware": "h"})
    fixed = _plan(tmp_path, "\n# fixed\n")  # another sha256: not resumable as it stands
    notes: list[str] = []
    if not left.startswith("failed"):
        with pytest.raises(StudyError, match=r"was run with another setup: model.py.s content changed "
                                             r"\(sha256 [0-9a-f]{12}\.\.\. then, [0-9a-f]{12}\.\.\. now\)"):
            open_study(fixed, open_storage(fixed.storage_url))
        return
    again = open_study(fixed, open_storage(fixed.storage_url),
                       lambda e: notes.append(e.text) if isinstance(e, Note) else None)
    assert again.trials == [] and StudyAttrs(again).all()["workload_sha256"] == fixed.workload.sha256
    assert notes == [f"study {fixed.study_name!r} held only a failed baseline, nothing measured: replaced by this "
                     "setup's"]

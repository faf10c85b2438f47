"""The default training budget capped by time (advisor/study/run/_training_budget.py): the
arithmetic on given timings, and one real study (local Ray, SQLite, a torch model) whose
default budget does not fit its --budget, resumed with the budget it chose."""

from __future__ import annotations

import math
import time

import pytest

from advisor.core.events import Note, TimeLimit
from advisor.core.stored import read_study
from advisor.core.study_attrs import TRAINING_BUDGET as ATTR
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run._estimate import TRAINING_SHARE
from advisor.study.run._training_budget import CAP_S, MIN_BATCHES, choose, training_runs
from advisor.study.run.plan import plan_study
from advisor.study.run.tuner import Tuner
from advisor.study.storage import stores as st

from conftest import write_model


def test_the_default_is_kept_when_the_studys_training_runs_fit_the_cap():
    # 19 runs of 1 s + 7185 samples at 5,897 samples/s: about 42 s in all
    budget = choose(7185, 64, 5897.0, 1.0, 19.0, CAP_S)
    assert budget.train_samples == 7185 and not budget.capped


def test_a_default_that_does_not_fit_is_cut_to_whole_batches_that_fit():
    # 1,000,000 samples at 400 samples/s: 2,510 s a run, 19 runs: 13 h 14 min; the cap is 40 min
    budget = choose(1_000_000, 32, 400.0, 10.0, 19.0, CAP_S)
    assert budget.capped and budget.train_samples % 32 == 0
    assert budget.runs * budget.run_s(budget.train_samples) <= CAP_S  # fits ...
    assert budget.runs * budget.run_s(budget.train_samples + 32) > CAP_S  # ... with not one batch more
    assert budget.train_samples == math.floor((CAP_S / 19 - 10) * 400 / 32) * 32
    assert choose(1_000_000, 32, 400.0, 10.0, 19.0, CAP_S) == budget  # the same times, the same budget


def test_a_cap_that_not_even_a_few_batches_fit_keeps_a_few_batches():
    budget = choose(1_000_000, 64, 10.0, 200.0, 19.0, CAP_S)  # each run's overhead alone is near the cap's share
    assert budget.train_samples == MIN_BATCHES * 64 and budget.capped
    assert choose(320, 64, 10.0, 200.0, 19.0, CAP_S).train_samples == 320  # never more than the default


def test_the_note_says_what_was_chosen_why_and_how_to_choose_otherwise():
    budget = choose(1_000_000, 32, 400.0, 10.0, 19.0, CAP_S)
    text = budget.text(5.0, 32, budget=False)
    assert text.startswith(f"training budget: {budget.train_samples:,} samples per training run "
                           f"({budget.train_samples // 32} batches of 32), not the default 1,000,000 (5 epochs): "
                           "at 400 samples/s (the baseline's probe) the study's ~19 training runs would take "
                           "about 13 h 14 min, over 40 min 00 s, the default cap; now about ")
    assert text.endswith("--train-samples N chooses it yourself")
    assert "half of --budget, 5 min 00 s" in choose(1_000_000, 32, 400.0, 10.0, 19.0, 300.0).text(5.0, 32, True)


def test_the_training_runs_counted_are_the_seeds_the_searchs_share_and_the_candidates_seeds():
    assert training_runs(20, 3, 6, two_stage=True) == 3 + TRAINING_SHARE * 19 + 6 * 2
    assert training_runs(20, 1, 6, two_stage=False) == 1 + 19
    assert training_runs(1, 3, 6, two_stage=True) == 3


BIG = '''import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 64}


def model():
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 4))


def datasets():
    """60,000 training items: the default budget, 5 epochs, is 300,000 samples a run."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60_512, 256, generator=g)
    y = x[:, :4].argmax(dim=1)
    return TensorDataset(x[:60_000], y[:60_000]), TensorDataset(x[60_000:], y[60_000:])
'''


@pytest.mark.ray
def test_a_study_caps_its_default_budget_says_so_and_resumes_with_it(ray_session, tmp_path):
    """--budget 16 s leaves its training runs 8 s: far less than 5 epochs of 60,000 items
    take on this CPU (300,000 samples through three wide layers, about 2.4 TFLOP). The budget chosen is the
    one every training run trained, the one stored, and the one a resume uses without
    timing anything again."""
    path = write_model(tmp_path, BIG)
    options = TuneOptions(workload_path=str(path), space="eager", trials=2, budget=16,
                          storage=f"sqlite:///{tmp_path / 's.db'}", metric_seeds=1, confirm=False)
    plan = plan_study(options)
    assert plan.settings.train_samples == 300_000
    notes: list[str] = []
    limits: list[TimeLimit] = []
    told_at: list[float] = []

    def on_event(e) -> None:
        if isinstance(e, Note):
            notes.append(e.text)
            if e.text.startswith("training budget: "):
                told_at.append(time.monotonic())
        elif isinstance(e, TimeLimit):
            limits.append(e)

    Tuner(plan, on_event=on_event).run()
    said = [n for n in notes if n.startswith("training budget: ")]
    assert len(said) == 1 and "not the default 300,000 (5 epochs)" in said[0] and "half of --budget, 8 s" in said[0]
    # the budget counts the sizing probe: its clock started before the probe that chose the budget
    [limit] = limits
    assert limit.flag == "--budget" and limit.limit_s == 16 and limit.started < told_at[0]
    storage = st.open_storage(options.storage)
    study = read_study(st.load(storage, "model-eager"))
    decision = study.attrs[ATTR]
    assert decision["capped"] and decision["train_samples"] < 300_000 and decision["train_samples"] % 64 == 0
    assert study.attrs["settings"]["train_samples"] == decision["train_samples"]
    trained = [r for r in study.records if r.get("accuracy_run") and r.get("train_samples")]
    assert any(r.baseline for r in trained)  # what each trained: whole batches of the budget
    assert all(decision["train_samples"] - r.config.batch_size < r.get("train_samples") <= decision["train_samples"]
               for r in trained), [(r.number, r.get("train_samples")) for r in trained]

    # resumed: the stored budget, not a new measurement (no note, no settings refused)
    again: list[str] = []
    resumed = plan_study(options)
    assert resumed.settings.train_samples == 300_000  # planned with the default; the stored decision wins
    Tuner(resumed, on_event=lambda e: again.append(e.text) if isinstance(e, Note) else None).run()
    assert not [n for n in again if n.startswith("training budget: ")]
    after = read_study(st.load(storage, "model-eager"))
    assert after.attrs["settings"]["train_samples"] == decision["train_samples"] and after.attrs[ATTR] == decision

"""The explorer's data layer on a recorded study: views, front under filters, sorting."""

from __future__ import annotations

import pytest

from advisor.core.metric import MetricSpec
from advisor.core.stored import read_study
from advisor.study.storage import stores as st
from advisor.tui.data import Filters, StudyData

from recorded_study import NAME, add_probed_trial, write_recorded_study


@pytest.fixture
def data(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    write_recorded_study(url)
    d = StudyData(st.open_storage(url), NAME)
    d.reload()
    return d


def test_views_split_the_trials(data):
    assert [r.number for r in data.view("front")] == [0, 1, 2, 3, 4, 7, 10]
    assert [r.number for r in data.view("failed")] == [8, 9]
    assert [r.number for r in data.view("all")] == list(range(11))
    assert data.counts() == {"complete": 9, "probed": 0, "failed": 2, "skipped": 0, "running": 0, "front": 7,
                             "infeasible": 2}


def test_a_probed_only_trial_shows_as_such(data):
    """Two-stage evaluation: a trial stored PRUNED with its probe and why no training run
    was needed shows in the 'all' view with its speed and memory, never on the front."""
    from advisor.tui.widgets.detail import describe
    from advisor.tui.widgets.trial_table import TrialTable

    trial = add_probed_trial(st.load(data.storage, NAME))
    data.reload()
    row = next(r for r in data.rows if r.number == trial.number)
    assert row.state == "probed" and not row.on_front and row.throughput == 3000.0
    assert trial.number in [r.number for r in data.view("all")] and data.counts()["probed"] == 1
    cells = [text for text, _, _ in TrialTable._figure_cells(row)]
    assert cells[1] == "3,000" and "unconfirmed" in cells[2] and cells[5] == "probed"
    text = describe(row, data.attrs).plain
    assert "probed: 3,000 samples/s" in text and "no training run needed: dominated by trial 1" in text


def test_front_matches_optuna_without_filters(data):
    """Without filters, the explorer's front is Optuna's own feasible front (duplicates aside)."""
    study = st.load(data.storage, NAME)
    assert {r.number for r in data.rows if r.on_front} == {t.number for t in study.best_trials}
    assert {r.number for r in data.rows if r.on_front} == {r.number for r in read_study(study).front()}


def test_filters_recompute_the_front(data):
    data.set_filters(Filters(memory_cap=110 * 2**20))
    # 2 (131 MiB) and 3 (192.5 MiB) are filtered out; nothing they dominated was hidden by them here
    assert [r.number for r in data.view("front")] == [0, 1, 4, 7, 10]
    data.set_filters(Filters(max_drop_pt=0.0))
    assert [r.number for r in data.view("front")] == [0, 3, 4, 7, 10]
    assert "accuracy drop <= 0 pt" in data.filters.describe()
    mse = MetricSpec(name="mse", higher_is_better=False, fraction=False)  # a regression study's: no points
    assert Filters(max_drop_pt=0.05).describe(mse) == "mse drop <= 0.05"
    data.set_filters(Filters(max_drop_pt=0.0, memory_cap=100 * 2**20))
    assert [r.number for r in data.view("front")] == [0, 4, 10]
    assert [r.number for r in data.view("all")] == [0, 4, 8, 9, 10]  # failures stay visible


def test_sorting_and_ratios(data):
    by_speed = data.view("front", sort="throughput", reverse=True)
    assert [r.number for r in by_speed][:3] == [2, 3, 1]
    two = next(r for r in data.rows if r.number == 2)
    assert two.versus.summary() == "throughput 1.76x unconfirmed, memory 1.33x unconfirmed, accuracy -0.6 pt"
    four = next(r for r in data.rows if r.number == 4)
    assert four.versus.summary().startswith("throughput 0.61x unconfirmed")
    assert two.value("memory") == pytest.approx(131.0)


def test_a_study_not_created_yet_is_empty(tmp_path):
    d = StudyData(st.open_storage(f"sqlite:///{tmp_path / 'new.db'}"), "later")
    d.reload()
    assert d.rows == [] and d.baseline is None and d.view("front") == []


def test_a_lower_is_better_metric_reads_as_itself_in_the_explorer(tmp_path):
    """The explorer's rows of an MSE study: the scatter axis and the filter's drop are the
    metric itself (the stored score is its negative)."""
    from advisor.core.metric import MetricSpec
    from advisor.core.objectives import Figures, Versus
    from advisor.core.stored import TrialRecord
    from advisor.tui.data import Filters, TrialRow

    mse = MetricSpec("mse", higher_is_better=False, fraction=False)
    record = TrialRecord(1, "complete", None, Figures(100.0, 10.0, -0.5))
    row = TrialRow(record, Versus(1.0, 1.0, -0.2), metric=mse)  # 0.2 worse than the baseline's MSE
    assert row.value("metric") == 0.5
    assert Filters(max_drop_pt=0.25).keep(row) and not Filters(max_drop_pt=0.1).keep(row)

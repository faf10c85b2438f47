"""The explorer reads storage incrementally, in a worker thread: a trial another writer
adds appears without the study being read whole again, bursts of events are coalesced,
and filters, views and sorting never read storage. Real SQLite throughout; the storage's
calls are counted by wrapping its methods."""

from __future__ import annotations

import threading

import optuna
import pytest
from explorer_pilot import FakeLiveRun, StorageCalls, loaded, until

from advisor.core.events import Cancelled, Started
from advisor.study.storage import stores as st
from advisor.tui import make_app
from advisor.tui.data import Filters, StudyData
from advisor.tui.widgets import TrialTable

from recorded_study import NAME, add_probed_trial, write_recorded_study

MiB = 2**20


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_recorded_study(url)
    return url


def _writer(url: str) -> optuna.Study:
    """Another writer: its own connection to the same database (as the tuner's is)."""
    return optuna.load_study(study_name=NAME, storage=url)


def test_a_read_fetches_only_new_and_unfinished_trials(url):
    storage = st.open_storage(url)
    calls = StorageCalls(storage)
    data = StudyData(storage, NAME)
    data.reload()
    assert len(data.rows) == 11 and calls.trials_read == 11
    writer = _writer(url)
    calls.reset()
    running = writer.ask()  # another writer starts a trial ...
    data.reload()
    assert data.rows[-1].state == "running" and calls.trials_read == 1
    assert not {"get_all_trials", "get_all_studies"} & set(calls.names())
    calls.reset()
    writer.tell(running, state=optuna.trial.TrialState.FAIL)  # ... finishes it, and adds another
    add_probed_trial(writer)
    data.reload()
    assert [r.state for r in data.rows[-2:]] == ["failed", "probed"]
    assert calls.trials_read == 2  # the one unfinished at the last read, and the new one
    calls.reset()
    data.reload()  # nothing changed: nothing read but the study's attributes
    assert calls.trials_read == 0


def test_filters_views_and_sorting_do_not_read_storage(url):
    storage = st.open_storage(url)
    data = StudyData(storage, NAME)
    data.reload()
    calls = StorageCalls(storage)
    data.set_filters(Filters(max_drop_pt=0.0, memory_cap=100 * MiB))
    assert [r.number for r in data.view("front")] == [0, 4, 10]
    data.view("all", sort="memory", reverse=True)
    data.counts()
    assert calls.calls == []


async def test_the_live_explorer_reads_off_the_ui_thread_and_follows_another_writer(url):
    storage = st.open_storage(url)
    calls = StorageCalls(storage)
    live = FakeLiveRun(storage)
    app = make_app(url, NAME, live=live)
    ui_thread = threading.get_ident()  # run_test runs the app on this thread's loop
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        live.send(Started(0.0, 1, {}, 0))
        await until(pilot, lambda: len(screen.data.rows) == 11)
        await loaded(pilot)
        screen.action_cycle_view()  # all trials
        assert screen.query_one(TrialTable).row_count == 11
        calls.reset()

        writer = _writer(url)
        numbers = [add_probed_trial(writer).number for _ in range(3)]
        live.send(*[Cancelled(n) for n in numbers for _ in range(10)])  # a burst of 30 events
        await until(pilot, lambda: len(screen.data.rows) == 14)
        await loaded(pilot)
        assert screen.query_one(TrialTable).row_count == 14
        reads = calls.names()["_get_trials"]
        assert 1 <= reads <= 5, f"30 events, {reads} reads: the burst was not coalesced"
        assert calls.trials_read <= 3 * reads  # only the new trials came from the database
        assert calls.calls and all(thread != ui_thread for _, thread in calls.calls), \
            "the storage was read on the UI thread"

        calls.reset()
        screen.data.set_filters(Filters(memory_cap=110 * MiB))
        screen.render_view()
        await pilot.press("v", "s", "r", "c")  # view, sort, reverse, clear the filters
        await pilot.pause()
        assert calls.calls == [], "filtering, sorting or changing the view read storage"


async def test_the_explorer_opens_before_its_study_is_read(url, monkeypatch):
    """The screen is up while the read is still in flight (a slow storage does not block it)."""
    release = threading.Event()
    read = StudyData.read

    def slow_read(self):
        release.wait(10)
        return read(self)

    monkeypatch.setattr(StudyData, "read", slow_read)
    app = make_app(url, NAME)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert screen.loading and screen.data.rows == []
        assert "reading the study" in str(screen.query_one("#status").render())
        await pilot.press("v")  # the UI answers meanwhile
        assert screen.view == "all"
        release.set()
        await loaded(pilot)
        assert not screen.loading and screen.query_one(TrialTable).row_count == 11

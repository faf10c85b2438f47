"""The live explorer shows the time elapsed and left when the study has a time limit
(--budget or --timeout), on the recorded study (real SQLite). The tuner is a stand-in
(``FakeLiveRun``, the ``LiveRun`` the explorer sees) that sends the events a study with --budget
sends; the screen's clock is set by the test, so that the text is exact."""

from __future__ import annotations

import pytest
from explorer_pilot import FakeLiveRun, loaded, until

from advisor.core.events import Note, Started, Stopped, TimeLimit
from advisor.study.storage import stores as st
from advisor.tui import make_app

from recorded_study import NAME, write_recorded_study


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_recorded_study(url)
    return url


def _eta(screen) -> str:
    return str(screen.query_one("#eta").render())


async def test_the_live_line_shows_the_time_elapsed_and_left_and_keeps_counting(url):
    live = FakeLiveRun(st.open_storage(url), total=20, done=3)
    app = make_app(url, NAME, live=live)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        now = [1000.0 + 65.2]
        screen.clock = lambda: now[0]
        live.send(Started(0.0, 1, {}, 3), TimeLimit(1000.0, 1800.0, "--budget"), Note("the baseline is in"))
        await until(pilot, lambda: "left of" in _eta(screen))
        await loaded(pilot)
        assert _eta(screen) == (" 3/20 trials · the baseline is in · 1 min 05 s elapsed, 28 min 55 s left of --budget "
                                "30 min 00 s")
        now[0] = 1000.0 + 1795.0  # no event meanwhile: the screen's own tick moves it
        await until(pilot, lambda: "29 min 55 s elapsed, 5 s left" in _eta(screen), what="the clock's tick")
        live.send(Stopped("the study's --budget was spent"))
        await until(pilot, lambda: "study stopped" in _eta(screen))
        assert _eta(screen) == " study stopped: the study's --budget was spent — e exports, q quits"


async def test_without_a_time_limit_no_time_is_shown(url):
    live = FakeLiveRun(st.open_storage(url), total=20, done=3)
    app = make_app(url, NAME, live=live)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        live.send(Started(0.0, 1, {}, 3), Note("the baseline is in"))
        await until(pilot, lambda: "baseline is in" in _eta(screen))
        await loaded(pilot)
        assert _eta(screen) == " 3/20 trials · the baseline is in"

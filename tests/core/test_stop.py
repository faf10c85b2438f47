"""advisor/core/stop.py: the one object a running study's waits read to know whether to
stop (the user's request first; the budget's end on a view of it)."""

from __future__ import annotations

import time

from advisor.core.stop import Stop


def test_the_first_request_stays():
    stop = Stop()
    assert stop.reason is None and not stop.halted
    assert stop.request("interrupted by SIGINT")
    assert not stop.request("interrupted by SIGTERM")  # a second Ctrl-C: the caller aborts at once
    assert stop.reason == "interrupted by SIGINT" and stop.halted


def test_a_view_by_a_time_stops_at_that_time_unless_the_user_stopped_first():
    stop = Stop()
    later = stop.by(time.monotonic() + 3600, "the study's --budget was spent")
    spent = stop.by(time.monotonic() - 1, "the study's --budget was spent")
    assert later.reason is None and not later.halted
    assert spent.reason == "the study's --budget was spent" and spent.halted
    assert stop.reason is None  # the view's time does not stop the study itself
    assert later.request("interrupted by SIGINT")  # a request on a view is the user's
    assert stop.reason == later.reason == spent.reason == "interrupted by SIGINT"
    assert not stop.request("again")

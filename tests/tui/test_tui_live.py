"""`advisor tune` with the explorer attached: a short real study (real Ray, real SQLite,
the digits MLP) runs in the background while Pilot watches rows arrive; quitting early
stops the study gracefully."""

from __future__ import annotations

import pytest
from explorer_pilot import until

from advisor.core.stored import read_trial
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run.background import BackgroundTune
from advisor.study.run.plan import plan_study
from advisor.tui import make_app
from advisor.tui.widgets import TrialTable

from conftest import EXAMPLES

pytestmark = pytest.mark.ray
_LIVE = {"timeout": 240.0, "interval": 0.2, "what": "the live study"}  # real trials: minutes


def _background(trials: int) -> BackgroundTune:
    background = BackgroundTune(plan_study(TuneOptions(
        workload_path=str(EXAMPLES / "digits_mlp.py"), space="quick", trials=trials, train_samples=1437,
        trial_timeout=120, confirm=False, metric_seeds=1)))
    background.tuner.start_executor()  # joins the session's Ray
    return background


async def test_live_explorer_shows_trials_as_they_finish(ray_session, workdir, quiet_optuna):
    background = _background(trials=3)
    plan = background.tuner.plan
    app = make_app(plan.storage_url, plan.study_name, live=background)
    seen: list[int] = []
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen

        def rows_now() -> int:
            count = len([r for r in screen.data.rows if r.state in ("complete", "probed", "failed")])
            if not seen or seen[-1] != count:
                seen.append(count)
            return count

        screen.action_cycle_view()  # all trials
        await until(pilot, lambda: rows_now() >= 1 and not background.running, **_LIVE)
        await pilot.pause()
        assert seen[0] == 0 and seen[-1] >= 3, seen
        assert any(0 < n < seen[-1] for n in seen), f"rows arrived all at once: {seen}"
        assert screen.query_one(TrialTable).row_count >= 3
        bar = screen.query_one("#progress")
        assert (bar.total, bar.progress) == (3, 3)
        assert "study stopped: finished" in str(screen.query_one("#eta").render())
        assert screen.has_class("done")
    study = background.join().study
    assert sum(1 for t in study.trials if read_trial(t).counted) == 3


async def test_quitting_the_explorer_stops_the_study_gracefully(ray_session, workdir, quiet_optuna):
    background = _background(trials=50)
    plan = background.tuner.plan
    app = make_app(plan.storage_url, plan.study_name, live=background)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: background.done >= 2, **_LIVE)
        await pilot.press("q")
    outcome = background.join()  # returns: running trials were cancelled and recorded
    assert outcome.stop_reason == "interrupted by the user (quit from the explorer)" and outcome.interrupted
    assert not [t for t in outcome.study.trials if t.state.name == "RUNNING"]
    assert 2 <= sum(1 for t in outcome.study.trials if read_trial(t).counted) < 50

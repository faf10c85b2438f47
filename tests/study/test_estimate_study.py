"""How long the rest of a study should take (advisor/study/run/_estimate.py), from a baseline
record with known times: each part's arithmetic, and what the study prints."""

from __future__ import annotations

import pytest

from advisor.core.config import TrialConfig
from advisor.core.objectives import Figures
from advisor.core.stored import TrialRecord
from advisor.core.units import duration_text
from advisor.study.run._estimate import TRAINING_SHARE, estimate


def baseline(**attrs) -> TrialRecord:
    return TrialRecord(0, "complete", TrialConfig(batch_size=64), Figures(1000.0, 100.0, 0.95), baseline=True,
                       attrs=attrs)


def test_a_two_stage_study_costs_probes_accuracy_runs_seeds_and_pairs():
    base = baseline(probe_wall_s=2.0, accuracy_run={"wall_s": 6.0}, wall_s=8.0)
    e = estimate(base, 19, two_stage=True, seeds=3, confirm=True, top=6, pairs=8)
    assert e.per_trial_s == pytest.approx(2.0 + TRAINING_SHARE * 6.0)
    assert e.search_s == pytest.approx(19 * 5.0 + 2 * 2.0)  # 19 trials, the baseline re-measured twice
    assert e.more_seeds_s == pytest.approx(6 * 2 * 6.0)  # at most 6 candidates, 2 more seeds each
    assert e.confirm_s == pytest.approx(8 * (6 + 2) * 2.0)  # 8 rounds of 6 candidates and 2 baseline runs
    assert e.total_s == pytest.approx(99 + 72 + 128)
    assert e.text().startswith("about 4 min 59 s from here on this machine (19 trial(s) at ~5 s each: 1 min 39 s; ")


def test_full_trials_and_no_confirmation():
    e = estimate(baseline(wall_s=30.0), 4, two_stage=False, seeds=1, confirm=False, top=6, pairs=8)
    assert (e.per_trial_s, e.search_s, e.more_seeds_s, e.confirm_s) == (30.0, 150.0, 0.0, 0.0)
    assert "confirmation" not in e.text() and "more seeds" not in e.text()


def test_no_estimate_without_the_baselines_times():
    assert estimate(baseline(), 10, two_stage=True, seeds=3, confirm=True, top=6, pairs=8) is None
    assert estimate(baseline(wall_s=0.0), 10, two_stage=False, seeds=1, confirm=True, top=6, pairs=8) is None


def test_durations_read_as_people_say_them():
    assert [duration_text(s) for s in (4.4, 59.6, 61, 3599, 3600, 7500)] == [
        "4 s", "60 s", "1 min 01 s", "59 min 59 s", "1 h 00 min", "2 h 05 min"]


def test_a_budget_ends_the_search_early_enough_for_seeds_and_confirmation():
    from advisor.study.run._estimate import budget_plan

    base = baseline(probe_wall_s=2.0, accuracy_run={"wall_s": 6.0}, wall_s=8.0)
    e = estimate(base, 19, two_stage=True, seeds=3, confirm=True, top=6, pairs=8)  # 72 s seeds + 128 s pairs
    end, text = budget_plan(e, now=100.0, budget_end=100.0 + 600.0, budget_s=900.0)
    assert end == pytest.approx(100.0 + 600.0 - 200.0)  # 400 s of search: 19 trials of ~5 s fit
    assert text.startswith("--budget 15 min 00 s: the search runs 6 min 40 s more, about 19 of the 19 trials left; "
                           "3 min 20 s is kept for the undecided candidates' seeds and the confirmation")
    end, text = budget_plan(e, now=100.0, budget_end=100.0 + 150.0, budget_s=900.0)
    assert end == 100.0 and text.endswith("(the budget is spent already: no more search)")
    end, text = budget_plan(None, now=0.0, budget_end=60.0, budget_s=60.0)  # no times: the search may use it all
    assert end == 60.0 and "0 s is kept" in text


def test_durations_are_parsed_as_typed():
    from advisor.core.errors import StudyError
    from advisor.core.units import parse_duration
    from advisor.study.options.tune_options import TuneOptions

    assert [parse_duration(t) for t in ("90", "90s", "30m", "2h", "1h30m", "2min")] == [
        90, 90, 1800, 7200, 5400, 120]
    with pytest.raises(ValueError, match="expected a duration such as 90, 90s, 30m, 2h or 1h30m, found 'soon'"):
        parse_duration("soon")
    assert TuneOptions.given("m.py", {"budget": "30m"}, python=True).budget == 1800
    with pytest.raises(StudyError, match="budget='soon': expected a duration"):
        TuneOptions.given("m.py", {"budget": "soon"}, python=True)
    with pytest.raises(StudyError, match="--budget must be a positive number of seconds, found -5"):
        TuneOptions("m.py", budget=-5).check()

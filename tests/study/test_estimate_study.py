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


def test_a_budget_sizes_the_confirmation_candidates_first_then_pairs():
    from advisor.core.pairs import MIN_PAIRS
    from advisor.core.picks import PICKS
    from advisor.study.options.tune_options import ConfirmOptions
    from advisor.study.run._estimate import CONFIRM_SHARE, confirmation_s, plan_confirmation

    asked = ConfirmOptions(top=6, max_pairs=8)
    assert confirmation_s(6, 8, 1.0) == 64.0  # 8 rounds of 6 candidates and their 2 baseline runs
    roomy = plan_confirmation(asked, 1.0, 64.0 / CONFIRM_SHARE)
    assert roomy.options == asked and "at most 6 candidate(s), up to 8 pairs each" in roomy.text
    assert "cut from" not in roomy.text
    # each tighter budget takes the next step, and the plan always fits its share
    steps = [(len(PICKS), 8), (len(PICKS), MIN_PAIRS), (1, MIN_PAIRS)]
    for budget, (top, pairs) in zip((200.0, 140.0, 60.0), steps):
        plan = plan_confirmation(asked, 1.0, budget)
        assert plan.options is not None and (plan.options.top, plan.options.max_pairs) == (top, pairs), budget
        assert confirmation_s(top, pairs, 1.0) <= CONFIRM_SHARE * budget
        assert plan.options.target == asked.target
        assert "cut from --confirm-top 6 and --pairs 8 (~1 min 04 s)" in plan.text
    # 5 candidates fit at 8 pairs before 4 would: it cuts one candidate at a time
    assert plan_confirmation(asked, 1.0, 56.0 / CONFIRM_SHARE).options.top == 5
    none = plan_confirmation(asked, 1.0, 50.0)
    assert none.options is None
    assert none.text == (f"no paired confirmation: one candidate's {MIN_PAIRS} pairs would take ~15 s, more than a "
                         "quarter of --budget 50 s; the front's figures stay unconfirmed (`advisor confirm` confirms "
                         "them later), or a --budget of 1 min 00 s or more leaves room for it")


def test_a_budget_never_confirms_more_than_asked_and_needs_the_baselines_times():
    from advisor.study.options.tune_options import ConfirmOptions
    from advisor.study.run._estimate import plan_confirmation

    few = ConfirmOptions(top=2, max_pairs=3)  # below the picks and below MIN_PAIRS: kept as asked
    assert plan_confirmation(few, 1.0, 10_000.0).options == few
    assert plan_confirmation(few, 1.0, 4 * 3 * 3.0).options == ConfirmOptions(top=1, max_pairs=3)
    assert plan_confirmation(few, 1.0, 4 * 3 * 3.0 - 1).options is None
    unknown = plan_confirmation(ConfirmOptions(), 0.0, 1.0)  # no probe time stored: as asked, nothing said
    assert unknown.options == ConfirmOptions() and unknown.text == ""


def test_the_estimate_counts_the_planned_confirmation():
    base = baseline(probe_wall_s=2.0, accuracy_run={"wall_s": 6.0}, wall_s=8.0)
    e = estimate(base, 19, two_stage=True, seeds=3, confirm=True, top=6, pairs=5, confirm_top=1)
    assert e.more_seeds_s == pytest.approx(6 * 2 * 6.0)  # the seeds' candidates are not the budget's to cut
    assert e.confirm_s == pytest.approx(5 * (1 + 2) * 2.0)


def test_the_baselines_cold_start_is_not_counted_for_the_warm_trials_after_it(monkeypatch):
    from advisor.study.run._estimate import one_probe_s

    monkeypatch.delenv("ADVISOR_COLD_TRIALS", raising=False)
    # the study's first trial also started the fork server (2.5 s of imports); the trials after it fork in ms
    base = baseline(probe_wall_s=3.0, accuracy_run={"wall_s": 6.0}, wall_s=9.0, phase_s={"process_start": 2.5})
    assert one_probe_s(base, two_stage=True) == pytest.approx(0.5)
    assert one_probe_s(base, two_stage=False) == pytest.approx(6.5)
    e = estimate(base, 10, two_stage=True, seeds=1, confirm=False, top=6, pairs=8)
    assert e.per_trial_s == pytest.approx(0.5 + TRAINING_SHARE * 6.0)
    nonsense = baseline(probe_wall_s=3.0, phase_s={"process_start": 4.0})  # a start longer than the run: as stored
    assert one_probe_s(nonsense, two_stage=True) == 3.0
    monkeypatch.setenv("ADVISOR_COLD_TRIALS", "1")  # every trial starts an interpreter: the baseline's start is typical
    assert one_probe_s(base, two_stage=True) == pytest.approx(3.0)
    monkeypatch.delenv("ADVISOR_COLD_TRIALS")
    # GPT-2 on an H200: a 36 s baseline probe, 9.1 s of it the start and 14.6 s its memory plan, which a later
    # probe makes only when its memory is at stake
    gpt2 = baseline(probe_wall_s=36.1, phase_s={"process_start": 9.1, "estimate": 14.6})
    assert one_probe_s(gpt2, two_stage=True) == pytest.approx(12.4)


def test_counts_read_as_people_say_them():
    from advisor.core.units import plural

    assert [plural(n, "proposal") for n in (0, 1, 2)] == ["0 proposals", "1 proposal", "2 proposals"]
    assert plural(1, "configuration") == "1 configuration" and plural(3, "entry", "entries") == "3 entries"

"""The noise rules: the sentinel's verdicts, the metric's epsilon, and epsilon-dominance
on the front."""

from __future__ import annotations

import pytest

from advisor.core.noise import (
    DISTURBED_AT,
    MIN_READINGS,
    MetricNoise,
    SentinelJudge,
    reading_of,
    recent_reference,
    within_noise,
)
from advisor.core.objectives import dominates, pareto_front


def test_reading_is_the_geometric_mean_of_before_and_after():
    assert reading_of({"sentinel": {"before_s": 0.004, "after_s": 0.009}}) == pytest.approx(0.006)
    assert reading_of({"sentinel": {"before_s": 0.004}}) == pytest.approx(0.004)
    assert reading_of({}) is None and reading_of(None) is None and reading_of({"sentinel": "x"}) is None


def test_judge_needs_readings_then_flags_slowdowns_only():
    judge = SentinelJudge()
    for _ in range(MIN_READINGS - 1):
        judge.add(0.007)
    assert judge.disturbed(0.030) is None  # too few readings to judge
    judge.add(0.007)
    assert judge.disturbed(0.007 * (DISTURBED_AT - 0.05)) is None
    slow = judge.disturbed(0.007 * 2)
    assert slow and "2.00x slower" in slow
    assert judge.disturbed(0.007 / 2) is None  # a faster machine is never a disturbed one
    judge.add(None)
    assert len(judge.readings) == MIN_READINGS


def test_the_reference_is_the_median_of_the_latest_measurements_by_then_never_one_probe():
    """One bad probe (0.73 between two 1.0 readings) does not move the reference, and a
    measurement taken later never moves the reference of a figure measured before it."""
    measured = [(100.0, 1.0), (200.0, 0.73), (300.0, 1.0)]
    assert recent_reference(measured, 300.0) == 1.0 and recent_reference(measured, 1000.0) == 1.0
    assert recent_reference(measured, 250.0) == pytest.approx(0.865)  # the two by then, not the bad one alone
    assert recent_reference(measured, 150.0) == 1.0  # trial 0's alone: the later ones do not count
    assert recent_reference(measured) == 1.0  # the latest three (the live reference)
    assert recent_reference(measured, None) == recent_reference(list(reversed(measured)))
    # further on, the latest three by then: a lasting change moves it once two agree
    later = measured + [(400.0, 0.6), (500.0, 0.6)]
    assert recent_reference(later, 500.0) == 0.6 and recent_reference(later, 100.0) == 1.0
    assert recent_reference(later, 400.0) == 0.73  # 0.73, 1.0, 0.6
    assert recent_reference(later, 50.0) is None  # none by then: never the later ones
    assert recent_reference([(1.0, 5.0)]) == 5.0 and recent_reference([(1.0, 4.0), (2.0, 6.0)]) == 5.0
    assert recent_reference([]) is None


def test_a_lasting_change_moves_the_median_and_counts_as_drift():
    judge = SentinelJudge([0.007] * 5)
    assert not judge.drifted(0.007)
    for _ in range(12):
        judge.add(0.014)
    assert judge.disturbed(0.014) is None  # the window forgot the old speed
    assert judge.drifted(0.007)  # ... and the baseline measured at it must be measured again
    assert not judge.drifted(None)


def test_accuracy_noise_epsilon_and_within_noise():
    noise = MetricNoise([0, 1, 2], [0.96, 0.95, 0.97])
    assert noise.sd == pytest.approx(0.01) and noise.epsilon == pytest.approx(0.02)
    assert MetricNoise.from_dict(noise.to_dict()) == noise
    assert MetricNoise.from_dict({"seeds": [0]}) is None and MetricNoise.from_dict(None) is None
    assert within_noise(0.015, noise.epsilon) and not within_noise(0.03, noise.epsilon)
    assert not within_noise(0.0, 0.0)  # no estimate: nothing is "within noise"


def test_epsilon_dominance_on_the_metric():
    fast = (2.0, 1.0, 0.960)
    slow_but_luckier = (0.31, 1.0, 0.974)  # 1.4 points more accurate on one seed
    assert not dominates(fast, slow_but_luckier)
    assert dominates(fast, slow_but_luckier, epsilon=0.02)  # within the noise: no reason to keep it
    assert not dominates(slow_but_luckier, fast, epsilon=0.02)
    really_better = (0.31, 1.0, 0.99)
    assert not dominates(fast, really_better, epsilon=0.02)
    assert pareto_front([fast, slow_but_luckier], lambda p: p) == [fast, slow_but_luckier]
    assert pareto_front([fast, slow_but_luckier], lambda p: p, epsilon=0.02) == [fast]
    assert pareto_front([fast, really_better], lambda p: p, epsilon=0.02) == [fast, really_better]
    same = (1.0, 1.0, 0.95)
    assert pareto_front([same, (1.0, 1.0, 0.951)], lambda p: p, epsilon=0.02) == [same, (1.0, 1.0, 0.951)]


def test_the_sentinels_two_readings_decide_only_where_no_timed_block_was_scored():
    """On a quiet 2-core machine 6 of 40 probes read their sentinel 1.30-1.43x apart, every
    one slower before the timed steps (a fresh process warming up) and no slower in its
    throughput; confirmation ran each again. Where the blocks were scored they decide."""
    from advisor.core.noise import moved_unscored

    sentinel = {"before_s": 0.0112, "after_s": 0.0077}
    scored = {"sentinel": sentinel, "interference": {"blocks": 3, "clean": 3, "scores": [0.01, 0.02, None]}}
    assert moved_unscored(scored) is None
    said = moved_unscored({"sentinel": sentinel})
    assert said is not None and "11.2 ms before its timed steps and 7.7 ms after (1.5x apart" in said
    unscored = {"sentinel": sentinel, "interference": {"blocks": 3, "clean": 3, "scores": [None, None, None]}}
    assert moved_unscored(unscored) == said  # counters that could not be read score nothing
    assert moved_unscored({"sentinel": {"before_s": 0.0080, "after_s": 0.0077}}) is None  # within 1.30x

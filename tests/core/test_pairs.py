"""Paired confirmation's arithmetic on synthetic numbers: pair order, the interval, when
pairing stops, dominance beyond the interval, and the stored form."""

from __future__ import annotations

import math
import statistics

import pytest

from advisor.core.pairs import MIN_PAIRS, Confirmation, Interval, Pair, beaten, interval, t975
from advisor.study.pairing import interpolate


def pair(ratio: float, memory_ratio: float = 1.0, position: float = 0.5) -> Pair:
    return Pair(position, 1000.0, 1000.0 * ratio, 100.0, 100.0 * memory_ratio)


def test_the_baseline_is_interpolated_between_its_two_runs():
    assert interpolate(1000.0, 4000.0, 0.0) == pytest.approx(1000.0)
    assert interpolate(1000.0, 4000.0, 1.0) == pytest.approx(4000.0)
    assert interpolate(1000.0, 4000.0, 0.5) == pytest.approx(2000.0)  # geometric: a drift by a factor cancels
    assert interpolate(None, 4000.0, 0.5) == 4000.0 and interpolate(0.0, 0.0, 0.5) == 0.0


def test_interval_is_a_t_interval_on_log_ratios():
    ratios = [1.50, 1.55, 1.45, 1.52, 1.48]
    logs = [math.log(r) for r in ratios]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = t975(4) * sd / math.sqrt(5)
    got = interval(ratios)
    assert got.n == 5
    assert got.center == pytest.approx(math.exp(mean))
    assert got.low == pytest.approx(math.exp(mean - half)) and got.high == pytest.approx(math.exp(mean + half))
    assert got.low < statistics.median(ratios) < got.high
    assert got.halfwidth == pytest.approx((got.high - got.low) / (2 * got.center))


def test_interval_edge_cases():
    assert interval([]) is None
    one = interval([1.3])
    assert one.n == 1 and one.high == math.inf and one.halfwidth == math.inf
    assert "unbounded" in one.text()
    same = interval([2.0, 2.0, 2.0])
    assert same.low == same.high == pytest.approx(2.0) and same.halfwidth == pytest.approx(0.0)
    assert same.text() == "2.00x (2.00-2.00), 3 pairs"
    assert t975(1) == pytest.approx(12.706) and t975(100) == pytest.approx(1.984, abs=0.002)
    with pytest.raises(ValueError):
        t975(0)


def test_more_pairs_narrow_the_interval():
    noisy = [1.4, 1.6, 1.5, 1.45, 1.55, 1.5, 1.42, 1.58]
    widths = [interval(noisy[:n]).halfwidth for n in range(2, 9)]
    assert widths[0] > widths[-1]


def test_settle_confirms_within_target_after_min_pairs():
    c = Confirmation(1, [pair(1.5), pair(1.5)])
    c.settle(target=0.03, max_pairs=8)
    assert c.status == "running"  # tight, but fewer than MIN_PAIRS
    c.pairs.append(pair(1.5))
    assert len(c.pairs) == MIN_PAIRS
    c.settle(target=0.03, max_pairs=8)
    assert c.status == "confirmed"


def test_settle_caps_a_noisy_configuration_and_a_raised_cap_reopens_it():
    c = Confirmation(1, [pair(r) for r in (1.2, 1.8, 1.3, 1.7)])
    c.settle(target=0.03, max_pairs=4)
    assert c.status == "capped" and c.done
    c.settle(target=0.03, max_pairs=8)  # advisor confirm --pairs 8: more pairs due
    assert c.status == "running"
    c.status = "dominated"
    c.settle(target=0.03, max_pairs=12)
    assert c.status == "dominated"  # a decided stop stands


def test_memory_interval_counts_too():
    c = Confirmation(1, [pair(1.5, m) for m in (0.8, 1.2, 0.9)])
    c.settle(target=0.03, max_pairs=8)
    assert c.throughput.halfwidth == 0 and c.memory.halfwidth > 0.03
    assert c.status == "running"


def test_beaten_only_beyond_both_intervals():
    slow_big = Confirmation(1, [pair(r, m) for r, m in ((0.5, 1.5), (0.55, 1.45), (0.52, 1.5))])
    fast_small = Confirmation(2, [pair(r, m) for r, m in ((1.5, 0.8), (1.55, 0.82), (1.52, 0.8))])
    assert beaten(slow_big, None, accuracy_worse=True)  # the baseline (1.0, 1.0) beats it
    assert beaten(slow_big, fast_small, accuracy_worse=True)
    assert not beaten(slow_big, fast_small, accuracy_worse=False)  # more accurate beyond noise: kept
    assert not beaten(fast_small, slow_big, accuracy_worse=True)
    assert not beaten(Confirmation(3, [pair(0.5, 1.5)]), None, accuracy_worse=True)  # one pair proves nothing
    overlapping = Confirmation(4, [pair(r, 1.5) for r in (0.7, 1.3, 0.9)])
    assert not beaten(overlapping, None, accuracy_worse=True)


def test_confirmation_round_trips_through_its_stored_form():
    c = Confirmation(7, [pair(1.5, 0.9), pair(1.52, 0.9, position=0.25), pair(1.48, 0.91)], "confirmed", "")
    data = c.to_dict()
    assert data["throughput_ratio"]["n"] == 3 and data["pairs"][1]["position"] == 0.25
    back = Confirmation.from_dict(data)
    assert back.trial == 7 and back.status == "confirmed" and len(back.pairs) == 3
    assert back.throughput == c.throughput and back.memory == c.memory
    assert Interval.from_dict(Interval(1.0, 0.0, math.inf, 1).to_dict()).high == math.inf
    assert Confirmation.from_dict({"trial": 1, "status": "bogus"}).status == "running"

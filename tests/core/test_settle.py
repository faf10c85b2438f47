"""advisor/core/settle.py: when a timing has settled, tested on simulated blocks whose true
median is known (no machine noise)."""

from __future__ import annotations

import math
import random

import pytest

from advisor.core.settle import (
    MIN_BLOCKS,
    TOLERANCE,
    TOLERANCE_RANGE,
    TRUSTED_RUNS,
    Settled,
    median_interval,
    order_rank,
    settle,
    settled,
    tolerance_from,
    warmup_blocks,
)


def _blocks(rng: random.Random, n: int, median: float = 0.01, sd: float = 0.03) -> list[float]:
    """``n`` block times, log-normal around ``median`` (their true median)."""
    return [median * math.exp(rng.gauss(0.0, sd)) for _ in range(n)]


# ---- the median's interval ----------------------------------------------------------------

def test_order_rank_gives_the_smallest_interval_that_reaches_the_level():
    # j = 1 (the range) until two values may be left out on each side: P(B <= 1) <= 2.5%
    assert [order_rank(m) for m in (1, 5, 6, 8, 9, 12, 20)] == [0, 0, 1, 1, 2, 3, 6]
    for m in range(6, 60):
        j = order_rank(m)
        below = sum(math.comb(m, k) for k in range(j)) / 2 ** m  # P(B < j): the interval misses low
        assert below <= 0.025 < below + math.comb(m, j) / 2 ** m


def test_median_interval():
    assert median_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)  # too few for 95%: the range
    median, low, high = median_interval([float(i) for i in range(1, 21)])
    assert (median, low, high) == (10.5, 6.0, 15.0)
    with pytest.raises(ValueError):
        median_interval([])


def test_the_interval_covers_the_true_median_at_its_level_whatever_the_spread():
    rng = random.Random(1)
    for m in (6, 10, 25):
        for sd in (0.01, 0.2):
            covered = 0
            for _ in range(2000):
                _, low, high = median_interval(_blocks(rng, m, sd=sd))
                covered += low <= 0.01 <= high
            assert covered / 2000 >= 0.94, (m, sd)


# ---- the warm-up --------------------------------------------------------------------------

def test_a_transient_is_cut_however_long_it_lasts():
    rng = random.Random(2)
    for length in (1, 3, 8):
        cuts, errors = [], []
        for _ in range(200):
            warm = [0.01 * (1 + 2.0 * 0.5 ** i) * math.exp(rng.gauss(0, 0.02)) for i in range(length)]
            times = warm + _blocks(rng, 30, sd=0.02)
            cuts.append(warmup_blocks(times))
            errors.append(abs(math.log(settle(times).median / 0.01)))
        assert sorted(cuts)[len(cuts) // 2] >= length - 1  # the slow part goes (its last block is near steady)
        assert max(errors) < 0.03  # the figure is the steady state's


def test_a_steady_timing_loses_few_blocks_to_the_cut():
    rng = random.Random(3)
    cuts = [warmup_blocks(_blocks(rng, 30)) for _ in range(500)]
    assert sum(cuts) / len(cuts) < 3
    assert warmup_blocks([1.0] * 20) == 0
    assert warmup_blocks([2.0, 1.0, 1.0]) == 0  # too few blocks to judge
    assert max(warmup_blocks(_blocks(rng, 4) + [0.05] * 16) for _ in range(20)) == 0  # faster first: no warm-up
    assert max(warmup_blocks([0.05] * 15 + _blocks(rng, 5)) for _ in range(20)) <= 10  # at most half


def test_block_times_must_be_positive():
    with pytest.raises(ValueError):
        warmup_blocks([0.01, 0.0, 0.01, 0.01])


# ---- when to stop -------------------------------------------------------------------------

def test_settled_needs_the_blocks_and_the_tolerance():
    assert not settled([0.01] * (MIN_BLOCKS - 1))
    assert settled([0.01] * MIN_BLOCKS)
    wide = [0.0095, 0.01, 0.0112, 0.009, 0.0108, 0.01, 0.0098]
    assert warmup_blocks(wide) == 0
    assert not settled(wide, tolerance=0.1) and settled(wide, tolerance=0.11)  # the range 0.009..0.0112: +-10.9%
    s = settle(wide)
    assert isinstance(s, Settled) and s.blocks + s.warmup == len(wide)
    assert s.halfwidth == pytest.approx(math.log(s.high / s.low) / 2)
    assert Settled(0, 1, 0.01, 0.01, 0.01).halfwidth == math.inf


@pytest.mark.parametrize("sd", [0.01, 0.05, 0.1, 0.2])
def test_stopping_when_settled_lands_within_the_tolerance(sd):
    """The sequential rule as the timer runs it: a block at a time, stop once settled (or
    at a cap of 200 blocks). A settled figure is within the tolerance of the truth in at
    least 90% of runs (looking after every block costs some of the 95%: that is its
    price), and it stops sooner the quieter the timing."""
    rng = random.Random(4)
    tolerance, within, stopped, used = 0.03, 0, 0, []
    for _ in range(400):
        times: list[float] = []
        while len(times) < 200:
            times.append(0.01 * math.exp(rng.gauss(0.0, sd)))
            if settled(times, tolerance):
                stopped += 1
                within += abs(math.log(settle(times).median / 0.01)) <= tolerance
                break
        used.append(len(times))
    median_used = sorted(used)[200]
    if sd <= 0.1:
        assert stopped >= 300 and within / stopped >= 0.90
    if sd == 0.01:
        assert median_used <= 8  # quiet: about the minimum
    if sd == 0.2:
        assert median_used == 200  # noisy: it times on to the cap rather than stop on a lucky run


# ---- the study's tolerance ----------------------------------------------------------------

def test_the_tolerance_follows_the_study_noise_within_its_range():
    assert tolerance_from([100.0, 101.0]) is None  # too few runs
    rng = random.Random(5)
    runs = [1000 * math.exp(rng.gauss(0, 0.05)) for _ in range(200)]
    assert tolerance_from(runs) == pytest.approx(0.05, rel=0.15)
    assert tolerance_from([100.0] * TRUSTED_RUNS) == TOLERANCE_RANGE[0]  # never finer than the floor
    assert tolerance_from([100.0, 200.0, 50.0]) == TOLERANCE_RANGE[1]  # never coarser than the ceiling
    assert tolerance_from([100.0, 0.0, None, 101.0]) is None  # failed runs do not count
    # a spread from a few runs may loosen the default, never tighten it: three runs that agree
    # within 1% are as often luck as a quiet machine
    assert tolerance_from([100.0, 100.5, 101.0]) == TOLERANCE
    assert tolerance_from([100.0, 110.0, 90.0]) == pytest.approx(0.1, abs=0.01)
    assert tolerance_from([100.0, 100.5, 101.0, 100.2, 99.8, 100.4]) == TOLERANCE_RANGE[0]  # six: trusted (sd 0.4%)

"""When a timing has settled, as plain arithmetic on the timed blocks' step times.

A trial times its steps in blocks (``advisor.machine.timing``); this module decides, from
the block times alone, which leading blocks were still warming up and whether the median
of the rest is known well enough to stop.

**Warm-up** (``warmup_blocks``): the Marginal Standard Error Rule (MSER, White 1997) on
the blocks' log times: the number ``d`` of leading blocks whose removal minimises the
squared standard error of the mean of the rest, ``var(rest) / len(rest)``, searched over at
most ``MOST_WARMUP`` of the blocks, and only over cuts that are slower on average than
what follows them (a later slowdown is no warm-up: it stays in the figure). A compiled
model's recompiles, a cold cache, lazy allocations and autotuning make the first blocks
slower; those are cut, however long they last, instead of a fixed warm-up being waited out.
A timing with no transient loses few blocks (MSER's cut of a stationary series is small).

**Settled** (``median_interval``, ``settled``): the median of the blocks after the
warm-up, with its distribution-free interval: the order statistics ``x(j)``, ``x(m+1-j)``
of ``m`` blocks, ``j`` the largest with ``P(Binomial(m, 1/2) < j) <= (1 - level) / 2``
(so the interval covers the true median with probability at least ``level`` for any
distribution of independent blocks; for 6 blocks it is their range). The timing has
settled once at least ``min_blocks`` blocks follow the warm-up and the interval's half
width, on a log scale, is within ``tolerance`` of the median: the figure is then known
to about +-``tolerance``. A study sets its tolerance from its own run-to-run noise
(``tolerance_from``; from fewer than ``TRUSTED_RUNS`` runs it only loosens the default):
a run cannot be known better than the next run of the same configuration will disagree
with it, so timing on past that point buys nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95  # the median's interval covers the true median with at least this probability
MOST_WARMUP = 0.5  # at most this share of the blocks is cut as warm-up
TOLERANCE = 0.05  # the default: the median known to about +-5%
TOLERANCE_RANGE = (0.01, 0.10)  # the range a study's own noise may set it in
MIN_BLOCKS = 6  # blocks after the warm-up before any verdict (their range: a 97% interval)
TRUSTED_RUNS = 6  # runs whose spread may also tighten the tolerance below the default


@dataclass(frozen=True)
class Settled:
    """What the blocks say: ``warmup`` leading blocks cut, the median of the rest and its
    interval ``(low, high)``, and ``halfwidth``, the interval's half width on a log scale
    (0.03: the median is known to about +-3%; inf with fewer than 2 blocks)."""

    warmup: int
    blocks: int
    median: float
    low: float
    high: float

    @property
    def halfwidth(self) -> float:
        return halfwidth(self.low, self.high, self.blocks)


def halfwidth(low: float, high: float, blocks: int) -> float:
    """An interval's half width on a log scale (0.03: about +-3%); inf from fewer than 2
    blocks (one block's "interval" is a point, not a precision)."""
    if blocks < 2 or low <= 0 or high <= 0:
        return math.inf
    return (math.log(high) - math.log(low)) / 2


def warmup_blocks(times: Sequence[float], most: float = MOST_WARMUP) -> int:
    """How many leading blocks of ``times`` (seconds per step, in timed order) were warming
    up: MSER on their logs, the cut searched over at most ``most`` of them."""
    n = len(times)
    if n < 4:
        return 0
    logs = [math.log(t) for t in times if t > 0]
    if len(logs) != n:
        raise ValueError("block times must be positive")
    # suffix sums, so that each cut's mean and variance cost O(1)
    s1, s2 = [0.0] * (n + 1), [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        s1[i], s2[i] = s1[i + 1] + logs[i], s2[i + 1] + logs[i] ** 2
    best, cut = math.inf, 0
    for d in range(int(n * most) + 1):
        m = n - d
        if m < 2:
            break
        if d and (s1[0] - s1[d]) / d <= s1[d] / m:  # a warm-up is slower than what follows it
            continue
        var = max(0.0, s2[d] / m - (s1[d] / m) ** 2)
        if var / m < best - 1e-15:  # the earliest cut wins a tie
            best, cut = var / m, d
    return cut


def order_rank(m: int, level: float = LEVEL) -> int:
    """``j``: the median's interval of ``m`` sorted values is their ``j``-th and
    ``(m + 1 - j)``-th (1-based); 0 when no interval of ``m`` values reaches ``level``."""
    alpha, below, j = (1 - level) / 2, 0.0, 0
    for k in range(m // 2 + 1):  # P(B <= k) for B ~ Binomial(m, 1/2)
        below += math.comb(m, k) / 2 ** m
        if below > alpha:
            break
        j = k + 1
    return j


def median_interval(times: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """The median of ``times`` and its distribution-free interval at ``level`` (the range
    when too few values reach it)."""
    if not times:
        raise ValueError("no block times")
    ordered = sorted(times)
    m = len(ordered)
    median = (ordered[(m - 1) // 2] + ordered[m // 2]) / 2
    j = max(1, order_rank(m, level))
    return median, ordered[j - 1], ordered[m - j]


def settle(times: Sequence[float], level: float = LEVEL) -> Settled:
    """The warm-up cut from ``times`` and the median of the rest, with its interval."""
    d = warmup_blocks(times)
    rest = list(times[d:])
    median, low, high = median_interval(rest, level)
    return Settled(d, len(rest), median, low, high)


def settled(times: Sequence[float], tolerance: float = TOLERANCE, min_blocks: int = MIN_BLOCKS) -> bool:
    """Whether the median of ``times`` after their warm-up is known to within ``tolerance``."""
    if len(times) < min_blocks:
        return False
    s = settle(times)
    return s.blocks >= min_blocks and s.halfwidth <= tolerance


def tolerance_from(figures: Sequence[float]) -> float | None:
    """The tolerance a study sets from its own noise: ``figures``, its repeated
    measurements of one configuration (the baseline's throughput, measured again), give the
    run-to-run standard deviation ``s`` of their logs; a timing known to within ``s`` (its
    95% half width, about two standard errors) adds about a quarter of ``s``'s variance to
    the next comparison. Clamped to ``TOLERANCE_RANGE``; None while fewer than 3 are known.
    From fewer than ``TRUSTED_RUNS`` runs it only loosens the default ``TOLERANCE``, never
    tightens it: a standard deviation from 3 runs is under 80% of the true one nearly half
    the time, and under a fifth of it one time in 25 (chi-square on 2 degrees of freedom)."""
    logs = [math.log(f) for f in figures if f and f > 0]
    if len(logs) < 3:
        return None
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    low, high = TOLERANCE_RANGE
    if len(logs) < TRUSTED_RUNS:
        low = TOLERANCE
    return min(high, max(low, sd))

"""Paired confirmation's arithmetic: a pair's ratios, the interval of the ratio, and when
to stop pairing. Plain numbers; nothing here runs a trial (``advisor.study.pairing`` does).

A *pair* is one run of the configuration against the baseline measured around it: the
baseline runs just before and just after (``advisor.study.pairing``: rounds A C... A), and
the pair compares the configuration with the baseline interpolated at its moment, so a
machine that drifts slowly cancels out, as in ABBA order. Each pair gives a throughput
ratio and a memory ratio (configuration / baseline).

The interval: a ratio of two timings is close to log-normal, so the pairs' log ratios are
treated as normal. The ratio's median is then exp(mean of the log ratios) (the geometric
mean of the pair ratios) and its 95% interval exp(mean +- t * sd / sqrt(n)) with Student's
t on n - 1 degrees of freedom. It needs at least two pairs; with one it is unbounded.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom 1..30.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)

DEFAULT_TARGET = 0.03  # stop once the interval is within +-3% of the ratio
DEFAULT_MAX_PAIRS = 8
DEFAULT_TOP = 6  # configurations confirmed at the end of a study
MIN_PAIRS = 3  # never stop on fewer pairs (t with 1 degree of freedom is 12.7)
LEVEL = 0.95


def t975(df: int) -> float:
    """Student's t 0.975 quantile for ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError("t needs at least one degree of freedom")
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df  # within 0.002 beyond 30


@dataclass(frozen=True)
class Interval:
    """The ratio's median (``center``) and its 95% interval, from ``n`` pairs."""

    center: float
    low: float
    high: float
    n: int

    @property
    def halfwidth(self) -> float:
        """Half the interval's width relative to its center (0.03: +-3%); inf if unbounded."""
        return (self.high - self.low) / (2 * self.center) if math.isfinite(self.high) else math.inf

    def text(self) -> str:
        """'1.52x (1.46-1.58), 8 pairs'."""
        span = f"{self.low:.2f}-{self.high:.2f}" if math.isfinite(self.high) else "unbounded"
        return f"{self.center:.2f}x ({span}), {self.n} pair{'s' if self.n != 1 else ''}"

    def to_dict(self) -> dict[str, Any]:
        return {"center": self.center, "low": self.low, "high": self.high, "n": self.n,
                "halfwidth": self.halfwidth if math.isfinite(self.halfwidth) else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Interval:
        high = data["high"]
        return cls(float(data["center"]), float(data["low"]), math.inf if high is None else float(high), int(data["n"]))


def interval(ratios: list[float]) -> Interval | None:
    """The 95% interval of the ratio's median from pair ratios (None without any pair).

    Example:
        >>> interval([1.5, 1.5, 1.5]).text()
        '1.50x (1.50-1.50), 3 pairs'
    """
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    n = len(logs)
    if n == 0:
        return None
    mean = sum(logs) / n
    if n == 1:
        return Interval(math.exp(mean), 0.0, math.inf, 1)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)


@dataclass(frozen=True)
class Pair:
    """One pair: the configuration's figures and the baseline's at its moment.

    ``position``: where the configuration ran between the round's two baseline runs
    (0: right after the first, 1: right before the second); the baseline figures are
    interpolated there. ``sentinel``: the readings of the three runs, seconds.
    """

    position: float
    baseline_throughput: float
    config_throughput: float
    baseline_memory: float
    config_memory: float
    sentinel: list[float] = field(default_factory=list)

    @property
    def throughput_ratio(self) -> float:
        return self.config_throughput / self.baseline_throughput

    @property
    def memory_ratio(self) -> float:
        return self.config_memory / self.baseline_memory if self.baseline_memory else 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"throughput_ratio": self.throughput_ratio, "memory_ratio": self.memory_ratio}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pair:
        return cls(float(data["position"]), float(data["baseline_throughput"]), float(data["config_throughput"]),
                   float(data["baseline_memory"]), float(data["config_memory"]), list(data.get("sentinel") or []))


STATUSES = ("running", "confirmed", "capped", "dominated", "failed")


@dataclass
class Confirmation:
    """A configuration's pairs against the baseline and what they show.

    ``status``: ``running`` (more pairs due), ``confirmed`` (both intervals within the
    target), ``capped`` (the pair cap was reached first: the interval is wider than the
    target), ``dominated`` (stopped early: its interval shows a configuration it cannot
    beat), ``failed`` (a run of the configuration failed; ``note`` says how).
    """

    trial: int
    pairs: list[Pair] = field(default_factory=list)
    status: str = "running"
    note: str = ""

    @property
    def throughput(self) -> Interval | None:
        return interval([p.throughput_ratio for p in self.pairs])

    @property
    def memory(self) -> Interval | None:
        return interval([p.memory_ratio for p in self.pairs])

    @property
    def done(self) -> bool:
        return self.status != "running"

    def settle(self, target: float, max_pairs: int) -> None:
        """Stop pairing once both intervals are within ``target`` (after ``MIN_PAIRS``) or
        the cap is reached; a stop decided earlier (dominated, failed) stands."""
        if self.status not in ("running", "confirmed", "capped"):
            return
        thr, mem = self.throughput, self.memory
        n = len(self.pairs)
        if thr is not None and mem is not None and n >= MIN_PAIRS and max(thr.halfwidth, mem.halfwidth) <= target:
            self.status = "confirmed"
        elif n >= max_pairs:
            self.status = "capped"
        else:
            self.status = "running"

    def to_dict(self) -> dict[str, Any]:
        thr, mem = self.throughput, self.memory
        return {"trial": self.trial, "status": self.status, "note": self.note,
                "pairs": [p.to_dict() for p in self.pairs],
                "throughput_ratio": thr.to_dict() if thr else None, "memory_ratio": mem.to_dict() if mem else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confirmation:
        status = data.get("status", "running")
        return cls(int(data["trial"]), [Pair.from_dict(p) for p in data.get("pairs") or []],
                   status if status in STATUSES else "running", str(data.get("note") or ""))


def beaten(mine: Confirmation, other: Confirmation | None, accuracy_worse: bool) -> bool:
    """Whether ``mine`` is dominated beyond doubt: ``other`` (None: the baseline, ratio 1)
    is faster than the top of ``mine``'s throughput interval and smaller than the bottom
    of its memory interval, at an accuracy ``mine`` does not beat beyond noise
    (``accuracy_worse``: the caller's judgement)."""
    thr, mem = mine.throughput, mine.memory
    if thr is None or mem is None or thr.n < 2 or not accuracy_worse:
        return False
    if other is None:
        return thr.high < 1.0 and mem.low > 1.0
    o_thr, o_mem = other.throughput, other.memory
    if o_thr is None or o_mem is None or o_thr.n < 2:
        return False
    return thr.high < o_thr.low and mem.low > o_mem.high

"""The 95% interval of a ratio from paired log ratios, and when to stop pairing. Plain
numbers: ``advisor.core.pairs`` applies them to a configuration's pairs.

A ratio of two timings is close to log-normal, so each pair's log ratio is treated as
normal; the ratio's median is exp(mean log ratio) and an interval on the log scale maps
back by exp. The relative half-width of an interval (lo, hi) around c is
(hi - lo) / 2c = sinh(h) for a log half-width h, so a target of +-3% is h <= asinh(0.03).

**When to stop: Stein's two-stage procedure.** The old rule (at least 3 pairs, stop as soon
as the t interval on n - 1 degrees of freedom is within the target) stops exactly when
the sample spread happens to be small, and then the interval is too narrow: in
simulation it covers 0.90-0.91 at a per-pair spread of 5% (``benchmarks/coverage_sim.py``,
``tests/core/test_pairs_coverage.py``), and a minimum of 5 or 6 pairs does not mend it
(0.927 / 0.931 at a cap of 30, 8000 replicates). Stein's rule decouples the spread that
sizes the sample from the mean it reports:

1. a first stage of ``FIRST_STAGE`` (5) pairs gives the sd ``s0`` of the log ratios;
2. the sitting then needs n = max(n0, ceil((t(n0-1) * s0 / asinh(target))^2)) pairs in
   all (at most the pair cap, which the user sets before seeing any pair);
3. the interval is mean(all n) +- t(n0-1) * s0 / sqrt(n).

n depends on the data only through s0, and for normal data the mean is independent of
s0, so (mean - mu) / (s0 / sqrt(n)) has Student's t with n0 - 1 degrees of freedom
whatever n turned out: the coverage is exactly 95%, early stopping included, and the
half-width is within the target once n is reached. A configuration has two figures
(throughput and memory); its n is the larger of their needs, still a function of the
first stage's spreads alone, which for normal pairs are independent of the means. (A
candidate stopped early as *dominated* stopped on its mean: its interval is outside
this argument, and it leaves the front anyway.) The price is the interval's t on
n0 - 1 = 4 degrees of freedom (2.78 instead of 2.36 at 8 pairs). Five pairs: with fewer,
t grows fast (4.30 at 3 pairs) and so do the pairs needed; with more, the minimum cost of
every candidate grows. A sitting cut short before its first stage (a cap below 5) reports
the plain t interval on its n - 1 degrees of freedom: its n was fixed in advance.

**Several sittings: one-way random effects.** ``advisor confirm`` run hours later adds a
sitting; the machine's ratio can move between sittings by more than one sitting's
interval. The sittings' mean log ratios m_i are then taken as draws around the long-run
ratio mu with a between-sitting variance: the centre is the plain mean of the m_i, and
the interval mean +- max(t(k-1) * sd(m_i) / sqrt(k), t(N-k) * s_w * sqrt(sum 1/n_i) / k),
with k sittings, N pairs and s_w the pooled within-sitting sd. The first term is the
Hartung-Knapp / one-way ANOVA interval for balanced sittings (exact for equal n_i); the
second keeps it from ever being narrower than the sittings' own noise allows (when the
sitting means agree by chance). With two sittings the first term has one degree of
freedom (t = 12.7): two readings of a drifting machine say little about its long-run
ratio, and the interval says so; a third sitting narrows it (t = 4.3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from advisor.core.student import t975

FIRST_STAGE = 5  # Stein's first stage: the pairs whose spread sizes a sitting, never fewer before stopping


@dataclass(frozen=True)
class Interval:
    """The ratio's median (``center``) and its 95% interval, from ``n`` pairs measured in
    ``sittings`` separate sittings."""

    center: float
    low: float
    high: float
    n: int
    sittings: int = 1

    @property
    def halfwidth(self) -> float:
        """Half the interval's width relative to its center (0.03: +-3%); inf if unbounded."""
        return (self.high - self.low) / (2 * self.center) if math.isfinite(self.high) else math.inf

    def text(self) -> str:
        """'1.52x (1.46-1.58), 8 pairs' ('..., 12 pairs in 2 sittings')."""
        span = f"{ratio_end(self.low)}-{ratio_end(self.high)}" if math.isfinite(self.high) else "unbounded"
        where = f" in {self.sittings} sittings" if self.sittings > 1 else ""
        return f"{self.center:.2f}x ({span}), {self.n} pair{'s' if self.n != 1 else ''}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {"center": self.center, "low": self.low, "high": self.high, "n": self.n, "sittings": self.sittings,
                "halfwidth": self.halfwidth if math.isfinite(self.halfwidth) else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Interval:
        high = data["high"]
        return cls(float(data["center"]), float(data["low"]), math.inf if high is None else float(high),
                   int(data["n"]), int(data.get("sittings") or 1))


def ratio_end(ratio: float) -> str:
    """An interval's end as a ratio: '1.46', or '<0.01' / '>100' past what two places say."""
    return "<0.01" if ratio < 0.005 else ">100" if ratio > 100 else f"{ratio:.2f}"


def logs_of(ratios: Sequence[float]) -> list[float]:
    """The log of each usable ratio (positive and finite)."""
    return [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]


def sd(xs: Sequence[float]) -> float:
    """The sample standard deviation (n - 1), of at least two numbers."""
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def _mapped(mean: float, half: float, n: int, sittings: int = 1) -> Interval:
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, sittings)


def interval(ratios: Sequence[float]) -> Interval | None:
    """The plain t interval of the ratio's median, for a number of pairs fixed in advance
    (None without any pair; unbounded with one).

    Example:
        >>> interval([1.5, 1.5, 1.5]).text()
        '1.50x (1.50-1.50), 3 pairs'
    """
    logs = logs_of(ratios)
    n = len(logs)
    if n == 0:
        return None
    mean = sum(logs) / n
    if n == 1:
        return Interval(math.exp(mean), 0.0, math.inf, 1)
    return _mapped(mean, t975(n - 1) * sd(logs) / math.sqrt(n), n)


def stein_interval(ratios: Sequence[float], first: int = FIRST_STAGE) -> Interval | None:
    """The interval of one sitting under Stein's rule: the mean of all its pairs, the
    spread of its first ``first`` pairs (in the order measured) on ``first`` - 1 degrees
    of freedom; the plain t interval while the sitting has fewer pairs."""
    logs = logs_of(ratios)
    if len(logs) < first:
        return interval(ratios)
    n, mean = len(logs), sum(logs) / len(logs)
    return _mapped(mean, t975(first - 1) * sd(logs[:first]) / math.sqrt(n), n)


def pairs_needed(ratios: Sequence[float], target: float, first: int = FIRST_STAGE) -> int | None:
    """The pairs one sitting needs under Stein's rule for a relative half-width within
    ``target`` (0.03: +-3%); None before the first stage is complete."""
    logs = logs_of(ratios)
    if len(logs) < first:
        return None
    half = math.asinh(target)
    return max(first, math.ceil((t975(first - 1) * sd(logs[:first]) / half) ** 2 - 1e-9))


def pooled_interval(sittings: Sequence[Sequence[float]], first: int = FIRST_STAGE) -> Interval | None:
    """The interval of the long-run ratio from several sittings' pair ratios (one-way
    random effects on the log ratios, see the module's docstring); one sitting's own
    (``stein_interval``) when there is only one with pairs."""
    groups = [g for g in (logs_of(s) for s in sittings) if g]
    if not groups:
        return None
    if len(groups) == 1:
        return stein_interval([math.exp(x) for x in groups[0]], first)
    k, n = len(groups), sum(len(g) for g in groups)
    means = [sum(g) / len(g) for g in groups]
    center = sum(means) / k
    between = t975(k - 1) * sd(means) / math.sqrt(k)
    within = 0.0
    if n > k:
        ss = sum((x - m) ** 2 for g, m in zip(groups, means) for x in g)
        s_w = math.sqrt(ss / (n - k))
        within = t975(n - k) * s_w * math.sqrt(sum(1 / len(g) for g in groups)) / k
    return _mapped(center, max(between, within), n, k)

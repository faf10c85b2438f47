"""Feasibility with the metric's noise: a one-sided non-inferiority test.

A configuration is feasible when its metric is at most the allowed drop worse than the
baseline's (``--max-metric-drop``). Both are measured with noise: the baseline trains with
several seeds (``advisor.study.confirmation.baseline_watch``: its seed values), and a configuration that
changes the arithmetic (bf16, another batch size) draws a fresh value with each seed. So
each configuration is judged against the baseline's **seed mean**, not against seed 0
alone, and the verdict says how sure it is:

- the difference ``d`` = mean(configuration's values) - mean(baseline's values), in the
  metric's score units (higher is better; ``advisor.core.metric``);
- its standard error from the pooled seed-to-seed standard deviation of both sets,
  ``s * sqrt(1/n_c + 1/n_b)``, with Student's t on their pooled degrees of freedom;
- **feasible** when the one-sided 95% lower bound of ``d`` is above ``-allowed`` (the test
  of non-inferiority with the allowed drop as its margin rejects "worse by more than the
  allowed drop" at the 5% level);
- **infeasible** when the one-sided 95% upper bound of ``d`` is below ``-allowed`` (the
  mirror test: it is worse by more than the allowed drop, at the 5% level; a configuration
  whose true drop is within the allowed one is called infeasible at most 5% of the time);
- **undecided** otherwise: the noise cannot tell. Its point estimate still places it
  (``likely``: within the allowed drop or not), and more seeds may decide it.

Without a noise estimate (one seed on each side) there is no interval: the point
estimate decides, and the verdict says the noise is unknown. A configuration that keeps
the baseline's arithmetic exactly (its metric reused from the baseline, or its whole
training run the baseline's) is the baseline: ``d`` = 0 at every seed, with no noise to
weigh, and it is feasible (``same_numerics_verdict``). Plain numbers; nothing here imports a heavy library.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from advisor.core.student import t95, t_quantile

FEASIBLE, INFEASIBLE, UNDECIDED = "feasible", "infeasible", "undecided"
LEVEL = 0.95  # one-sided



def single_value_floor(baseline: Sequence[float], allowed: float, alpha: float = 1 - LEVEL) -> float | None:
    """The value below which one configuration's single value is called infeasible against
    these baseline values at level ``alpha`` (``verdict`` with one seed: its upper bound
    below ``-allowed``); None without a noise estimate (fewer than two baseline values, or
    no spread)."""
    sd, df = pooled_sd(baseline)
    if df == 0 or sd == 0.0:
        return None
    half = t_quantile(1 - alpha, df) * sd * math.sqrt(1 + 1 / len(baseline))
    return statistics.fmean(baseline) - allowed - half


@dataclass(frozen=True)
class Verdict:
    """A configuration's metric against the baseline's, with the noise.

    ``difference``: mean(configuration) - mean(baseline), score units; ``low`` / ``high``:
    its one-sided 95% bounds (equal to it without a noise estimate); ``allowed``: the
    allowed drop; ``seeds``: the configuration's seed count, ``baseline_seeds`` the
    baseline's."""

    kind: str
    difference: float
    low: float
    high: float
    allowed: float
    seeds: int
    baseline_seeds: int
    same_numerics: bool = False  # the baseline's own numerics: the same value at every seed

    @property
    def noise_known(self) -> bool:
        return self.low != self.high or self.same_numerics

    @property
    def decided(self) -> bool:
        return self.kind != UNDECIDED

    def text(self, fmt: Callable[[float], str] = lambda x: f"{x:+.4g}", higher_is_better: bool = True) -> str:
        """'undecided: -1.4 pt, 95% bounds -4.1 pt to +1.3 pt straddle -1.0 pt; ...', with
        ``fmt`` writing a difference of scores in the metric's terms (``MetricSpec.delta_text``);
        for a metric where lower is better the bounds are the metric's own, in its order
        ('feasible: -0.2 mse, its 95% upper bound +0.05 mse below +0.1 mse')."""
        d, edge = fmt(self.difference), fmt(-self.allowed)
        if self.same_numerics:
            return f"{self.kind}: trained with the baseline's numerics, so {d} at every seed"
        if not self.noise_known:
            return f"{self.kind}: {fmt(self.difference)} against {edge} allowed; the metric's noise is not known"
        # the score's lower bound is the metric's lower bound where higher is better, its upper one where not
        low, high, above, below = (("lower", "upper", "above", "below") if higher_is_better
                                   else ("upper", "lower", "below", "above"))
        if self.kind in (FEASIBLE, INFEASIBLE):  # a bound that rounds to the edge is "just" past it
            which, bound, side = (low, self.low, above) if self.kind == FEASIBLE else (high, self.high, below)
            shown = fmt(bound)
            return (f"{self.kind}: {d}, its 95% {which} bound " +
                    (f"just {side} {edge}" if shown == edge else f"{shown} {side} {edge}"))
        first, last = (self.low, self.high) if higher_is_better else (self.high, self.low)
        return (f"{UNDECIDED}: {d}, its 95% bounds {fmt(first)} to {fmt(last)} straddle {edge}: within "
                f"the noise with {self.seeds} seed(s) against the baseline's {self.baseline_seeds}")


def same_numerics_verdict(seeds: int, allowed: float) -> Verdict:
    """The verdict on a configuration that trains with the baseline's numerics (the same
    value at every seed, the baseline's ``seeds`` of them): no difference, feasible."""
    return Verdict(FEASIBLE, 0.0, 0.0, 0.0, allowed, seeds, seeds, same_numerics=True)


def pooled_sd(*samples: Sequence[float]) -> tuple[float, int]:
    """The pooled standard deviation of several samples and its degrees of freedom."""
    df = sum(len(s) - 1 for s in samples if len(s) > 1)
    if df == 0:
        return 0.0, 0
    ss = sum(sum((x - statistics.fmean(s)) ** 2 for x in s) for s in samples if len(s) > 1)
    return math.sqrt(ss / df), df


def verdict(values: Sequence[float], baseline: Sequence[float], allowed: float) -> Verdict:
    """The verdict on a configuration whose metric took ``values`` (one per seed) against
    the baseline's seed values, with ``allowed`` the allowed drop (score units, >= 0)."""
    if not values or not baseline:
        raise ValueError("a verdict needs at least one value on each side")
    d = statistics.fmean(values) - statistics.fmean(baseline)
    sd, df = pooled_sd(values, baseline)
    if df == 0 or sd == 0.0:
        kind = FEASIBLE if d >= -allowed else INFEASIBLE
        return Verdict(kind, d, d, d, allowed, len(values), len(baseline))
    half = t95(df) * sd * math.sqrt(1 / len(values) + 1 / len(baseline))
    low, high = d - half, d + half
    kind = FEASIBLE if low >= -allowed else INFEASIBLE if high < -allowed else UNDECIDED
    return Verdict(kind, d, low, high, allowed, len(values), len(baseline))



def resolution(baseline: Sequence[float], seeds: int = 1) -> float | None:
    """The half-width of the one-sided 95% bounds of a configuration trained with ``seeds``
    seeds against these baseline values: a difference must clear the allowed drop by this
    much to be decided. None without a noise estimate."""
    sd, df = pooled_sd(baseline)
    if df == 0 or sd == 0.0:
        return None
    return t95(df + seeds - 1) * sd * math.sqrt(1 / seeds + 1 / len(baseline))


def seeds_to_resolve(baseline: Sequence[float], allowed: float, most: int = 100) -> int | None:
    """How many seeds on each side would let a configuration with the baseline's true
    metric be called feasible on average (its bounds within ``allowed``), at this noise;
    None beyond ``most``, 1 without noise."""
    sd, _ = pooled_sd(baseline)
    if sd == 0.0:
        return 1
    for n in range(2, most + 1):
        if t95(2 * n - 2) * sd * math.sqrt(2 / n) <= allowed:
            return n
    return None

"""Feasibility with the metric's noise: a one-sided non-inferiority test.

A configuration is feasible when its metric is at most the allowed drop worse than the
baseline's (``--max-metric-drop``). Both are measured with noise: the baseline trains with
several seeds (``advisor.study.baseline_watch``: its seed values), and a configuration that
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
the baseline's arithmetic exactly (its metric reused from the baseline) is the baseline:
``d`` = 0 and it is feasible. Plain numbers; nothing here imports a heavy library.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

FEASIBLE, INFEASIBLE, UNDECIDED = "feasible", "infeasible", "undecided"
LEVEL = 0.95  # one-sided



def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-14:
            break
    return h


def _beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function."""
    tail = 0.5 * _beta_inc(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


@functools.lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (``p`` in (0.5, 1)), to 1e-9, by bisection on ``t_cdf``."""
    if not 0.5 < p < 1 or df <= 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0, found p={p}, df={df}")
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2
    while high - low > 1e-9 * max(1.0, high):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def t95(df: int) -> float:
    """Student's t 0.95 quantile for ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError("t needs at least one degree of freedom")
    return t_quantile(LEVEL, df)


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

    @property
    def noise_known(self) -> bool:
        return self.low != self.high

    @property
    def likely_feasible(self) -> bool:
        """The point estimate is within the allowed drop (where the front places it)."""
        return self.difference >= -self.allowed

    @property
    def decided(self) -> bool:
        return self.kind != UNDECIDED

    def text(self, fmt: Callable[[float], str] = lambda x: f"{x:+.4g}") -> str:
        """'undecided: -1.4 pt, 95% bounds -4.1 pt to +1.3 pt straddle -1.0 pt; ...', with
        ``fmt`` writing a difference in the metric's terms (``MetricSpec.delta_text``)."""
        d, edge = fmt(self.difference), fmt(-self.allowed)
        if not self.noise_known:
            return f"{self.kind}: {fmt(self.difference)} against {edge} allowed; the metric's noise is not known"
        if self.kind == FEASIBLE:
            return f"{FEASIBLE}: {d}, its 95% lower bound {fmt(self.low)} above {edge}"
        if self.kind == INFEASIBLE:
            return f"{INFEASIBLE}: {d}, its 95% upper bound {fmt(self.high)} below {edge}"
        return (f"{UNDECIDED}: {d}, its 95% bounds {fmt(self.low)} to {fmt(self.high)} straddle {edge}: within "
                f"the noise with {self.seeds} seed(s) against the baseline's {self.baseline_seeds}")


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

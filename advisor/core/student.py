"""Student's t distribution, exactly: its distribution function (through the regularized
incomplete beta function) and its quantiles, for the intervals and tests of
``advisor.core.intervals`` (paired confirmation) and ``advisor.core.feasibility`` (the
metric's verdict). Plain arithmetic; no heavy library (scipy is not a requirement)."""

from __future__ import annotations

import functools
import math


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
    """Student's t 0.95 quantile (one-sided 95%) for ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError("t needs at least one degree of freedom")
    return t_quantile(0.95, df)


def t975(df: int) -> float:
    """Student's t 0.975 quantile (two-sided 95%) for ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError("t needs at least one degree of freedom")
    return t_quantile(0.975, df)

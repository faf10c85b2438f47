"""The three objectives and every rule built on them, each written once: directions,
the constraints that make a trial feasible, ratios to the baseline, dominance, the Pareto
front and the hypervolume that scores a set of trials.

Objectives: throughput (samples/s, maximise), peak memory (bytes, minimise), the user's
metric (its score, maximise: ``advisor.core.metric``). Constraints: the metric may drop at
most ``max_metric_drop`` below the baseline's; peak memory stays under ``memory_cap`` when
one is given; an inference trial's p99 latency at its batch size stays under
``max_latency_ms`` when one is given (``advisor.core.latency``). Optuna stores a constraint
as a number that is <= 0 when satisfied.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from advisor.core.feasibility import Verdict
from advisor.core.intervals import ratio_end
from advisor.core.latency import CONSTRAINT as LATENCY_CONSTRAINT
from advisor.core.metric import DEFAULT_METRIC, MetricSpec
from advisor.core.noise import within_noise

OBJECTIVES = ("throughput", "peak_memory_bytes", "score")
DIRECTIONS = ("maximize", "minimize", "maximize")
METRIC = 2  # the index of the user's metric
METRIC_DROP = "accuracy_drop"  # the metric's constraint, as stored (its key from before issue 28)
T = TypeVar("T")


class Figures(NamedTuple):
    """A trial's three objective values, in ``OBJECTIVES`` order (Optuna's ``values``)."""

    throughput: float
    peak_memory_bytes: float
    score: float  # the metric's score (advisor.core.metric: higher is better)


@dataclass(frozen=True)
class Limits:
    """What makes a trial feasible: a metric at most ``max_metric_drop`` worse than the
    baseline's (a fraction of the baseline's magnitude when ``relative``: "1%"), and
    (optionally) a peak memory under ``memory_cap`` bytes and, for inference, a p99
    latency at the trial's batch size under ``max_latency_ms``. Metrics are scores here
    (``advisor.core.metric``: higher is better)."""

    max_metric_drop: float = 0.01
    memory_cap: float | None = None
    relative: bool = False
    max_latency_ms: float | None = None

    def allowed(self, reference: float) -> float:
        """The largest drop of the score below the baseline's that stays feasible."""
        return self.max_metric_drop * abs(reference) if self.relative else self.max_metric_drop

    def constraints(self, figures: Figures, reference: float, p99_ms: float | None = None) -> dict[str, float]:
        """Each constraint as Optuna stores it: <= 0 when satisfied. The latency's only
        with a limit and a measured p99 (``p99_ms``, milliseconds)."""
        out = {METRIC_DROP: (reference - figures.score) - self.allowed(reference)}
        if self.memory_cap is not None:
            out["memory_cap"] = figures.peak_memory_bytes - self.memory_cap
        if self.max_latency_ms is not None and p99_ms is not None:
            out[LATENCY_CONSTRAINT] = p99_ms - self.max_latency_ms
        return out

    def feasible(self, figures: Figures, reference: float, p99_ms: float | None = None) -> bool:
        return satisfied(self.constraints(figures, reference, p99_ms))


def satisfied(constraints: dict[str, float]) -> bool:
    """Whether stored constraint values all hold (a trial without any is feasible)."""
    return all(v <= 0 for v in constraints.values())


def ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference``, or None when either is missing or the reference is 0."""
    if value is None or not reference:
        return None
    return value / reference


@dataclass(frozen=True)
class Versus:
    """A trial against the baseline: throughput and memory as ratios, the metric as a
    difference.

    ``confirmed``: the ratios come from paired confirmation (``throughput_interval`` and
    ``memory_interval`` hold their 95% intervals, ``pairs`` their pair count); otherwise
    they are unconfirmed single-trial ratios (to the baseline as measured by then).
    ``epsilon``: the metric's seed-to-seed noise (0 when not estimated).
    """

    throughput_ratio: float | None
    memory_ratio: float | None
    metric_delta: float | None
    confirmed: bool = False
    throughput_interval: tuple[float, float] | None = None
    memory_interval: tuple[float, float] | None = None
    pairs: int = 0
    epsilon: float = 0.0
    baseline: bool = False  # the baseline against itself: 1.00x by definition, neither confirmed nor not
    verdict: Verdict | None = None  # the metric against the baseline's seeds (advisor.core.feasibility)
    left_out: int = 0  # confirmed: stored pairs with a disturbed run, left out of the figures
    all_disturbed: bool = False  # confirmed from pairs that every one had a disturbed run (none clean)

    @property
    def metric_within_noise(self) -> bool:
        """Whether the noise cannot tell the metric from the baseline's: its verdict's 95%
        bounds straddle 0 where the verdict weighed the noise (the seeds on both sides), else
        within epsilon (2 sd of one seed)."""
        if self.verdict is not None and self.verdict.noise_known:
            return self.verdict.low <= 0.0 <= self.verdict.high
        return within_noise(self.metric_delta, self.epsilon)

    def to_dict(self) -> dict[str, Any]:
        return {"throughput_ratio": self.throughput_ratio, "memory_ratio": self.memory_ratio,
                "metric_delta": self.metric_delta, "confirmed": self.confirmed,
                "throughput_interval": list(self.throughput_interval) if self.throughput_interval else None,
                "memory_interval": list(self.memory_interval) if self.memory_interval else None,
                "pairs": self.pairs, "pairs_left_out": self.left_out, "all_pairs_disturbed": self.all_disturbed,
                "metric_noise_epsilon": self.epsilon,
                "metric_within_noise": self.metric_within_noise,
                "metric_verdict": self.verdict.kind if self.verdict is not None else None,
                "metric_bounds": [self.verdict.low, self.verdict.high] if self.verdict is not None else None}

    def cells(self) -> tuple[str, str, str]:
        """Compact table cells: throughput ratio, memory ratio ('1.52x (1.46-1.58)' or
        '1.52x unconfirmed'), and the pair count ('8' or '-'); '1.00x', '1.00x', '' for the
        baseline itself."""
        if self.baseline:
            return "1.00x", "1.00x", ""
        thr = _ratio_text(self.throughput_ratio, self.throughput_interval, 0, self.confirmed, short=True)
        mem = _ratio_text(self.memory_ratio, self.memory_interval, 0, self.confirmed, short=True)
        marks = "*" if self.all_disturbed or self.left_out else ""  # the table's caption says what it means
        return thr, mem, f"{self.pairs}{marks}" if self.confirmed else "-"

    def throughput_text(self) -> str:
        """'1.52x (1.46-1.58), 8 pairs', or '1.52x unconfirmed' ('1.00x' for the baseline)."""
        if self.baseline:
            return "1.00x"
        return (_ratio_text(self.throughput_ratio, self.throughput_interval, self.pairs, self.confirmed)
                + self._pairs_said())

    def memory_text(self) -> str:
        if self.baseline:
            return "1.00x"
        return _ratio_text(self.memory_ratio, self.memory_interval, self.pairs, self.confirmed) + self._pairs_said()

    def _pairs_said(self) -> str:
        """What a count of confirmed pairs leaves unsaid: every one disturbed, or how many
        disturbed pairs were left out (a review read '8 pairs' of eight disturbed ones)."""
        if not self.confirmed:
            return ""
        if self.all_disturbed:
            return ", every one with a disturbed run"
        return f" ({self.left_out} disturbed left out)" if self.left_out else ""

    def metric_text(self, metric: MetricSpec = DEFAULT_METRIC) -> str:
        """'+0.3 pt', '-0.8 pt, undecided' (within the noise of the allowed drop: the
        verdict, ``advisor.core.feasibility``) or, without a verdict, '+0.3 pt, within
        noise' (in the metric's own terms: '-0.12 nats'); 'ref' for the baseline (the reference)."""
        if self.metric_delta is None:
            return "-"
        if self.baseline:  # the reference itself: its seeds' mean, against which the others are judged
            return "ref"
        if self.verdict is not None:
            return metric.delta_text(self.metric_delta) + (", undecided" if not self.verdict.decided else "")
        return metric.delta_text(self.metric_delta) + (", within noise" if self.metric_within_noise else "")

    def summary(self, metric: MetricSpec = DEFAULT_METRIC) -> str:
        """'throughput 1.52x (1.46-1.58), 8 pairs, memory 1.02x unconfirmed, accuracy -0.3 pt'
        (the metric by its name; '' when a figure is missing)."""
        if self.throughput_ratio is None or self.memory_ratio is None or self.metric_delta is None:
            return ""
        return (f"throughput {self.throughput_text()}, memory {self.memory_text()}, "
                f"{metric.name} {self.metric_text(metric)}")


def _ratio_text(value: float | None, span: tuple[float, float] | None, pairs: int, confirmed: bool,
                short: bool = False) -> str:
    if value is None:
        return "-"
    if not confirmed:
        return f"{value:.2f}x unconfirmed"
    inside = f"{ratio_end(span[0])}-{ratio_end(span[1])}" if span and math.isfinite(span[1]) else "unbounded"
    return f"{value:.2f}x ({inside})" + ("" if short else f", {pairs} pair{'s' if pairs != 1 else ''}")


def versus(figures: Figures | None, baseline: Figures | None) -> Versus:
    """``figures`` relative to the ``baseline``'s."""
    if figures is None or baseline is None:
        return Versus(None, None, None)
    return Versus(ratio(figures.throughput, baseline.throughput),
                  ratio(figures.peak_memory_bytes, baseline.peak_memory_bytes),
                  figures.score - baseline.score)


def dominates(a: Sequence[float], b: Sequence[float], epsilon: float = 0.0) -> bool:
    """``a`` is at least as good as ``b`` on every objective and better on one.

    ``epsilon``: the metric's noise. Metric values within it count as equal: ``a`` may be
    up to ``epsilon`` worse on the metric and still dominate, and being better on it makes
    ``a`` better only beyond it.
    """
    at_least, better = True, False
    for i, (x, y, direction) in enumerate(zip(a, b, DIRECTIONS)):
        if direction == "minimize":
            x, y = -x, -y
        slack = epsilon if i == METRIC else 0.0
        at_least = at_least and x >= y - slack
        better = better or x > y + slack
    return at_least and better


def pareto_front(items: Iterable[T], figures: Callable[[T], Sequence[float]], epsilon: float = 0.0) -> list[T]:
    """The items no other item dominates (``epsilon``: the metric's noise; equal figures
    both stay), in input order."""
    pool = list(items)
    return [a for a in pool if not any(dominates(figures(b), figures(a), epsilon) for b in pool if b is not a)]


# ---- hypervolume: three minimisation objectives scaled to [0, 1] ------------------------
REF = 1.1  # the reference point (REF, REF, REF)


def hypervolume(points: Iterable[tuple[float, float, float]]) -> float:
    """The volume dominated by ``points`` inside [0, REF]^3 (slices along the first axis).
    The default strategy ranks its combinations and the model's candidates by it
    (``UnitLoss``, ``best_addition``) and benchmarks/search_efficiency.py scores strategies
    with it.

    Example:
        >>> round(hypervolume([(0.0, 0.0, 0.0)]), 3)
        1.331
    """
    pts = sorted({p for p in points if all(v < REF for v in p)})
    total = 0.0
    for i, (x, _, _) in enumerate(pts):
        nxt = pts[i + 1][0] if i + 1 < len(pts) else REF
        if nxt > x:
            total += (nxt - x) * _hv2d([(p[1], p[2]) for p in pts[: i + 1]])
    return total


def _hv2d(points: list[tuple[float, float]]) -> float:
    area, best_y = 0.0, REF
    for x, y in sorted(points):
        if y < best_y:
            area += (REF - x) * (best_y - y)
            best_y = y
    return area


class UnitLoss:
    """Figures to the unit loss cube ``hypervolume`` measures: each objective scaled over
    ``points`` so that 0 is their best (throughput high, memory low, score high) and 1 their
    worst; with ``log``, throughput and memory on a log scale (ratios count alike anywhere)."""

    def __init__(self, points: Sequence[Sequence[float]], log: bool = False) -> None:
        self.log = log
        values = [self._values(p) for p in points]
        self.lo = [min(v[i] for v in values) for i in range(3)]
        self.hi = [max(v[i] for v in values) for i in range(3)]
        self.span = [(h - lo) or 1.0 for lo, h in zip(self.lo, self.hi)]

    def _values(self, f: Sequence[float]) -> tuple[float, float, float]:  # a Figures, or its plain tuple
        t, m, s = f
        return (math.log(t), math.log(m), s) if self.log else (t, m, s)

    def __call__(self, f: Sequence[float]) -> tuple[float, float, float]:
        t, m, s = self._values(f)
        return (self.hi[0] - t) / self.span[0], (m - self.lo[1]) / self.span[1], (self.hi[2] - s) / self.span[2]


def best_addition(current: Sequence[tuple[float, float, float]],
                  candidates: Sequence[tuple[float, float, float]]) -> tuple[float, int]:
    """The candidate (scaled by ``UnitLoss``) that adds the most hypervolume to ``current``:
    (that gain, its index); ties go to the later one."""
    before = hypervolume(current)
    return max((hypervolume([*current, c]) - before, i) for i, c in enumerate(candidates))

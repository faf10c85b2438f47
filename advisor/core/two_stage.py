"""Two-stage evaluation's rules, on plain numbers: when a probed configuration does not
need its training run, when it may reuse a metric already measured, and when a training
run stops early. ``advisor.study.run._training_queue`` applies them; the trial process
(``advisor.trial.training``) applies the gate.

1. **Dominated beyond noise.** A probe measured the configuration's throughput T and peak
   memory M. It needs no training run when a configuration already known to be feasible
   has a throughput at least T x (1 + mt) and a memory at most M / (1 + mm): better on
   both, each by more than the measurement noise (``ProbeMargins``). Whatever metric it
   had, it could not reach the feasible front on (throughput, memory).
2. **Same training numerics.** A configuration that differs from a trained one (its metric
   measured) only in knobs that may leave the arithmetic alone (``REUSE_KNOBS``) reuses that metric
   only when its probe's first ``FINGERPRINT_STEPS`` training steps agree with the other
   probe's: the losses, and the sum and sum of squares of every floating tensor of the
   model's state (weights and buffers, BatchNorm's running statistics included) within
   ``REUSE_TOLERANCE``, relative. Knobs that change numerics on some models (BatchNorm under
   DDP, recomputation updating running statistics twice) then fail the check on those
   models and pass it on others. A configuration that trained anyway (a knob outside
   ``REUSE_KNOBS``, say gradient accumulation on a model where it changes nothing) and
   whose whole run agrees with the baseline's within ``REUSE_TOLERANCE``
   (``run_difference``: the learning curve, the last loss, the final metric) trained with
   the baseline's numerics: its metric is the baseline's at every seed
   (``advisor.core.study_metric``), and the knobs it changed count as reusable for the
   rest of the study (``neutral_knobs``), the first steps' check still applying.
3. **The metric gate.** The baseline's training run records its learning curve (mean
   training loss since the previous point, and the metric on the validation set) at
   ``CURVE_FRACTIONS`` of the study's sample budget, as do its extra seeds. Another
   training run, at the same number of samples seen, stops early when its metric is behind
   beyond noise at two points in a row, or when its mean loss is not finite or above twice
   the baseline's loss at its first step, the untrained model's (diverged). "Behind beyond
   noise" is the final feasibility check's rule (``advisor.core.feasibility``), applied to
   the baseline's seeds' metrics at that point: the run's one value there is called
   infeasible against their mean, one-sided, at level 5% / the number of points
   (Bonferroni: over all points a run truly within the limit is stopped at most 5% of the
   time, before the two-in-a-row rule makes it rarer still). Without seeds only divergence
   stops a run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from advisor.core.feasibility import LEVEL, single_value_floor
from advisor.core.metric import DEFAULT_METRIC, MetricSpec

CURVE_FRACTIONS = (0.25, 0.5, 0.75)  # of the sample budget, where learning curves are recorded
NOISE_SDS = 2.0  # "beyond noise": this many standard deviations
DIVERGED_LOSS_FACTOR = 2.0  # a mean loss above this many times the untrained baseline's: diverged
FINGERPRINT_STEPS = 5  # training steps a probe's fingerprint covers
REUSE_TOLERANCE = 1e-4  # relative difference within which two fingerprints are the same numerics
# knobs that may leave a model's training arithmetic unchanged (whether they do is checked per model)
REUSE_KNOBS = frozenset({"threads", "num_workers", "pin_memory", "channels_last", "compile", "compile_mode",
                         "bucket_mb", "activation_checkpointing"})
DEFAULT_THROUGHPUT_MARGIN = 0.30  # until the baseline has been measured MIN_MEASUREMENTS times: single
# runs on a busy or shared machine vary 10-30% (measured on this 2-core CPU), and a wrong skip loses a
# configuration for good while a needless training run only costs time
DEFAULT_MEMORY_MARGIN = 0.10
MIN_MEASUREMENTS = 3


def curve_points(train_samples: int) -> list[int]:
    """The sample counts at which learning curves are recorded."""
    return sorted({max(1, round(f * train_samples)) for f in CURVE_FRACTIONS})


@dataclass(frozen=True)
class ProbeMargins:
    """How far apart two probes' throughputs (``throughput``) and memories (``memory``) must
    be, relative, to differ beyond noise."""

    throughput: float = DEFAULT_THROUGHPUT_MARGIN
    memory: float = DEFAULT_MEMORY_MARGIN
    measured: bool = False  # from the baseline's own repeated measurements

    @classmethod
    def from_baseline(cls, throughputs: Sequence[float], memories: Sequence[float]) -> ProbeMargins:
        """From the baseline's repeated measurements in this study: the ratio of two single
        measurements has sqrt(2) x their log spread; the margin is ``NOISE_SDS`` of that,
        at least 5% (throughput) and 2% (memory). Defaults until there are enough."""
        t = [math.log(v) for v in throughputs if v and v > 0]
        m = [math.log(v) for v in memories if v and v > 0]
        if len(t) < MIN_MEASUREMENTS:
            return cls()
        mt = max(0.05, math.exp(NOISE_SDS * math.sqrt(2) * statistics.stdev(t)) - 1)
        mm = (max(0.02, math.exp(NOISE_SDS * math.sqrt(2) * statistics.stdev(m)) - 1)
              if len(m) >= MIN_MEASUREMENTS else DEFAULT_MEMORY_MARGIN)
        return cls(mt, mm, True)

    def text(self) -> str:
        source = "the baseline's repeated measurements" if self.measured else "defaults until the baseline is measured 3 times"
        return f"+-{100 * self.throughput:.0f}% throughput, +-{100 * self.memory:.0f}% memory ({source})"


def dominates_beyond_noise(better: tuple[float, float], other: tuple[float, float], margins: ProbeMargins) -> bool:
    """Whether ``better`` (throughput, peak memory) beats ``other`` on both, each by more
    than the noise.

    Example:
        >>> dominates_beyond_noise((200.0, 10.0), (100.0, 20.0), ProbeMargins(0.15, 0.10))
        True
        >>> dominates_beyond_noise((110.0, 10.0), (100.0, 20.0), ProbeMargins(0.15, 0.10))
        False
    """
    (bt, bm), (ot, om) = better, other
    return bt >= ot * (1 + margins.throughput) and bm * (1 + margins.memory) <= om


def fingerprint_difference(a: Any, b: Any) -> float | None:
    """The largest relative difference between two probes' fingerprints; None when they
    cannot be compared (missing, different steps or different tensors). Losses and sums of
    squares are compared relative to the larger of the two; a tensor's sums relative to
    sqrt(sum of squares x size), the most its sum can be (a sum near zero would otherwise
    make a rounding difference look large)."""
    try:
        if a["steps"] != b["steps"] or len(a["losses"]) != len(b["losses"]) or len(a["state"]) != len(b["state"]):
            return None
        pairs = [(float(x), float(y), max(abs(float(x)), abs(float(y))))
                 for x, y in zip(a["losses"], b["losses"], strict=True)]
        for (na, sa, qa, n), (nb, sb, qb, m) in zip(a["state"], b["state"], strict=True):
            if na != nb or n != m:
                return None
            pairs.append((float(qa), float(qb), max(abs(float(qa)), abs(float(qb)))))
            pairs.append((float(sa), float(sb), math.sqrt(max(float(qa), float(qb)) * n)))
    except (KeyError, TypeError, ValueError):
        return None
    return _largest_difference(pairs)


def _largest_difference(values: list[tuple[float, float, float]]) -> float | None:
    """The largest ``|x - y| / scale`` over ``(x, y, scale)``; None if a value is not finite."""
    worst = 0.0
    for x, y, scale in values:
        if not (math.isfinite(x) and math.isfinite(y)):
            return None
        if scale > 0:
            worst = max(worst, abs(x - y) / scale)
    return worst


def run_difference(a: Any, b: Any) -> float | None:
    """The largest relative difference between two whole training runs: their learning
    curves (the samples at every point, the mean loss and the metric there), their last
    step's loss and their final metric (each a dict with ``curve``, ``final_loss`` and
    ``score``); None when they cannot be compared (a point, a loss or a metric missing, or
    points at other sample counts). Two runs within ``REUSE_TOLERANCE`` trained with the
    same numerics from start to end.

    Example:
        >>> run = {"curve": [{"samples": 64, "loss": 2.0, "metric": 0.5}], "final_loss": 1.0, "score": 0.9}
        >>> round(run_difference(run, dict(run, score=0.99)), 4)
        0.0909
        >>> run_difference(run, dict(run, curve=[])) is None
        True
    """
    try:
        ca, cb = list(a["curve"] or []), list(b["curve"] or [])
        if not ca or len(ca) != len(cb) or any(x["samples"] != y["samples"] for x, y in zip(ca, cb, strict=True)):
            return None
        values = [(x[k], y[k]) for x, y in zip(ca, cb, strict=True) for k in ("loss", "metric")]
        values += [(a["final_loss"], b["final_loss"]), (a["score"], b["score"])]
        pairs = [(float(x), float(y), max(abs(float(x)), abs(float(y)))) for x, y in values]
    except (KeyError, TypeError, ValueError):
        return None
    return _largest_difference(pairs)


@dataclass(frozen=True)
class Gate:
    """What stops a training run early: at ``points`` (samples seen), a metric below
    ``floors`` (None: no floor there) or a mean loss above ``loss_ceiling`` (or not finite)."""

    points: tuple[int, ...]
    floors: tuple[float | None, ...]
    loss_ceiling: float | None = None
    baseline_metrics: tuple[float, ...] = ()  # the baseline's metric at each point, for the record

    def diverged(self, loss: float | None) -> str | None:
        """Why a mean training loss shows a diverged run, or None."""
        if loss is not None and not math.isfinite(loss):
            return f"diverged: the loss became {loss}"
        if loss is not None and self.loss_ceiling is not None and loss > self.loss_ceiling:
            return f"diverged: mean loss {loss:.4g} is above {self.loss_ceiling:.4g} (twice the untrained baseline's)"
        return None

    def behind(self, index: int, metric: float | None, spec: MetricSpec = DEFAULT_METRIC) -> str | None:
        """Why the metric (a score) at point ``index`` is behind the baseline's beyond
        noise, or None; worded in the metric's own terms (``spec``)."""
        floor = self.floors[index] if index < len(self.floors) else None
        if metric is None or floor is None or metric >= floor:
            return None
        base = self.baseline_metrics[index] if index < len(self.baseline_metrics) else None
        there = f" (baseline {spec.value_text(base)} there)" if base is not None else ""
        worse = "below" if spec.higher_is_better else "above"
        return f"{spec.name} {spec.value_text(metric)} {worse} {spec.value_text(floor)}{there}"

    def verdict(self, index: int, metric: float | None, loss: float | None, behind_before: bool = False,
                spec: MetricSpec = DEFAULT_METRIC) -> str | None:
        """Why the run stops at point ``index``, or None to go on: diverged, or behind
        beyond noise here and at the point before (``behind_before``). One point behind is
        not enough: a larger batch at the same budget takes fewer steps and catches up (on
        the recorded grids, stopping at the first point behind would have stopped 2 and 16
        configurations that ended feasible; two in a row, none)."""
        why = self.diverged(loss)
        if why is not None:
            return why
        behind = self.behind(index, metric, spec)
        if behind is not None and behind_before:
            return f"behind the baseline beyond noise at two points in a row: {behind}"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"points": list(self.points), "floors": list(self.floors), "loss_ceiling": self.loss_ceiling,
                "baseline_metrics": list(self.baseline_metrics)}

    @classmethod
    def from_dict(cls, data: Any) -> Gate | None:
        if not isinstance(data, dict):
            return None
        return cls(tuple(int(p) for p in data["points"]), tuple(data["floors"]), data.get("loss_ceiling"),
                   tuple(data.get("baseline_metrics") or ()))


def gate_from(base_curve: Sequence[dict[str, Any]], seed_curves: Sequence[Sequence[dict[str, Any]]],
              max_drop: float, initial_loss: float | None = None) -> Gate | None:
    """The gate from the baseline's curve and its extra seeds' curves (points as recorded
    by ``advisor.trial.training``: ``samples``, ``loss``, ``metric``), the allowed drop and
    the baseline's first-step loss; None without a curve."""
    if not base_curve:
        return None
    points, floors, metrics = [], [], []
    alpha = (1 - LEVEL) / len(base_curve)
    for i, point in enumerate(base_curve):
        values = [point["metric"]] + [c[i]["metric"] for c in seed_curves
                                      if i < len(c) and c[i].get("samples") == point["samples"]]
        floor = None
        if len(values) >= 2 and None not in values:
            floor = single_value_floor([float(v) for v in values], max_drop, alpha)
        points.append(int(point["samples"]))
        floors.append(floor)
        metrics.append(float(point["metric"]))
    ceiling = DIVERGED_LOSS_FACTOR * initial_loss if initial_loss is not None and initial_loss > 0 else None
    return Gate(tuple(points), tuple(floors), ceiling, tuple(metrics))

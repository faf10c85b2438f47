"""A stored study's metric read with its noise: the baseline's seed values and mean (the
reference every trial is judged against), each trial's values over the seeds it trained
with, its verdict (``advisor.core.feasibility``), and the trials read at their seed mean.
``StoredStudy`` (``advisor.core.stored``) has these through ``MetricReading``."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from functools import cached_property
from typing import Any, Protocol

from advisor.core.feasibility import Verdict, pooled_sd, same_numerics_verdict, verdict
from advisor.core.noise import MetricNoise
from advisor.core.objectives import METRIC_DROP, Figures, Limits
from advisor.core.student import t95


class TrialRecord(Protocol):
    """What is read here of ``advisor.core.stored.TrialRecord`` (which imports this module)."""

    number: int
    state: str
    config: Any
    figures: Figures | None
    constraints: dict[str, float]
    baseline: bool

    def get(self, key: str, default: Any = None) -> Any: ...

METRIC_REUSED = "accuracy_reused_from"  # the trial whose metric this one reuses (its stored key)
EARLY_STOP = "early_stop"  # why and where the metric gate stopped a trial
MAX_METRIC_DROP = "max_accuracy_drop"  # the study attribute of --max-metric-drop (its stored key)
SAME_RUN = "trained_as"  # the trial (the baseline) whose whole training run this one's repeated: same numerics
METRIC_SEEDS = "metric_seeds:"  # + trial number: that trial's metric over more seeds (undecided front candidates)


class MetricReading:
    """For ``StoredStudy``: needs its ``attrs``, ``records``, ``baseline`` and ``metric_noise``."""

    attrs: dict[str, Any]
    records: list[TrialRecord]
    baseline: TrialRecord | None
    metric_noise: MetricNoise | None

    def __post_init__(self) -> None:
        """A trial trained with more seeds (the baseline's noise seeds, or ``METRIC_SEEDS``)
        is read at its seed mean: its figure, and its feasibility against the baseline's
        mean (a metric gate's stop stays infeasible)."""
        object.__setattr__(self, "records", [self._over_seeds(r) for r in self.records])
        for name in ("baseline", "_by_number"):  # read again from the records as they now are
            self.__dict__.pop(name, None)

    def _over_seeds(self, record: TrialRecord) -> TrialRecord:
        values = self.metric_values(record) if record.state == "complete" and record.figures else []
        if len(values) < 2:
            return record
        mean = statistics.fmean(values)
        constraints = dict(record.constraints)
        reference = self.baseline_metric
        if not record.baseline and reference is not None and METRIC_DROP in constraints \
                and not record.get(EARLY_STOP):
            constraints[METRIC_DROP] = (reference - mean) - self.limits.allowed(reference)
        return replace(record, figures=record.figures._replace(score=mean),  # type: ignore[union-attr]
                       constraints=constraints)


    @cached_property
    def _by_number(self) -> dict[int, TrialRecord]:
        return {r.number: r for r in self.records}

    def record_of(self, number: Any) -> TrialRecord | None:
        """The trial numbered ``number`` (None for none, or for a number that is not one)."""
        return self._by_number.get(number) if isinstance(number, int) else None

    @cached_property
    def limits(self) -> Limits:
        """What made a trial feasible in this study (as it was run)."""
        cap = self.attrs.get("memory_cap_bytes")
        latency = self.attrs.get("max_latency_ms")
        return Limits(float(self.attrs.get(MAX_METRIC_DROP, 0.01)), float(cap) if cap else None,
                      bool(self.attrs.get("max_drop_relative")), float(latency) if latency else None)

    def metric_values(self, record: TrialRecord) -> list[float]:
        """``record``'s metric, one value per seed it was trained with: the baseline's seeds
        (``metric_noise``) for the baseline, a front candidate's when it was trained with
        more (``METRIC_SEEDS``), and for a trial whose metric was reused from another (same
        training numerics), or whose whole training run repeated the baseline's
        (``SAME_RUN``), that trial's values."""
        more = self.attrs.get(f"{METRIC_SEEDS}{record.number}")
        if isinstance(more, dict) and isinstance(more.get("values"), list) and more["values"]:
            return [float(v) for v in more["values"]]
        base = self.baseline
        source = record.get(METRIC_REUSED)
        if base is not None and (record.number == base.number or self.same_numerics(record)):
            return self.baseline_values
        if source is not None:
            other = self.record_of(source)
            if other is not None and other.get(METRIC_REUSED) is None:
                return self.metric_values(other)
        return [record.figures.score] if record.figures is not None else []

    @cached_property
    def baseline_values(self) -> list[float]:
        """The baseline's metric over its seeds (trial 0's alone without a noise estimate)."""
        if self.metric_noise is not None and self.metric_noise.values:
            return list(self.metric_noise.values)
        base = self.baseline
        return [base.figures.score] if base is not None and base.figures is not None else []

    @property
    def baseline_metric(self) -> float | None:
        """The reference every trial's metric is judged against: the baseline's seed mean."""
        values = self.baseline_values
        return statistics.fmean(values) if values else None

    @property
    def neutral_knobs(self) -> frozenset[str]:
        """The knobs this study found to leave the model's numerics alone: those in which a
        trial whose training run repeated the baseline's (``SAME_RUN``) differs from the
        baseline. Another configuration that differs from a trained one only in these (or
        ``REUSE_KNOBS``) may reuse its metric, once its probe's first steps agree."""
        base = self.baseline
        if base is None or base.config is None:
            return frozenset()
        reference = base.config.to_dict()
        return frozenset(k for r in self.records if r.get(SAME_RUN) == base.number and r.config is not None
                         for k, v in r.config.to_dict().items() if reference.get(k) != v)

    def same_numerics(self, record: TrialRecord) -> bool:
        """Whether ``record`` (not the baseline) trains with the baseline's numerics: its
        metric reused from the baseline's, or its whole training run the baseline's."""
        base = self.baseline
        if base is None or record.number == base.number:
            return False
        if base.number in (record.get(METRIC_REUSED), record.get(SAME_RUN)):
            return True
        other = self.record_of(record.get(METRIC_REUSED))  # reused from a trial that trained as the baseline
        return other is not None and other.get(SAME_RUN) == base.number

    def verdict(self, record: TrialRecord) -> Verdict | None:
        """``record``'s metric against the baseline's, with the noise
        (``advisor.core.feasibility``); None without both. A trial with the baseline's
        numerics differs from it by nothing at every seed: feasible, with no noise to weigh."""
        values, reference = self.metric_values(record), self.baseline_metric
        if not values or reference is None:
            return None
        if self.same_numerics(record):
            return same_numerics_verdict(len(values), self.limits.allowed(reference))
        return verdict(values, self.baseline_values, self.limits.allowed(reference))

    def metric_tie(self, a: TrialRecord, b: TrialRecord) -> bool:
        """Whether the noise cannot tell ``a``'s metric from ``b``'s: the one-sided 95% bounds
        of their difference straddle 0, the verdicts' rule (``advisor.core.feasibility``),
        over both trials' seeds and the baseline's, the spread pooled. Against the baseline
        it is the other trial's own verdict: a review read "feasible: -0.066, its 95% upper
        bound -0.005" beside "a tie: trial 2 reads better within the noise" (the old rule, 2 sd
        of one seed, whatever the seed counts). Without a noise estimate: equal metrics only."""
        if a.number == b.number:
            return True
        base = self.baseline.number if self.baseline is not None else None
        if base in (a.number, b.number):
            judged = self.verdict(b if a.number == base else a)
            if judged is not None and judged.noise_known:
                return judged.low <= 0.0 <= judged.high
        va, vb = self.metric_values(a), self.metric_values(b)
        if not va or not vb:
            return False
        d = statistics.fmean(va) - statistics.fmean(vb)
        samples = [va, vb] + ([self.baseline_values] if base is not None and base not in (a.number, b.number) else [])
        sd, df = pooled_sd(*samples)
        if df == 0 or sd == 0.0:
            return d == 0.0
        return abs(d) <= t95(df) * sd * math.sqrt(1 / len(va) + 1 / len(vb))

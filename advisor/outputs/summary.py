"""A stored study summarised as plain data: the front with ratios to the baseline, the
trial counts by outcome, the failures, what the capability filter dropped, and each knob's
marginal effect. The console, ``--json``, the report and the explorer format these."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.errors import StudyError
from advisor.core.objectives import Figures, Versus
from advisor.core.picks import PICKS, pick, tie_rival
from advisor.core.stored import (
    EARLY_STOP,
    ESTIMATE,
    METRIC_REUSED,
    PROBE_DONE,
    SAME_RUN,
    SCORE_OUT,
    TRAINING_RUN,
    StoredStudy,
    TrialRecord,
)
from advisor.core.units import first_line
from advisor.search.known_failures import is_known_failure
from advisor.search.known_oom import OVER_LIMIT
from advisor.search.space import SearchSpace


def dropped_lines(space: SearchSpace) -> list[str]:
    """What the capability filter dropped, one line per option (one per knob when the
    whole knob was removed)."""
    kept = {k.name for k in space.knobs}
    lines, said = [], set()
    for d in space.dropped:
        if d.knob in kept:
            lines.append(f"dropped {d.knob}={json.dumps(d.value)}: {d.reason}")
        elif d.knob not in said:
            said.add(d.knob)
            lines.append(f"dropped {d.knob} (the whole knob; its default is kept): {d.reason}")
    return lines


@dataclass(frozen=True)
class FrontRow:
    """A trial of the front (or the baseline shown beside it), against the baseline."""

    record: TrialRecord
    on_front: bool
    versus: Versus  # every figure None when the study has no completed baseline
    reference: float | None = None  # the baseline's row when its first run was disturbed: what its ratios are to

    @property
    def figures(self) -> Figures:
        assert self.record.figures is not None  # front trials and the baseline completed
        return self.record.figures

    def to_dict(self) -> dict[str, Any]:
        """The row as ``advisor tune --json`` prints it."""
        r = self.record
        row = {"trial": r.number, "baseline": r.baseline, "on_front": self.on_front,
               "config": r.config.to_dict() if r.config is not None else {},
               "throughput": self.figures.throughput, "peak_memory_bytes": self.figures.peak_memory_bytes,
               SCORE_OUT: self.figures.score, "throughput_iqr_rel": relative_iqr(r),
               # why its samples/s may read wrong: a busy machine, an unsettled timing (advisor.core.caveats)
               "speed_caveats": [c.to_dict() for c in r.caveats]}
        if self.reference is not None:  # the samples/s the tables show for it (DISTURBED_BASELINE_NOTE)
            row["reference_throughput"] = self.reference
        if self.versus.metric_delta is not None:  # the study has a baseline
            row.update(self.versus.to_dict())
        if r.latency is not None:  # an inference trial's per-request latency (advisor.core.latency)
            row["latency"] = r.latency.to_dict()
        return row


def front_rows(study: StoredStudy) -> list[FrontRow]:
    """The baseline and the feasible Pareto front, by trial number, each against the baseline."""
    base = study.baseline
    front = study.front()
    on_front = {r.number for r in front}
    shown = front + ([base] if base is not None and base.number not in on_front else [])
    reference = study.shown_baseline_reference
    return [FrontRow(r, r.number in on_front, study.versus_baseline(r), reference if r.baseline else None)
            for r in sorted(shown, key=lambda r: r.number)]


def relative_iqr(record: TrialRecord) -> float | None:
    """The spread of a trial's step time: interquartile range / median."""
    med, iqr = record.get("step_time_median_s"), record.get("step_time_iqr_s")
    return iqr / med if med and iqr is not None else None


def counts(study: StoredStudy) -> dict[str, Any]:
    """Trials by outcome: run (counted), completed, failed by class, infeasible, the
    proposals answered without running (duplicates, skipped), and two-stage evaluation's
    probes, training runs, probed-only trials, reused metrics, training runs that repeated
    the baseline's (same numerics) and early stops
    (``advisor tune --json`` 2 renamed accuracy_runs and accuracy_reused to these)."""
    ran = [r for r in study.records if r.counted]
    failed = Counter(r.failure_class or "unknown" for r in ran if r.state == "failed")
    skipped = [r for r in study.records if r.state == "skipped"]
    known_oom = [r for r in skipped if r.failure_class == "oom" and r.get(ESTIMATE) is None]  # learnt, not estimated
    over_limit = sum(1 for r in known_oom if (r.failure_message or "").startswith(OVER_LIMIT))
    return {"trials": len(ran), "completed": sum(1 for r in ran if r.state == "complete"),
            "failed": sum(failed.values()), "failed_by_class": dict(failed),
            "duplicates": sum(1 for r in study.records if r.state == "duplicate"),
            "skipped": len(skipped),
            "skipped_oom": len(known_oom) - over_limit, "skipped_over_limit": over_limit,
            "skipped_estimate": sum(1 for r in skipped if r.failure_class == "oom" and r.get(ESTIMATE) is not None),
            "skipped_known_failure": sum(1 for r in skipped if is_known_failure(r)),
            "infeasible": sum(1 for r in ran if r.state == "complete" and not r.feasible),
            # two-stage evaluation: probes run, training runs, and what spared or cut them
            "probes": sum(1 for r in study.records if r.get(PROBE_DONE)),
            "training_runs": sum(1 for r in study.records if r.get(TRAINING_RUN) is not None),
            "probed_only": sum(1 for r in ran if r.state == "probed"),
            "metric_reused": sum(1 for r in ran if r.get(METRIC_REUSED) is not None),
            "trained_as_baseline": sum(1 for r in ran if r.get(SAME_RUN) is not None),
            "early_stops": sum(1 for r in ran if r.get(EARLY_STOP))}


def failures_text(study: StoredStudy) -> list[str]:
    """One line per failed trial that counts: number, class, configuration, message."""
    return [f"trial {r.number} [{r.failure_class or '?'}] {r.description}: {first_line(r.failure_message, 10_000)}"
            for r in study.records if r.state == "failed" and r.counted]


@dataclass(frozen=True)
class KnobEffect:
    """Medians over the completed trials whose configuration has ``knob=value``."""

    knob: str
    value: Any
    n: int
    throughput_ratio: float | None
    memory_ratio: float | None
    metric_delta: float

    @property
    def label(self) -> str:
        return f"{self.knob}={self.value if isinstance(self.value, str) else json.dumps(self.value)}"


def knob_effects(study: StoredStudy, records: list[TrialRecord]) -> list[KnobEffect]:
    """Per value of every knob that varies among ``records`` (completed): the medians of
    their ratios to the baseline as every table shows them (``versus_baseline``: to the
    baseline as measured by each trial's time, confirmed where confirmed; a review read 28x
    here beside 1.89x in the front, both to a disturbed first run). Marginal medians over
    the trials the search ran, not controlled one-knob experiments. Knobs come in
    TrialConfig order, values ascending."""
    base = study.baseline
    assert base is not None and base.figures is not None
    configs = [(r, r.config.to_dict()) for r in records if r.config is not None and r.figures is not None]
    b_acc = base.figures.score
    versus = {r.number: study.versus_baseline(r) for r, _ in configs}

    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    effects = []
    for key in TrialConfig.keys():
        groups: dict[str, list[TrialRecord]] = {}
        for r, config in configs:
            groups.setdefault(json.dumps(config[key], sort_keys=True), []).append(r)
        if len(groups) < 2:
            continue
        for text in sorted(groups, key=_value_order):
            rs = groups[text]
            effects.append(KnobEffect(
                key, json.loads(text), len(rs),
                median([versus[r.number].throughput_ratio for r in rs]),
                median([versus[r.number].memory_ratio for r in rs]),
                statistics.median(r.figures.score - b_acc for r in rs)))  # type: ignore[union-attr]
    return effects


def _value_order(text: str) -> tuple[int, int, Any]:
    value = json.loads(text)
    if value is None:
        return (0, 0, "")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (1, 1, value) if number else (1, 0, text)


def picks_line(study: StoredStudy) -> str | None:
    """The picks `advisor export --pick` would write, in one line, each tie said as such:
    'fastest trial 2 (a tie: trial 5 reads faster within the noise), smallest trial 4, ...';
    None when there is nothing to pick."""
    try:
        chosen = [(how, pick(study, how)) for how in PICKS]
    except StudyError:
        return None
    parts = []
    for how, record in chosen:
        rival = tie_rival(study, how, record)
        tied = f" (a tie: trial {rival[0].number} reads better within the noise)" if rival else ""
        parts.append(f"{how} trial {record.number}{tied}")
    return ", ".join(parts)

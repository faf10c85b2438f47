"""A trial as the study stores it, and read back.

Every figure a trial measured is an Optuna user attribute (readable by any Optuna tool,
optuna-dashboard included); its three objectives are the trial's ``values`` and its
constraints Optuna's. ``read_trial`` is the one place that turns a stored trial (an Optuna
``FrozenTrial``) back into a ``TrialRecord`` (``read_study``: a whole study into a
``StoredStudy``): the explorer, export, report and the search strategy all read trials
through it.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from advisor.core.caveats import Caveat, speed_caveats
from advisor.core.config import TrialConfig
from advisor.core.latency import Latency
from advisor.core.metric import MetricSpec
from advisor.core.noise import MetricNoise, nearest_reference, recent_reference
from advisor.core.objectives import Figures, Versus, pareto_front, ratio, satisfied
from advisor.core.pairs import Confirmation
from advisor.core.results import NOT_COUNTED, TrialResult
from advisor.core.study_attrs import BASELINE_DISTURBED as BASELINE_DISTURBED
from advisor.core.study_attrs import BASELINE_MEASUREMENTS as BASELINE_MEASUREMENTS
from advisor.core.study_attrs import CONFIRMATION as CONFIRMATION
from advisor.core.study_attrs import METRIC
from advisor.core.study_attrs import METRIC_NOISE as METRIC_NOISE
from advisor.core.study_metric import EARLY_STOP as EARLY_STOP
from advisor.core.study_metric import MAX_METRIC_DROP as MAX_METRIC_DROP
from advisor.core.study_metric import METRIC_REUSED as METRIC_REUSED  # its keys, re-exported: read here
from advisor.core.study_metric import METRIC_SEEDS as METRIC_SEEDS
from advisor.core.study_metric import SAME_RUN as SAME_RUN
from advisor.core.study_metric import MetricReading
from advisor.core.two_stage import ProbeMargins

# user-attribute keys besides the TrialResult fields
CONFIG, CONFIG_KEY, WALL = "config", "config_key", "wall_s"
BASELINE, DUPLICATE_OF, SKIPPED = "baseline", "duplicate_of", "skipped"
SEED_CONFIG, COMBINATION = "seed_config", "combination"  # set when the strategy enqueues a trial
MODEL_PROPOSAL = "model_proposal"  # ... proposed by the model of the knobs' effects
DRIVER = "driver"  # the id of the driver that started it (advisor.study.run._drivers)
DISTURBED_RUNS = "disturbed_runs"  # measurements on a disturbed machine, run again (the noise sentinel)
# two-stage evaluation (advisor.core.two_stage): the probe's figures are stored as soon as it
# is in (PROBE_DONE); then the training run's, or why none was needed, or whose metric was reused
PROBE_DONE, PROBE_WALL = "probe_done", "probe_wall_s"
PROBED_AT = "probed_at"  # when the probe finished (POSIX seconds): its ratio is to the baseline nearest then
ESTIMATE = "memory_estimate"  # the trial's estimate of its peak memory (``advisor.trial.estimate``)
TRAINING_SKIPPED = "accuracy_skipped"  # why no training run was needed (the trial is PRUNED)
TRAINING_RUN = "accuracy_run"  # the training run's own phases, wall time and peak memory
CURVE = "curve"  # the learning curve (EARLY_STOP: why and where the gate stopped it)
INITIAL_LOSS = "initial_loss"  # a training run's loss at its first step (the untrained model's)
REUSE_DIFFERENCE = "accuracy_reuse_difference"  # how close the first steps of a reused metric's trials were
# what a table's caption says when the baseline's row shows ``StoredStudy.shown_baseline_reference``
DISTURBED_BASELINE_NOTE = ("The baseline's first run was disturbed: its samples/s is the median of its latest "
                           "re-measurements, the reference the ratios are to")
# TrialResult.score is stored under this key (the name studies have always had); the other
# stored keys that still say "accuracy" above are likewise kept, so older studies read the same
SCORE = "accuracy"
# what every document advisor writes for users calls it (--json, exports; issue 32): the
# score of any metric, higher is better (advisor tune --json 2, report 3, measure 2, advisor_config 2)
SCORE_OUT = "score"
# the study's own attributes: their keys, re-exported (advisor.core.study_attrs writes them)


@dataclass(frozen=True)
class TrialRecord:
    """One stored trial, typed.

    ``state`` is what a reader needs to tell apart: ``complete``, ``failed`` (it ran and
    failed, or was cut short), ``skipped`` (not run: it could not work, or would run out of
    memory like an earlier trial), ``duplicate`` (answered from trial ``duplicate_of``),
    ``running`` or ``waiting`` (enqueued, not started), ``probed`` (two-stage evaluation:
    its probe measured speed and memory, and no training run was needed; Optuna's PRUNED).
    """

    number: int
    state: str
    config: TrialConfig | None
    figures: Figures | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    baseline: bool = False
    failure_class: str | None = None
    failure_message: str | None = None
    duplicate_of: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)  # every stored attribute, for display
    finished_at: float | None = None  # when it finished (POSIX seconds), if it did

    @property
    def feasible(self) -> bool:
        return self.figures is not None and satisfied(self.constraints)

    @property
    def counted(self) -> bool:
        """Counts towards ``--trials``: it completed, or its configuration failed.

        Duplicates, skipped configurations and trials cut short (Ctrl-C, the study's
        timeout, a killed driver, a lost node) do not count; resuming runs the cut-short
        ones again.
        """
        if self.state in ("complete", "probed"):
            return True
        return self.state == "failed" and self.failure_class not in NOT_COUNTED

    @property
    def description(self) -> str:
        """The configuration in one line ('' when none was stored)."""
        return self.config.describe() if self.config is not None else ""

    @property
    def seed(self) -> bool:
        """Enqueued by the default strategy (a one-knob seed, a combination or a model proposal)."""
        return SEED_CONFIG in self.attrs

    def get(self, key: str, default: Any = None) -> Any:
        """A stored attribute (a TrialResult field such as ``step_time_median_s``)."""
        return self.attrs.get(key, default)

    @cached_property
    def latency(self) -> Latency | None:
        """An inference trial's per-request latency (``advisor.core.latency``); None for a
        training trial, and for one stored before advisor measured it."""
        return Latency.of(self.attrs)

    @cached_property
    def caveats(self) -> list[Caveat]:
        """Why its measured speed may read wrong: a busy machine, a timing that did not settle
        (``advisor.core.caveats``); [] for a clean one and for one without a timing."""
        return speed_caveats(self.attrs.get("telemetry"))

    def metric_source(self, metric: str) -> str:
        """Where its metric comes from when it did not train for it alone ('accuracy from
        trial 3': reused; "its training run repeated trial 0's": trained as the baseline; ''
        otherwise): each view adds its own words on the numerics."""
        if self.get(METRIC_REUSED) is not None:
            return f"{metric} from trial {self.get(METRIC_REUSED)}"
        if self.get(SAME_RUN) is not None:
            return f"its training run repeated trial {self.get(SAME_RUN)}'s"
        return ""

    @property
    def probe(self) -> tuple[float, float] | None:
        """(throughput, peak memory) as measured, with or without its metric: a trial's
        figures, or a probed trial's probe."""
        if self.figures is not None:
            return self.figures.throughput, self.figures.peak_memory_bytes
        t, m = self.attrs.get("throughput"), self.attrs.get("peak_memory_bytes")
        return (float(t), float(m)) if t and m is not None and self.attrs.get(PROBE_DONE) else None


_FINISHED = ("COMPLETE", "FAIL", "PRUNED")
_records: dict[int, tuple[weakref.ref[Any], TrialRecord]] = {}  # by id() of a finished FrozenTrial


def read_trial(trial: Any) -> TrialRecord:
    """The record of a stored Optuna trial (a ``FrozenTrial``). A finished trial never
    changes, and Optuna's storages hand out the same object for it on every read: its
    record is built once (a long study is read again and again)."""
    if trial.state.name not in _FINISHED:
        return _read(trial)
    hit = _records.get(id(trial))
    if hit is not None and hit[0]() is trial:
        return hit[1]
    record = _read(trial)
    key = id(trial)
    try:
        _records[key] = (weakref.ref(trial, lambda _, key=key: _records.pop(key, None)), record)  # type: ignore[misc]
    except TypeError:  # not weakly referable (a stand-in object): not kept
        pass
    return record


def _read(trial: Any) -> TrialRecord:
    attrs = dict(trial.user_attrs)
    stored = attrs.get(CONFIG)
    config = TrialConfig.from_dict(stored) if isinstance(stored, dict) else None
    state_name = trial.state.name
    if DUPLICATE_OF in attrs:
        state = "duplicate"
    elif attrs.get(SKIPPED):
        state = "skipped"
    elif state_name == "COMPLETE":
        state = "complete"
    elif state_name == "PRUNED" and TRAINING_SKIPPED in attrs:
        state = "probed"
    elif state_name in ("RUNNING", "WAITING"):
        state = state_name.lower()
    else:
        state = "failed"
    figures = Figures(*trial.values) if state_name == "COMPLETE" and trial.values else None
    complete = getattr(trial, "datetime_complete", None)
    return TrialRecord(number=trial.number, state=state, config=config, figures=figures,
                       constraints=dict(getattr(trial, "constraints", None) or {}),
                       baseline=bool(attrs.get(BASELINE)), failure_class=attrs.get("failure_class"),
                       failure_message=attrs.get("failure_message"), duplicate_of=attrs.get(DUPLICATE_OF),
                       attrs=attrs, finished_at=complete.timestamp() if complete is not None else None)


def config_attrs(config: TrialConfig) -> dict[str, Any]:
    """What is stored about a trial's configuration as soon as it is decided."""
    return {CONFIG: config.to_dict(), CONFIG_KEY: config.key()}


def result_dict(result: TrialResult) -> dict[str, Any]:
    """``result.to_dict()`` with its score under the key studies store it as (``SCORE``)."""
    return {SCORE if k == "score" else k: v for k, v in result.to_dict().items()}


def result_attrs(result: TrialResult, wall_s: float) -> dict[str, Any]:
    """What is stored of a trial's result: every measured field that has a value."""
    attrs = {k: v for k, v in result_dict(result).items() if k != "ok" and v is not None and (k != SKIPPED or v)}
    attrs[WALL] = wall_s
    return attrs


def stored_result(attrs: dict[str, Any]) -> TrialResult:
    """A trial's result as ``result_attrs`` stored it (a probed trial's: its probe's, with
    the metric it has, if any)."""
    known = TrialResult.__dataclass_fields__
    fields = {("score" if k == SCORE else k): v for k, v in attrs.items()}
    return TrialResult(ok=True, **{k: v for k, v in fields.items() if k in known and k != "ok"})


def skipped_attrs(config: TrialConfig, reason: str, failure_class: str) -> dict[str, Any]:
    """A configuration recorded without running it, and why."""
    return {**config_attrs(config), SKIPPED: True, "failure_class": failure_class, "failure_message": reason}


def figure_time(record: TrialRecord) -> float | None:
    """When ``record``'s speed was measured (POSIX seconds): its probe's, when it was
    probed first, else when it finished."""
    return record.get(PROBED_AT) or record.finished_at


def reference_measurements(measurements: Any) -> list[dict[str, Any]]:
    """The stored re-measurements of the baseline that may be references: those with a
    throughput whose tries were not all disturbed (those are on record only)."""
    return [m for m in measurements or [] if isinstance(m, dict) and m.get("throughput") and not m.get("disturbed")]


def baseline_measurements(attrs: dict[str, Any], base: TrialRecord | None) -> list[tuple[float, float]]:
    """(when, throughput) of every measurement of the baseline, in time order, from the
    study's attributes ``attrs`` and its baseline trial ``base``: trial 0 (unless its
    sentinel showed a disturbed machine) and the re-measurements. The driver (its live
    lines) and every reader of the stored study take them from here."""
    out = [(float(m["at"]), float(m["throughput"])) for m in reference_measurements(attrs.get(BASELINE_MEASUREMENTS))
           if isinstance(m.get("at"), (int, float))]
    when = figure_time(base) if base is not None else None
    if base is not None and base.figures and when is not None and not (
            out and attrs.get(BASELINE_DISTURBED)):  # a disturbed trial 0 is no reference
        out.append((float(when), base.figures.throughput))
    return sorted(out)


def reference_throughput_at(measurements: list[tuple[float, float]], base: TrialRecord,
                            when: float | None) -> float | None:
    """The baseline's reference throughput for a figure measured at ``when`` (None: trial
    0's): the median of its ``RECENT`` latest measurements by then
    (``advisor.core.noise.recent_reference``), never one probe alone. The one rule for an
    unconfirmed ratio: ``advisor tune``'s line as the trial finishes and every later reading
    of the study (``StoredStudy.versus_baseline``) take it from here, so they agree."""
    if base.figures is None:
        return None
    found = recent_reference(measurements, when) if when is not None else None
    # none by then (a figure measured before the first re-measurement of a baseline whose
    # trial 0 turned out disturbed): trial 0's own, the one reference the driver had then
    return found if found is not None else base.figures.throughput


@dataclass(frozen=True)
class StoredStudy(MetricReading):
    """A stored study read once: its attributes and every trial as a record.

    Ratios to the baseline (``versus_baseline``) are the confirmed ones where a trial was
    confirmed in pairs; otherwise the trial's throughput against the baseline's reference
    as it stood when the trial was measured (``reference_throughput_at``), marked
    unconfirmed. The front and the
    picks are decided on those ratios, with the metric's noise as epsilon.
    """

    name: str
    attrs: dict[str, Any]
    records: list[TrialRecord]

    @cached_property
    def metric(self) -> MetricSpec:
        """What the study's metric is (its name, direction, how it reads)."""
        return MetricSpec.from_dict(self.attrs.get(METRIC))

    @cached_property
    def baseline(self) -> TrialRecord | None:
        """The completed baseline trial (trial 0 unless it had to be re-run), or None."""
        return next((r for r in self.records if r.baseline and r.state == "complete"), None)

    @cached_property
    def confirmations(self) -> dict[int, Confirmation]:
        """Paired confirmations by trial number (those with at least one pair)."""
        out = {}
        for key, value in self.attrs.items():
            if key.startswith(CONFIRMATION) and isinstance(value, dict):
                try:
                    c = Confirmation.from_dict(value)
                except (KeyError, TypeError, ValueError):
                    continue  # unreadable: treated as never confirmed
                if c.pairs:
                    out[c.trial] = c
        return out

    @cached_property
    def metric_noise(self) -> MetricNoise | None:
        return MetricNoise.from_dict(self.attrs.get(METRIC_NOISE))

    @property
    def epsilon(self) -> float:
        """The metric's noise (0 when the study did not estimate it)."""
        return self.metric_noise.epsilon if self.metric_noise is not None else 0.0

    @cached_property
    def baseline_measurements(self) -> list[tuple[float, float]]:
        """(when, throughput) of every measurement of the baseline: ``baseline_measurements``."""
        return baseline_measurements(self.attrs, self.baseline)

    @cached_property
    def probe_margins(self) -> ProbeMargins:
        """How far apart two probes must be to differ beyond noise, from the baseline's own
        measurements in this study (its probe and its re-measurements)."""
        measured = [(m.get("throughput"), m.get("peak_memory_bytes"))
                    for m in reference_measurements(self.attrs.get(BASELINE_MEASUREMENTS))]
        base = self.baseline
        if base is not None and base.probe is not None:
            measured.append(base.probe)
        return ProbeMargins.from_baseline([t for t, _ in measured if t], [m for _, m in measured if m])

    def reference_throughput(self, record: TrialRecord) -> float | None:
        """The baseline's reference at ``record``'s time (its probe's, when it was probed
        first): ``reference_at``."""
        return self.reference_at(figure_time(record))

    def decision_reference(self, record: TrialRecord) -> float | None:
        """The baseline's reference for the search's decisions about ``record``: the
        measurements nearest to its time, later ones included (``nearest_reference``);
        what is shown keeps ``reference_throughput``."""
        when = figure_time(record)
        found = nearest_reference(self.baseline_measurements, when) if when is not None else None
        return found if found is not None else self.reference_throughput(record)

    @property
    def measured_after_trials(self) -> bool:
        """Whether the baseline was measured again (a measurement that may be a reference)
        after the last counted trial's figure was measured."""
        last = max((t for r in self.records if r.counted and not r.baseline
                    if (t := figure_time(r)) is not None), default=None)
        return last is None or any(at >= last for at, _ in self.baseline_measurements)

    @cached_property
    def shown_baseline_reference(self) -> float | None:
        """What the tables show as the baseline's samples/s when its first run was disturbed:
        the reference its ratios are to (``DISTURBED_BASELINE_NOTE``); None when its own run stands."""
        return self.reference_at(math.inf) if self.baseline is not None and self.attrs.get(BASELINE_DISTURBED) else None

    def shown_throughput(self, record: TrialRecord) -> float | None:
        """``record``'s samples/s as every view shows it: the baseline's reference when its
        first run was disturbed (``shown_baseline_reference``), else its own figure (its probe's
        when it was probed only). A review read the reference in the front table and the
        disturbed run's 218 samples/s under "Recommended" and in the export."""
        if record.baseline and (reference := self.shown_baseline_reference) is not None:
            return reference
        if record.figures is not None:
            return record.figures.throughput
        return record.probe[0] if record.probe is not None else None

    def shown_caveats(self, record: TrialRecord) -> list[Caveat]:
        """``record``'s speed caveats as the tables show them: none for a disturbed baseline's
        row, which shows its re-measured reference (``shown_throughput``), not its own run."""
        return [] if record.baseline and self.shown_baseline_reference is not None else record.caveats

    @property
    def sittings(self) -> set[int]:
        """The sittings its confirmations' pairs were measured in."""
        return {p.sitting for c in self.confirmations.values() for p in c.pairs}

    def reference_at(self, when: float | None) -> float | None:
        """The baseline's reference throughput at ``when`` (POSIX seconds; None: trial
        0's): ``reference_throughput_at``."""
        base = self.baseline
        if base is None or base.figures is None:
            return None
        return reference_throughput_at(self.baseline_measurements, base, when)

    def versus_baseline(self, record: TrialRecord) -> Versus:
        """``record``'s figures relative to the baseline's (confirmed where it was)."""
        base = self.baseline
        if base is None or base.figures is None:
            return Versus(None, None, None)
        if record.figures is None:  # a probed-only trial: speed and memory, no metric
            probe = record.probe
            if probe is None:
                return Versus(None, None, None)
            return Versus(ratio(probe[0], self.reference_throughput(record)),
                          ratio(probe[1], base.figures.peak_memory_bytes), None, epsilon=self.epsilon)
        reference = self.baseline_metric if self.baseline_metric is not None else base.figures.score
        delta, judged = record.figures.score - reference, self.verdict(record)
        if record.number == base.number:
            return Versus(1.0, 1.0, 0.0, epsilon=self.epsilon, baseline=True)
        c = self.confirmations.get(record.number)
        if c is not None and c.throughput is not None and c.memory is not None:
            thr, mem = c.throughput, c.memory
            return Versus(thr.center, mem.center, delta, True, (thr.low, thr.high), (mem.low, mem.high), thr.n,
                          self.epsilon, verdict=judged, left_out=c.left_out, all_disturbed=c.all_disturbed)
        return Versus(ratio(record.figures.throughput, self.reference_throughput(record)),
                      ratio(record.figures.peak_memory_bytes, base.figures.peak_memory_bytes), delta,
                      epsilon=self.epsilon, verdict=judged)

    def relative_figures(self, record: TrialRecord) -> Figures:
        """``record``'s figures as ratios to the baseline (confirmed where it was), the
        metric as measured: what the front and the picks compare."""
        assert record.figures is not None
        vs = self.versus_baseline(record)
        if vs.throughput_ratio is None or vs.memory_ratio is None:
            return record.figures
        return Figures(vs.throughput_ratio, vs.memory_ratio, record.figures.score)

    def front(self) -> list[TrialRecord]:
        """The feasible Pareto front: completed feasible trials no other one dominates
        (ratios to the baseline, the metric's noise as epsilon; duplicates left out), by
        trial number."""
        pool = [r for r in self.records if r.state == "complete" and r.feasible]
        relative = {r.number: self.relative_figures(r) for r in pool}
        return pareto_front(pool, lambda r: relative[r.number], self.epsilon)


def read_study(study: Any) -> StoredStudy:
    """A stored Optuna study (``optuna.Study``) read into a ``StoredStudy``."""
    return StoredStudy(study.study_name, dict(study.user_attrs),
                       [read_trial(t) for t in study.get_trials(deepcopy=False)])

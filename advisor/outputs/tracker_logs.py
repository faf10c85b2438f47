"""What ``--log-to`` logs, built once from the study's events and handed to every tracker
(``advisor.outputs.trackers``) alike: plain dictionaries, no tracker library.

- ``StudyLog``: the study's name, its settings and the hardware fingerprint (when it starts).
- ``TrialLog``: one stored trial: every knob of its configuration as a parameter (all of
  them, not only those changed from the defaults, so that runs compare column by column),
  its figures as metrics, its state and failure as tags.
- ``baseline_metrics``: the baseline's figures, study-level.
- ``Confirmed``: a trial's paired confirmation as it stands after a pair landed.
- ``EndLog``: the end: the feasible front (confirmed ratios where confirmed), the counts.

Metric keys: ``throughput`` (samples/s), ``peak_memory_bytes``, the metric under its own
name (``accuracy``, ``perplexity``: the value itself, whatever its direction) and its
difference to the baseline (``<name>_delta``: ``accuracy_delta``), the unconfirmed ratios
to the baseline, the wall times (``wall_s`` the whole trial, ``probe_wall_s`` its
speed-and-memory probe, ``training_wall_s`` its training run), the timing details and each phase (``phase/<name>_s``);
for an inference trial its per-request latency in ms (``latency/p50_ms``, ``latency/p95_ms``,
``latency/p99_ms`` at ``latency/batch_size`` over ``latency/calls`` calls; ``latency/batch1_ms``
and ``latency/batch1_p99_ms`` at batch 1, when measured).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from advisor.core.events import Finished
from advisor.core.latency import Latency
from advisor.core.metric import MetricSpec
from advisor.core.objectives import Figures
from advisor.core.pairs import Confirmation
from advisor.core.stored import (
    EARLY_STOP,
    METRIC_REUSED,
    PROBE_WALL,
    SAME_RUN,
    TRAINING_RUN,
    TRAINING_SKIPPED,
    StoredStudy,
)
from advisor.core.units import first_line
from advisor.core.version import VERSION
from advisor.machine.hardware import fingerprint
from advisor.outputs.console import infeasible_text
from advisor.outputs.summary import counts, front_rows
from advisor.study.storage.guard import shown_url

if TYPE_CHECKING:
    from advisor.study.run.plan import StudyPlan

MESSAGE_LIMIT = 2000  # characters of a failure message kept in a tag (MLflow allows 8000)
_TIMING = ("compute_s", "step_time_median_s", "step_time_iqr_s", "first_step_s", "compile_s", "final_loss",
           "train_samples", "timed_steps", "energy_per_sample_j")
_OURS = {"throughput", "peak_memory_bytes", "throughput_ratio", "memory_ratio", "wall_s", "probe_wall_s",
         "training_wall_s", "training_peak_memory_bytes", *_TIMING}


@dataclass(frozen=True)
class StudyLog:
    name: str
    settings: dict[str, str]
    hardware: dict[str, str]  # the fingerprint, flattened (the CPU flags left out)
    job: str = "study"  # or "confirmation": `advisor confirm` run on a stored study


@dataclass(frozen=True)
class TrialLog:
    number: int
    name: str  # "trial 3: bs=128 bf16 compile"
    ok: bool
    params: dict[str, Any]  # every knob, its value as stored
    metrics: dict[str, float]
    tags: dict[str, str]
    started: float | None = None  # POSIX seconds
    ended: float | None = None


@dataclass(frozen=True)
class Confirmed:
    number: int
    step: int  # the pairs so far
    metrics: dict[str, float]
    tags: dict[str, str]


@dataclass(frozen=True)
class EndLog:
    status: str  # finished, interrupted, failed
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    front: list[dict[str, Any]] = field(default_factory=list)  # a row per trial on the front, by number


def metric_key(metric: MetricSpec) -> str:
    """The metric's own name as a metric key (letters, digits, _ - . / and spaces), never one
    of the other figures' keys."""
    key = re.sub(r"[^A-Za-z0-9_./ -]", "_", metric.name).strip() or "metric"
    return f"metric_{key}" if key in _OURS else key


def finite(values: dict[str, Any]) -> dict[str, float]:
    """The entries that are numbers (bools as 0/1), finite: a tracker takes nothing else."""
    out = {}
    for key, value in values.items():
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = float(value)
    return out


def _plain(value: Any) -> Any:
    """A front entry's value as JSON takes it: a number that is not finite (an unbounded
    interval) becomes None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _hardware(found: dict[str, Any]) -> dict[str, str]:
    """A hardware fingerprint (``advisor.machine.hardware.fingerprint``) flattened to text."""
    hardware = {}
    for key, value in found.items():
        if key == "gpus":
            value = ", ".join(str(g.get("name", "?")) for g in value) or "none"
        if key != "cpu_flags":
            hardware[key] = "" if value is None else str(value)
    return hardware


def confirmation_log(study: StoredStudy) -> StudyLog:
    """``advisor confirm`` on a stored study: the study's run goes on (its settings as
    ``advisor tune`` logged them are left as they are)."""
    settings = {"study": study.name, "confirmed_by": "advisor confirm", "advisor_version": VERSION}
    return StudyLog(study.name, settings, _hardware(study.attrs.get("hardware") or {}), job="confirmation")


def study_log(plan: StudyPlan) -> StudyLog:
    o, metric = plan.options, plan.workload.metric_spec
    settings = {"study": plan.study_name, "workload_path": str(plan.workload.path), "workload": o.workload,
                "space": plan.space.name, "trials": str(o.trials), "max_metric_drop": o.drop_text,
                "memory_cap_bytes": str(o.memory_cap or ""), "metric": metric.name,
                "metric_direction": metric.direction_word, "train_samples": str(plan.settings.train_samples),
                "seed": str(o.seed), "sampler": o.sampler, "train": o.train,
                "storage": shown_url(plan.storage_url), "baseline_config": plan.baseline.describe(),
                "advisor_version": VERSION}
    return StudyLog(plan.study_name, settings, _hardware(fingerprint(plan.hardware)))


def trial_log(event: Finished, study: str, metric: MetricSpec) -> TrialLog:
    r, record, vs = event.result, event.record, event.versus
    key = metric_key(metric)
    figures: dict[str, Any] = {"throughput": r.throughput, "peak_memory_bytes": r.peak_memory_bytes,
                               "wall_s": event.wall_s}
    if r.score is not None:
        figures[key] = metric.shown(r.score)
    if vs is not None:
        figures |= {"throughput_ratio": vs.throughput_ratio, "memory_ratio": vs.memory_ratio}
        if vs.metric_delta is not None and r.score is not None:
            figures[f"{key}_delta"] = metric.sign * vs.metric_delta + 0.0
    if record.get(PROBE_WALL) is not None:  # two-stage: the probe, then the training run
        figures["probe_wall_s"] = record.get(PROBE_WALL)
    training = record.get(TRAINING_RUN)
    if isinstance(training, dict):
        figures |= {"training_wall_s": training.get("wall_s"),
                    "training_peak_memory_bytes": training.get("peak_memory_bytes")}
    figures |= {name: getattr(r, name) for name in _TIMING}
    figures |= {f"phase/{phase}_s": seconds for phase, seconds in r.phase_s.items()}
    if record.latency is not None:  # an inference trial's
        figures |= latency_metrics(record.latency)
    tags = {"advisor.study": study, "advisor.trial": str(event.number), "state": record.state,
            "baseline": str(record.baseline).lower(), "config": event.config.describe()}
    if record.state == "complete":
        tags["feasible"] = str(record.feasible).lower()
        if not record.feasible:
            tags["infeasible"] = infeasible_text(record.constraints, vs, metric, record.latency)
    if not r.ok:
        tags |= {"failure_class": str(r.failure_class), "skipped": str(r.skipped).lower(),
                 "failure_message": (r.failure_message or "")[:MESSAGE_LIMIT]}
    for name, value in (("training_skipped", record.get(TRAINING_SKIPPED)),
                        ("metric_reused_from", record.get(METRIC_REUSED)),
                        ("trained_as", record.get(SAME_RUN)),
                        ("early_stop", (record.get(EARLY_STOP) or {}).get("reason"))):
        if value is not None:
            tags[name] = first_line(str(value), MESSAGE_LIMIT)
    name = f"trial {event.number}{' (baseline)' if record.baseline else ''}: {event.config.describe()}"
    ended = record.finished_at
    return TrialLog(event.number, name, r.ok, event.config.to_dict(), finite(figures), tags,
                    ended - event.wall_s if ended is not None else None, ended)


def latency_metrics(latency: Latency) -> dict[str, Any]:
    """An inference trial's per-request latency as metrics, in ms (``advisor.core.latency``):
    p50 / p95 / p99 at its batch size, and at batch 1 when it was measured."""
    return {"latency/p50_ms": latency.p50_ms, "latency/p95_ms": latency.p95_ms, "latency/p99_ms": latency.p99_ms,
            "latency/batch_size": latency.batch_size, "latency/calls": latency.calls,
            "latency/batch1_ms": latency.batch1_ms, "latency/batch1_p99_ms": latency.batch1_p99_ms}


def baseline_metrics(figures: Figures, metric: MetricSpec) -> dict[str, float]:
    return finite({"baseline/throughput": figures.throughput, "baseline/peak_memory_bytes": figures.peak_memory_bytes,
                   f"baseline/{metric_key(metric)}": metric.shown(figures.score)})


def confirmed(c: Confirmation) -> Confirmed:
    values: dict[str, Any] = {"pairs": len(c.pairs)}
    for name, interval in (("throughput", c.throughput), ("memory", c.memory)):
        if interval is not None:
            values |= {f"{name}_ratio": interval.center, f"{name}_low": interval.low, f"{name}_high": interval.high}
    tags = {"confirmation": c.status} | ({"confirmation_note": first_line(c.note, MESSAGE_LIMIT)} if c.note else {})
    return Confirmed(c.trial, len(c.pairs), {f"confirmed/{k}": v for k, v in finite(values).items()}, tags)


def end_log(study: StoredStudy, status: str, stop_reason: str | None, baseline_logged: bool) -> EndLog:
    metric = study.metric
    tally = counts(study)
    metrics = {"trials/run": tally["trials"], "trials/completed": tally["completed"],
               "trials/failed": tally["failed"], "trials/probed_only": tally["probed_only"]}
    base = study.baseline
    if not baseline_logged and base is not None and base.figures is not None:  # a resumed study's
        metrics |= baseline_metrics(base.figures, metric)
    front = []
    for row in front_rows(study):
        if not row.on_front:
            continue
        r, vs, f = row.record, row.versus, row.figures
        entry = {"trial": r.number, "config": r.description, "baseline": r.baseline, "throughput": f.throughput,
                 "peak_memory_bytes": f.peak_memory_bytes, metric_key(metric): metric.shown(f.score),
                 "throughput_ratio": vs.throughput_ratio, "memory_ratio": vs.memory_ratio,
                 "confirmed": vs.confirmed, "pairs": vs.pairs}
        if vs.throughput_interval is not None and vs.memory_interval is not None:
            entry |= {"throughput_interval": list(vs.throughput_interval),
                      "memory_interval": list(vs.memory_interval)}
        if r.latency is not None:  # an inference study's
            entry |= {"latency_p99_ms": r.latency.p99_ms, "latency_batch1_ms": r.latency.batch1_ms}
        front.append({k: _plain(v) for k, v in entry.items()})
    metrics["front_size"] = len(front)
    tags = {"front": ", ".join(str(row["trial"]) for row in front) or "none", "status": status}
    if stop_reason:
        tags["stopped"] = first_line(stop_reason, MESSAGE_LIMIT)
    return EndLog(status, finite(metrics), tags, front)

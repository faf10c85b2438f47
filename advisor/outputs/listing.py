"""``advisor studies`` and ``advisor trials``: what a storage holds, one line per study,
and one study's trials, one line per trial. Each line is built once from the stored
records (``advisor.core.stored``) into a typed row; the table and ``--json`` format it."""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from advisor.core.caveats import legend, mark
from advisor.core.config import TrialConfig
from advisor.core.latency import fmt_ms
from advisor.core.metric import MetricSpec
from advisor.core.objectives import METRIC_DROP, Versus
from advisor.core.stored import (
    DISTURBED_BASELINE_NOTE,
    MAX_METRIC_DROP,
    METRIC_REUSED,
    SAME_RUN,
    SEED_CONFIG,
    StoredStudy,
    TrialRecord,
)
from advisor.core.units import first_line, fmt_bytes, fmt_rate

# the states of TrialRecord, in the order they are listed
STATES = ("complete", "probed", "failed", "skipped", "duplicate", "running", "waiting")
# a state as a reader sees it: a waiting trial is a one-knob seed or combination the study
# queued and had no budget left for (it runs first when the study resumes)
SHOWN = {"waiting": "queued (runs on resume)"}
CUT_SHORT = "cut short"  # a failed trial that does not count (Ctrl-C, a killed driver, a lost node): it runs again
_ORDER = (*STATES[:3], CUT_SHORT, *STATES[3:])


def _state(r: TrialRecord) -> str:
    """A trial's state as the listings show it: a failure that is not the configuration's
    (cancelled, interrupted, its node lost) is "cut short", as tune and the report count it."""
    return CUT_SHORT if r.state == "failed" and not r.counted else r.state


def _local(when: float | None) -> _dt.datetime | None:
    return _dt.datetime.fromtimestamp(when).astimezone() if when is not None else None


def _iso(when: _dt.datetime | None) -> str | None:
    return when.isoformat(timespec="seconds") if when is not None else None


def _short(when: _dt.datetime | None) -> str:
    return when.strftime("%Y-%m-%d %H:%M") if when is not None else "-"


@dataclass(frozen=True)
class StudyLine:
    """One stored study: what it tuned, how its trials ended, when it ran."""

    study: StoredStudy
    started: _dt.datetime | None  # its first trial's start (Optuna keeps no creation time)

    @property
    def states(self) -> dict[str, int]:
        """Trials by state (TrialRecord.state), in STATES order, states with none left out."""
        tally = Counter(_state(r) for r in self.study.records)
        return {s: tally[s] for s in _ORDER if tally[s]}

    @property
    def last_finished(self) -> _dt.datetime | None:
        times = [r.finished_at for r in self.study.records if r.finished_at is not None]
        return _local(max(times)) if times else None

    @property
    def metric(self) -> MetricSpec:
        return self.study.metric

    def to_dict(self) -> dict[str, Any]:
        a = self.study.attrs
        return {"study": self.study.name, "model": a.get("workload_path"), "workload": a.get("workload", "train"),
                "space": a.get("space_name"), "trials": len(self.study.records),
                "counted": sum(r.counted for r in self.study.records), "states": self.states,
                "started": _iso(self.started), "last_finished": _iso(self.last_finished),
                "metric": self.metric.to_dict(), "objectives": {"throughput": "maximize",
                                                                "peak_memory_bytes": "minimize",
                                                                self.metric.name: "maximize" if
                                                                self.metric.higher_is_better else "minimize"},
                "max_metric_drop": a.get(MAX_METRIC_DROP), "max_drop_relative": bool(a.get("max_drop_relative")),
                "memory_cap_bytes": a.get("memory_cap_bytes"), "max_latency_ms": a.get("max_latency_ms"),
                "baseline": self.study.baseline is not None}


def study_line(study: StoredStudy, started: _dt.datetime | None) -> StudyLine:
    """``started``: Optuna's study summary's ``datetime_start`` (naive local time) or None."""
    return StudyLine(study, started.astimezone() if started is not None else None)


def studies_table(lines: list[StudyLine], where: str) -> Any:
    """A rich Table of the studies in storage ``where``."""
    from rich.table import Table

    table = Table(title=f"Studies in {where}", title_justify="left")
    for name, justify in (("study", "left"), ("model", "left"), ("space", "left"), ("trials", "right"),
                          ("by state", "left"), ("started", "left"), ("last finished", "left"), ("metric", "left")):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for line in lines:
        a = line.study.attrs
        workload = a.get("workload", "train")
        model = str(a.get("workload_path") or "-") + ("" if workload == "train" else f" ({workload})")
        _row(table, [line.study.name, model, str(a.get("space_name") or "-"), str(len(line.study.records)),
                     ", ".join(f"{n} {SHOWN.get(state, state)}" for state, n in line.states.items()) or "none yet",
                     _short(line.started), _short(line.last_finished),
                     f"{line.metric.name} ({line.metric.direction_word})"])
    return table


@dataclass(frozen=True)
class TrialLine:
    """One trial of a study, against the study's baseline (ratios None without one)."""

    record: TrialRecord
    versus: Versus
    metric: MetricSpec

    @property
    def measured(self) -> tuple[float, float] | None:
        """(throughput, peak memory): a completed trial's, or a probed one's probe."""
        return self.record.probe

    @cached_property
    def config(self) -> TrialConfig | None:
        """The trial's configuration; a queued seed's, before it runs (as the table shows it)."""
        queued = self.record.get(SEED_CONFIG) if self.record.state == "waiting" and self.record.config is None \
            else None
        return TrialConfig.from_dict(queued) if isinstance(queued, dict) else self.record.config

    @cached_property
    def caveats(self) -> list[Any]:
        """What makes its measured speed less sure (a busy machine, an unsettled timing)."""
        return self.record.caveats if self.measured else []

    @property
    def metric_value(self) -> float | None:
        f = self.record.figures
        return self.metric.shown(f.score) if f is not None else None

    def to_dict(self) -> dict[str, Any]:
        r, measured = self.record, self.measured
        return {"trial": r.number, "state": r.state, "baseline": r.baseline,
                "config": self.config.to_dict() if self.config is not None else None,
                "description": self.config.describe() if self.config is not None else "",
                "throughput": measured[0] if measured else None,
                "peak_memory_bytes": measured[1] if measured else None,
                "metric_value": self.metric_value,
                "feasible": r.feasible if r.state == "complete" else None,
                "vs_baseline": self.versus.to_dict() if self.versus.throughput_ratio is not None else None,
                "failure_class": r.failure_class, "failure_message": r.failure_message,
                "duplicate_of": r.duplicate_of, "finished": _iso(_local(r.finished_at)),
                # why its samples/s may read wrong (advisor.core.caveats): [{"kind": "busy", "text": ...}]
                "speed_caveats": [c.to_dict() for c in self.caveats],
                # its metric another trial's (the same training numerics): reused from it, or trained as it
                "metric_reused_from": r.get(METRIC_REUSED), "trained_as": r.get(SAME_RUN),
                # an inference trial's per-request latency (advisor.core.latency); None for training
                "latency": r.latency.to_dict() if r.latency is not None else None}


def trial_lines(study: StoredStudy) -> list[TrialLine]:
    """Every trial of ``study`` by number. A duplicate's line is its earlier trial's
    configuration with no figures of its own: the copy stored when it was proposed goes stale
    once the earlier trial learns more (more seeds, a new verdict), so its row points there."""
    by_number = {r.number: r for r in study.records}

    def line(r: TrialRecord) -> TrialLine:
        earlier = by_number.get(r.duplicate_of) if r.duplicate_of is not None else None
        if earlier is None:
            return TrialLine(r, study.versus_baseline(r), study.metric)
        shown = replace(r, config=earlier.config, figures=None, constraints={}, attrs={})  # no figure, no latency
        return TrialLine(shown, Versus(None, None, None), study.metric)
    return [line(r) for r in sorted(study.records, key=lambda r: r.number)]


def trials_table(study: StoredStudy, lines: list[TrialLine]) -> Any:
    """A rich Table of a study's trials (ratios to the baseline when it has one)."""
    from rich.table import Table

    metric = study.metric
    has_base = study.baseline is not None
    reference = study.shown_baseline_reference  # a disturbed first run: the reference its ratios are to
    table = Table(title=f"Trials of {study.name}", title_justify="left",
                  caption=("Ratios are to the baseline: confirmed in pairs with the 95% interval, else unconfirmed "
                           "(one trial against the baseline as measured by then). " if has_base else
                           "No completed baseline: no ratios. ") + (
                      f"{DISTURBED_BASELINE_NOTE}. " if reference else "")
                  + f"{metric.name}: {metric.direction_word}",
                  caption_justify="left")
    columns = [("trial", "right"), ("state", "left"), ("configuration", "left"), ("samples/s", "right"),
               ("peak memory", "right"), (metric.name, "right")]
    if has_base:
        columns += [("speed vs base", "right"), ("memory vs base", "right"), (metric.delta_header, "right")]
    latency = any(line.record.latency is not None for line in lines)  # an inference study's
    if latency:
        columns += [("p50 / p99 latency", "right"), ("batch 1", "right")]
    columns += [("failure / note", "left")]
    rows = []
    base_speed = study.shown_throughput(study.baseline) if study.baseline is not None else None
    kinds: set[str] = set()  # of the caveats the rows show, for the legend
    for line in lines:
        r, measured = line.record, line.measured
        state = SHOWN.get(r.state, _state(r)) + (f" of {r.duplicate_of}" if r.duplicate_of is not None else "")
        if r.state == "complete" and not r.feasible:  # as tune's line says it: undecided is infeasible only for now
            undecided = line.versus.verdict is not None and line.versus.verdict.noise_known and \
                not line.versus.verdict.decided and set(k for k, v in r.constraints.items() if v > 0) == {METRIC_DROP}
            state += " (counted infeasible for now: undecided)" if undecided else " (infeasible)"
        description = line.config.describe() if line.config is not None else ""
        shown_reference = bool(r.baseline and reference)  # its row shows the reference, not its disturbed run
        caveats = [] if shown_reference else line.caveats
        speed = reference if shown_reference else measured[0] if measured else None
        cells = [f"{r.number}{' (baseline)' if r.baseline else ''}", state, description,
                 fmt_rate(speed) + mark(caveats) if speed else "-",
                 fmt_bytes(measured[1]) if measured else "-",
                 metric.value_text(r.figures.score) if r.figures is not None else "-"]
        if has_base:
            thr, mem, _ = line.versus.cells()
            cells += [thr, mem, line.versus.metric_text(metric)]
        if latency:
            lat = r.latency
            cells += [f"{fmt_ms(lat.p50_ms)} / {fmt_ms(lat.p99_ms)}{lat.mark}" if lat is not None else "-",
                      fmt_ms(lat.batch1_ms) if lat is not None else "-"]
        failure = ""
        if r.failure_class or r.failure_message:
            failure = f"[{r.failure_class or '?'}] {first_line(r.failure_message, 80)}"
        elif caveats:  # the marks' sentences, in this column
            failure = "; ".join(c.text for c in caveats)
        source = r.metric_source(metric.name)  # a review: trials never said which metric was another's
        then = _reference_then(study, line, base_speed)
        failure = "; ".join(x for x in (failure, f"{source} (same training numerics)" if source else "", then) if x)
        rows.append([*cells, failure])
        kinds.update(c.kind for c in caveats)
    if (said := legend(kinds, "the last column says by how much")):
        table.caption = f"{table.caption}. {said}"
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        _row(table, row)
    return table


def _row(table: Any, cells: list[str]) -> None:
    """Cells as plain text: stored texts ("[oom] ...", paths) are not rich markup."""
    from rich.text import Text

    table.add_row(*(Text(c) for c in cells))


def _reference_then(study: StoredStudy, line: TrialLine, shown: float | None) -> str:
    """'ratio to the baseline as measured by then: 4,033 samples/s' for an unconfirmed ratio
    whose reference differs from the baseline's samples/s in the table by more than 5%, so
    that the ratio can be checked by hand ('' otherwise): a review read 3,359 samples/s at
    0.83x beside a baseline of 3,296."""
    r = line.record
    if r.baseline or shown is None or line.versus.confirmed or line.versus.throughput_ratio is None:
        return ""
    then = study.reference_throughput(r)
    if then is None or abs(then / shown - 1) <= 0.05:
        return ""
    return f"ratio to the baseline as measured by then: {fmt_rate(then)} samples/s"

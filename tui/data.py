"""The explorer's view of a stored study: one row per trial, the views, filters, sorting
and Pareto front the screens show. No Textual here, so it is tested on its own."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.metric import DEFAULT_METRIC, MetricSpec
from advisor.core.objectives import Versus, pareto_front
from advisor.core.stored import StoredStudy, TrialRecord, read_study
from advisor.core.units import fmt_bytes, fmt_rate

VIEWS = ("front", "all", "failed")
VIEW_TITLES = {"front": "Pareto front (feasible)", "all": "all trials", "failed": "failed and skipped trials"}
# plottable figures: key -> (label, unit formatter, higher is better)
AXES: dict[str, tuple[str, Any, bool]] = {
    "throughput": ("throughput (samples/s)", fmt_rate, True),
    "memory": ("peak memory (MiB)", fmt_bytes, False),
    "metric": ("metric", lambda v: f"{v:.4f}", True),  # labelled with the study's metric's name
    "step_time": ("step time (ms)", lambda v: f"{1000 * v:.1f} ms", False),
}
SORT_KEYS = ("trial", "throughput", "memory", "metric", "config")
NO_BASELINE = Versus(None, None, None)


@dataclass
class TrialRow:
    """One trial as the explorer shows it: its stored record, against the baseline."""

    record: TrialRecord
    versus: Versus = NO_BASELINE
    on_front: bool = False
    metric: MetricSpec = DEFAULT_METRIC  # the study's metric: its name, and how its scores read
    reference: float | None = None  # the baseline's re-measured samples/s when its first run was disturbed

    @property
    def number(self) -> int:
        return self.record.number

    @property
    def state(self) -> str:
        """complete, probed (two-stage: speed and memory only), failed, skipped, duplicate,
        running or waiting."""
        return self.record.state

    @property
    def config(self) -> TrialConfig:
        return self.record.config or TrialConfig()

    @property
    def attrs(self) -> dict[str, Any]:
        return self.record.attrs

    @property
    def baseline(self) -> bool:
        return self.record.baseline

    @property
    def feasible(self) -> bool:
        return self.record.feasible

    @property
    def constraints(self) -> dict[str, float]:
        return self.record.constraints

    @property
    def throughput(self) -> float | None:
        """Its samples/s (a probed-only trial's too); the baseline's reference, the ratios' own,
        when its first run was disturbed (DISTURBED_BASELINE_NOTE), as every table shows it."""
        if self.reference is not None:
            return self.reference
        probe = self.record.probe
        return probe[0] if probe else None

    @property
    def memory(self) -> float | None:
        probe = self.record.probe
        return probe[1] if probe else None

    @property
    def score(self) -> float | None:
        return self.record.figures.score if self.record.figures else None

    @property
    def description(self) -> str:
        return self.record.description

    @property
    def failure(self) -> str:
        return self.record.failure_class or ""

    @property
    def message(self) -> str:
        return (self.record.failure_message or "").strip()

    @property
    def step_time(self) -> float | None:
        return self.record.get("step_time_median_s")

    def value(self, axis: str) -> float | None:
        if axis == "memory":
            return self.memory / 2**20 if self.memory is not None else None
        if axis == "metric":  # the metric as itself (the stored score is negated when lower is better)
            return self.metric.shown(self.score) if self.score is not None else None
        if axis == "step_time":  # in ms, as its axis reads
            return 1000 * self.step_time if self.step_time is not None else None
        return {"throughput": self.throughput}.get(axis)


@dataclass
class Filters:
    """User filters: the largest drop of the metric (points of a fraction, else an amount
    of it) and a memory cap (bytes)."""

    max_drop_pt: float | None = None
    memory_cap: float | None = None

    def keep(self, row: TrialRow) -> bool:
        delta = row.versus.metric_delta
        scale = 100 if row.metric.fraction else 1  # points of a fraction; else the metric's own amount
        if self.max_drop_pt is not None and (delta is None or -scale * delta > self.max_drop_pt + 1e-9):
            return False
        return self.memory_cap is None or (row.memory is not None and row.memory <= self.memory_cap)

    def describe(self, metric: MetricSpec = DEFAULT_METRIC) -> str:
        parts = []
        if self.max_drop_pt is not None:
            unit = " pt" if metric.fraction else (f" {metric.unit}" if metric.unit else "")
            parts.append(f"{metric.name} drop <= {self.max_drop_pt:g}{unit}")
        if self.memory_cap is not None:
            parts.append(f"memory <= {fmt_bytes(self.memory_cap)}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Loaded:
    """What one read of the storage gave: the study (None until it exists), its rows, and
    the filters the rows' front was marked with."""

    study: StoredStudy | None
    rows: list[TrialRow]
    filters: Filters


class StudyData:
    """Trials of one study, read from storage incrementally.

    ``read()`` does the storage reads and builds new rows without touching what the
    screen shows, so it can run in a worker thread (one at a time); ``apply()`` swaps its
    result in. The Optuna study is opened once and kept: Optuna's cache then asks the
    database only for the trials unfinished at the last read and those added since (a
    finished trial cannot change), and ``read_trial`` builds a finished trial's record
    once. Filters, views and sorting work on the rows in memory and never read storage.
    """

    def __init__(self, storage: Any, name: str) -> None:
        self.storage, self.name = storage, name
        self.rows: list[TrialRow] = []
        self.filters = Filters()
        self.study: StoredStudy | None = None
        self._opened: tuple[Any, Any] | None = None  # (storage, optuna.Study) as last read

    def reload(self) -> None:
        """Read and apply in the calling thread."""
        self.apply(self.read())

    def read(self) -> Loaded:
        """Read what changed in storage and build the rows, the front marked with the
        current filters. Touches nothing the screen shows."""
        study = self._open()
        if study is None:
            return Loaded(None, [], self.filters)  # live: the study is created when Ray is up
        stored = read_study(study)
        reference = stored.shown_baseline_reference
        rows = [TrialRow(r, stored.versus_baseline(r), metric=stored.metric,
                         reference=reference if r.baseline else None) for r in stored.records]
        filters = self.filters
        _mark_front(rows, stored, filters)
        return Loaded(stored, rows, filters)

    def _open(self) -> Any:
        """The Optuna study, opened once per storage; None while it does not exist."""
        import optuna

        if self._opened is not None and self._opened[0] is self.storage:
            return self._opened[1]
        self._opened = None
        if self.storage is None:
            return None
        try:
            self.storage.get_study_id_from_name(self.name)
        except KeyError:
            return None
        study = optuna.load_study(study_name=self.name, storage=self.storage)
        self._opened = (self.storage, study)
        return study

    def apply(self, loaded: Loaded) -> None:
        """Show what ``read()`` gave (its front marked again if the filters changed meanwhile)."""
        self.study, self.rows = loaded.study, loaded.rows
        if loaded.filters != self.filters:
            self._mark_front()

    @property
    def attrs(self) -> dict[str, Any]:
        """The study's attributes as last read ({} until it exists)."""
        return self.study.attrs if self.study is not None else {}

    @property
    def baseline(self) -> TrialRow | None:
        return next((r for r in self.rows if r.baseline and r.state == "complete"), None)

    def _mark_front(self) -> None:
        _mark_front(self.rows, self.study, self.filters)

    def set_filters(self, filters: Filters) -> None:
        self.filters = filters
        self._mark_front()

    def view(self, name: str, sort: str = "trial", reverse: bool = False) -> list[TrialRow]:
        if name == "front":
            rows = [r for r in self.rows if r.on_front or (r.baseline and r.state == "complete")]
        elif name == "all":
            rows = [r for r in self.rows if r.state in ("complete", "probed", "failed", "running")
                    and (r.state != "complete" or self.filters.keep(r))]
        else:
            rows = [r for r in self.rows if r.state in ("failed", "skipped")]
        return sorted(rows, key=lambda r: _sort_key(r, sort), reverse=reverse)

    def counts(self) -> dict[str, int]:
        states = [r.state for r in self.rows]
        return {"complete": states.count("complete"), "probed": states.count("probed"), "failed": states.count("failed"),
                "skipped": states.count("skipped"), "running": states.count("running"),
                "front": sum(r.on_front for r in self.rows),
                "infeasible": sum(1 for r in self.rows if r.state == "complete" and not r.feasible)}


def _mark_front(rows: list[TrialRow], study: StoredStudy | None, filters: Filters) -> None:
    """Non-dominated among the feasible completed trials that pass the filters, decided
    as the stored front is (ratios to the baseline, confirmed where they were; the
    metric's noise as epsilon)."""
    pool = [r for r in rows if r.state == "complete" and r.feasible and filters.keep(r)]
    if study is None:
        front: set[int] = set()
    else:
        relative = {r.number: study.relative_figures(r.record) for r in pool}
        front = {r.number for r in pareto_front(pool, lambda r: relative[r.number], study.epsilon)}
    for row in rows:
        row.on_front = row.number in front


def _sort_key(row: TrialRow, key: str) -> Any:
    if key == "config":
        return row.description
    if key == "trial":
        return row.number
    value = {"throughput": row.throughput, "memory": row.memory, "metric": row.score}[key]
    return -math.inf if value is None else value

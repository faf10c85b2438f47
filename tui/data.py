"""The explorer's view of a stored study: one row per trial, the views, filters, sorting
and Pareto front the screens show. No Textual here, so it is tested on its own."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from advisor import storage as st
from advisor.report import describe_config, fmt_bytes, fmt_rate

VIEWS = ("front", "all", "failed")
VIEW_TITLES = {"front": "Pareto front (feasible)", "all": "all trials", "failed": "failed and skipped trials"}
# plottable figures: key -> (label, unit formatter, higher is better)
AXES: dict[str, tuple[str, Any, bool]] = {
    "throughput": ("throughput (samples/s)", fmt_rate, True),
    "memory": ("peak memory (MiB)", fmt_bytes, False),
    "accuracy": ("accuracy", lambda v: f"{v:.4f}", True),
    "step_time": ("step time (ms)", lambda v: f"{1000 * v:.1f} ms", False),
}
SORT_KEYS = ("trial", "throughput", "memory", "accuracy", "config")


@dataclass
class TrialRow:
    """One trial as the explorer shows it."""

    number: int
    state: str                       # complete, failed, skipped, duplicate, running
    config: dict[str, Any]
    attrs: dict[str, Any]
    throughput: float | None = None
    memory: float | None = None
    accuracy: float | None = None
    feasible: bool = False
    baseline: bool = False
    on_front: bool = False
    throughput_ratio: float | None = None
    memory_ratio: float | None = None
    accuracy_delta: float | None = None
    constraints: dict[str, float] = field(default_factory=dict)

    @property
    def description(self) -> str:
        return describe_config(self.config)

    @property
    def failure(self) -> str:
        return str(self.attrs.get("failure_class") or "")

    @property
    def message(self) -> str:
        return str(self.attrs.get("failure_message") or "").strip()

    @property
    def step_time(self) -> float | None:
        return self.attrs.get("step_time_median_s")

    def value(self, axis: str) -> float | None:
        if axis == "memory" and self.memory is not None:
            return self.memory / 2**20
        return {"throughput": self.throughput, "memory": None, "accuracy": self.accuracy,
                "step_time": self.step_time}.get(axis)

    def summary(self) -> str:
        """'1.52x faster, +2% memory, -0.3 pt accuracy' against the baseline."""
        if self.throughput_ratio is None or self.memory_ratio is None or self.accuracy_delta is None:
            return ""
        speed = (f"{self.throughput_ratio:.2f}x faster" if self.throughput_ratio >= 1
                 else f"{1 / self.throughput_ratio:.2f}x slower")
        return (f"{speed}, {100 * (self.memory_ratio - 1):+.0f}% memory, "
                f"{100 * self.accuracy_delta:+.1f} pt accuracy")


@dataclass
class Filters:
    """User filters: the largest accuracy drop (points) and a memory cap (bytes)."""

    max_drop_pt: float | None = None
    memory_cap: float | None = None

    def keep(self, row: TrialRow) -> bool:
        if self.max_drop_pt is not None and (row.accuracy_delta is None
                                             or -100 * row.accuracy_delta > self.max_drop_pt + 1e-9):
            return False
        return self.memory_cap is None or (row.memory is not None and row.memory <= self.memory_cap)

    def describe(self) -> str:
        parts = []
        if self.max_drop_pt is not None:
            parts.append(f"accuracy drop <= {self.max_drop_pt:g} pt")
        if self.memory_cap is not None:
            parts.append(f"memory <= {fmt_bytes(self.memory_cap)}")
        return ", ".join(parts)


class StudyData:
    """Trials of one study, reloaded from storage on demand."""

    def __init__(self, storage: Any, name: str) -> None:
        self.storage, self.name = storage, name
        self.rows: list[TrialRow] = []
        self.attrs: dict[str, Any] = {}
        self.filters = Filters()

    def reload(self) -> None:
        import optuna

        if self.storage is None or self.name not in st.study_names(self.storage):
            self.rows, self.attrs = [], {}  # live: the study is created when Ray is up
            return
        study = optuna.load_study(study_name=self.name, storage=self.storage)
        self.attrs = dict(study.user_attrs)
        self.rows = [_row(t) for t in study.get_trials(deepcopy=False)]
        base = self.baseline
        for row in self.rows:
            if base is not None and row.throughput is not None and base.throughput:
                row.throughput_ratio = row.throughput / base.throughput
                row.memory_ratio = row.memory / base.memory if base.memory else None
                row.accuracy_delta = row.accuracy - base.accuracy
        self._mark_front()

    @property
    def baseline(self) -> TrialRow | None:
        return next((r for r in self.rows if r.baseline and r.state == "complete"), None)

    def _mark_front(self) -> None:
        """Non-dominated among the feasible completed trials that pass the filters."""
        pool = [r for r in self.rows if r.state == "complete" and r.feasible and self.filters.keep(r)]
        for row in self.rows:
            row.on_front = row in pool and not any(_dominates(o, row) for o in pool if o is not row)

    def set_filters(self, filters: Filters) -> None:
        self.filters = filters
        self._mark_front()

    def view(self, name: str, sort: str = "trial", reverse: bool = False) -> list[TrialRow]:
        if name == "front":
            rows = [r for r in self.rows if r.on_front or (r.baseline and r.state == "complete")]
        elif name == "all":
            rows = [r for r in self.rows if r.state in ("complete", "failed", "running")
                    and (r.state != "complete" or self.filters.keep(r))]
        else:
            rows = [r for r in self.rows if r.state in ("failed", "skipped")]
        return sorted(rows, key=lambda r: _sort_key(r, sort), reverse=reverse)

    def counts(self) -> dict[str, int]:
        states = [r.state for r in self.rows]
        return {"complete": states.count("complete"), "failed": states.count("failed"),
                "skipped": states.count("skipped"), "running": states.count("running"),
                "front": sum(r.on_front for r in self.rows),
                "infeasible": sum(1 for r in self.rows if r.state == "complete" and not r.feasible)}


def _row(t: Any) -> TrialRow:
    u = t.user_attrs
    if "duplicate_of" in u:
        state = "duplicate"
    elif u.get("skipped"):
        state = "skipped"
    elif t.state.name == "COMPLETE":
        state = "complete"
    elif t.state.name == "RUNNING":
        state = "running"
    else:
        state = "failed"
    row = TrialRow(number=t.number, state=state, config=u.get("config", {}), attrs=u,
                   baseline=bool(u.get("baseline")), constraints=dict(t.constraints or {}))
    if state == "complete" and t.values:
        row.throughput, row.memory, row.accuracy = t.values
        row.feasible = all(v <= 0 for v in row.constraints.values())
    return row


def _dominates(a: TrialRow, b: TrialRow) -> bool:
    ge = (a.throughput >= b.throughput, a.memory <= b.memory, a.accuracy >= b.accuracy)  # type: ignore[operator]
    gt = (a.throughput > b.throughput, a.memory < b.memory, a.accuracy > b.accuracy)  # type: ignore[operator]
    return all(ge) and any(gt)


def _sort_key(row: TrialRow, key: str) -> Any:
    if key == "config":
        return row.description
    if key == "trial":
        return row.number
    value = {"throughput": row.throughput, "memory": row.memory, "accuracy": row.accuracy}[key]
    return -math.inf if value is None else value

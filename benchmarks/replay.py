"""A trial executor that answers from a recorded grid (benchmarks/record_grid.py) instead
of running anything, so a whole study replays in well under a second of trial time. It
satisfies advisor.runner.executor.Executor, as RayExecutor does, and plugs into the same
Tuner:

    tuner = Tuner(plan_study(options), executor=ReplayExecutor(grid, seed=0))

Each answer is one of the cell's recorded repeats, drawn with the seed; a configuration
outside the grid is an error (the replayed space must be the recorded one). A grid
recorded with ``--parts`` answers each part of two-stage evaluation from its own
recording (a probe from ``probes``, a training run from ``accuracy_runs``, applying the
payload's early-stop gate to the recorded learning curve), and a full trial from ``runs``.

The executor keeps a clock: each answer advances it by the recorded wall time of what was
asked (a training run the gate stops, by the fraction it trained), one part at a time
as the recordings were made. ``finished_at`` maps each trial number to the clock when its
last part came back: a study's progress against the time it would have taken.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialResult


@dataclass
class Grid:
    """The recorded table: configuration key -> list of recorded runs."""

    doc: dict[str, Any]
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    parts: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # key -> probe / training runs

    @classmethod
    def load(cls, path: str | Path) -> Grid:
        doc = json.loads(Path(path).read_text())
        grid = cls(doc)
        for cell in doc["cells"]:
            key = TrialConfig.from_dict(cell["config"]).key()
            grid.runs[key] = cell["runs"]
            if "probes" in cell:
                grid.parts[key] = {"probe": cell["probes"], "training": cell["accuracy_runs"]}
        return grid

    def median(self, key: str) -> tuple[float, float, float] | None:
        """The cell's median (throughput, memory, accuracy), None when no repeat succeeded."""
        ok = [r for r in self.runs[key] if r["ok"]]
        if not ok:
            return None
        return (statistics.median(r["throughput"] for r in ok), statistics.median(r["peak_memory_bytes"] for r in ok),
                statistics.median(r["accuracy"] for r in ok))


@dataclass
class _Answer:
    number: int
    result: TrialResult
    submitted: float = 0.0


class ReplayExecutor:
    """Answers trials from ``grid``; ``seed`` picks which recorded repeat each answer is."""

    def __init__(self, grid: Grid, seed: int = 0) -> None:
        self.grid, self.rng = grid, random.Random(seed)
        self.calls = 0
        self.clock = 0.0  # seconds of recorded wall time answered so far
        self.finished_at: dict[int, float] = {}
        self.device, self.slots, self.startup_s = "cpu", 1, 0.0
        self.resources: dict[str, Any] = {"num_cpus": 0}

    def submit(self, number: int, payload: TrialPayload) -> _Answer:
        import time

        key = payload.config.key()
        if key not in self.grid.runs:
            raise KeyError(f"configuration not in the recorded grid: {payload.config.to_dict()}")
        self.calls += 1
        part = payload.settings.part
        cell = self.grid.parts.get(key, {})
        if part in ("probe", "training") and part in cell:
            result, wall = self._part(part, self.rng.choice(cell[part]), payload.gate)
        else:
            run = self.rng.choice(self.grid.runs[key])
            wall = run.get("wall_s", 0.0)
            if run["ok"]:
                result = TrialResult(ok=True, throughput=run["throughput"], peak_memory_bytes=run["peak_memory_bytes"],
                                     score=run["accuracy"], step_time_median_s=run.get("step_time_median_s"),
                                     step_time_iqr_s=run.get("step_time_iqr_s"),
                                     phase_s={"train": run.get("compute_s", 0.0)})
            else:
                result = TrialResult.failed(run["failure_class"], "replayed failure")
        self.clock += wall
        if number < 1_000_000:  # a study's trial (not a confirmation or watch measurement)
            self.finished_at[number] = self.clock
        return _Answer(number, result, time.monotonic())

    @staticmethod
    def _part(part: str, run: dict[str, Any], gate_data: Any) -> tuple[TrialResult, float]:
        from advisor.core.two_stage import Gate

        wall = run.get("wall_s", 0.0)
        if not run["ok"]:
            return TrialResult.failed(run["failure_class"], "replayed failure"), wall
        if part == "probe":
            return TrialResult(ok=True, throughput=run["throughput"], peak_memory_bytes=run["peak_memory_bytes"],
                               step_time_median_s=run.get("step_time_median_s"),
                               step_time_iqr_s=run.get("step_time_iqr_s"), phase_s={"timing": run.get("compute_s", 0.0)},
                               telemetry={"fingerprint": run.get("fingerprint")}), wall
        curve, gate = run.get("curve") or [], Gate.from_dict(gate_data)
        stop, score = None, run["accuracy"]
        behind_before = False
        for i, point in enumerate(curve if gate is not None else []):
            reason = gate.verdict(i, point["metric"], point["loss"], behind_before)
            behind_before = gate.behind(i, point["metric"]) is not None
            if reason:
                fraction = point["samples"] / max(1, run.get("train_samples") or point["samples"])
                stop = {"samples": point["samples"], "fraction": fraction, "reason": reason, "baseline_metric": None}
                score, wall = point["metric"], wall * fraction
                break
        return TrialResult(ok=True, score=score, train_samples=run.get("train_samples") or 0,
                           phase_s={"train": run.get("compute_s", 0.0)},
                           telemetry={"curve": curve, "early_stop": stop,
                                      "initial_loss": run.get("initial_loss")}), wall

    def wait(self, running: Sequence[Any], timeout: float) -> list[tuple[Any, TrialResult]]:
        return [(r, r.result) for r in running]

    def cancel(self, running: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

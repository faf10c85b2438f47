"""A trial executor that answers from a recorded grid (benchmarks/record_grid.py) instead
of running anything, so a whole study replays in well under a second of trial time. It
satisfies advisor.runner.executor.Executor, as RayExecutor does, and plugs into the same
Tuner:

    tuner = Tuner(plan_study(options), executor=ReplayExecutor(grid, seed=0))

Each answer is one of the cell's recorded repeats, drawn with the seed; a configuration
outside the grid is an error (the replayed space must be the recorded one).
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

    @classmethod
    def load(cls, path: str | Path) -> Grid:
        doc = json.loads(Path(path).read_text())
        grid = cls(doc)
        for cell in doc["cells"]:
            grid.runs[TrialConfig.from_dict(cell["config"]).key()] = cell["runs"]
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
        self.device, self.slots, self.startup_s = "cpu", 1, 0.0
        self.resources: dict[str, Any] = {"num_cpus": 0}

    def submit(self, number: int, payload: TrialPayload) -> _Answer:
        import time

        key = payload.config.key()
        if key not in self.grid.runs:
            raise KeyError(f"configuration not in the recorded grid: {payload.config.to_dict()}")
        self.calls += 1
        run = self.rng.choice(self.grid.runs[key])
        if run["ok"]:
            result = TrialResult(ok=True, throughput=run["throughput"], peak_memory_bytes=run["peak_memory_bytes"],
                                 accuracy=run["accuracy"], step_time_median_s=run.get("step_time_median_s"),
                                 step_time_iqr_s=run.get("step_time_iqr_s"), phase_s={"train": run.get("compute_s", 0.0)})
        else:
            result = TrialResult.failed(run["failure_class"], "replayed failure")
        return _Answer(number, result, time.monotonic())

    def wait(self, running: Sequence[Any], timeout: float) -> list[tuple[Any, TrialResult]]:
        return [(r, r.result) for r in running]

    def cancel(self, running: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

"""``advisor measure``: measure an exported config again, in fresh trials on this machine,
and compare with the figures stored when it was recommended."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from advisor.core.config import TrialConfig
from advisor.core.errors import ConfigError, TrialFailed
from advisor.core.export_format import read_export
from advisor.core.objectives import ratio
from advisor.core.results import TrialPayload, TrialResult, TrialSettings, check_workload_kind, default_train_samples
from advisor.core.units import fmt_bytes, fmt_rate
from advisor.machine.hardware import detect, fingerprint
from advisor.runner.executor import run_one
from advisor.runner.ray_executor import RayExecutor
from advisor.techniques.rules import refusal
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

MEMORY_TOLERANCE = 0.02
FIGURES = (("throughput", "samples/s"), ("peak_memory_bytes", "bytes"), ("accuracy", "metric"))


@dataclass
class Remeasured:
    """The stored figures, each repeat's result and the comparison."""

    config: TrialConfig
    document: dict[str, Any]
    runs: list[TrialResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def stored(self) -> dict[str, Any]:
        measured = self.document.get("measured")
        return measured if isinstance(measured, dict) else {}

    def figure(self, key: str) -> dict[str, Any]:
        """Median, range and spread of one figure over the repeats, and the stored value."""
        values = [getattr(r, key) for r in self.runs if r.ok]
        stored = self.stored.get(key)
        out: dict[str, Any] = {"stored": stored if isinstance(stored, (int, float)) else None, "values": values}
        if not values:
            return out
        low, high = min(values), max(values)
        if key == "throughput":  # each run's own timing spread widens the range
            rel = [r.step_time_iqr_s / r.step_time_median_s for r in self.runs
                   if r.ok and r.step_time_iqr_s is not None and r.step_time_median_s]
            widen = max(rel, default=0.0)
            low, high = low * (1 - widen), high * (1 + widen)
        elif key == "peak_memory_bytes":  # a process's peak varies by about 2% from run to run
            low, high = low * (1 - MEMORY_TOLERANCE), high * (1 + MEMORY_TOLERANCE)
        out.update(median=statistics.median(values), low=low, high=high)
        if out["stored"] is not None:
            out["within"] = low <= out["stored"] <= high
            relative = ratio(out["median"], out["stored"])
            out["difference"] = (out["median"] - out["stored"]) if key == "accuracy" else (
                relative - 1 if relative is not None else None)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "source": self.document.get("source"), "notes": self.notes,
                "runs": [r.to_dict() for r in self.runs], "figures": {k: self.figure(k) for k, _ in FIGURES}}


def remeasure(workload_path: str, config_path: str, repeats: int = 3, ray_address: str | None = None,
              trial_timeout: float = 600.0,
              on_run: Callable[[int, TrialResult, float], None] | None = None) -> Remeasured:
    """Run ``repeats`` fresh trials of the exported config, one after another (each alone
    on its devices, as in a study), and return them beside the stored figures.

    Raises:
        ConfigError / WorkloadError: bad config file or model.py (before anything runs).
        TrialFailed: every repeat failed.
    """
    if repeats < 1:
        raise ConfigError(f"--repeats must be at least 1, found {repeats}")
    config, document = read_export(config_path)
    stored_source = document.get("source")
    source: dict[str, Any] = stored_source if isinstance(stored_source, dict) else {}
    kind = check_workload_kind(source.get("workload_kind") or "train", f"{config_path}: source.workload_kind")
    reason = refusal(config, kind)
    if reason:
        raise ConfigError(f"{config_path}: this config cannot run as a {kind} workload: {reason}")
    workload = load_workload(workload_path)
    facts = preflight(workload)
    result = Remeasured(config, document)
    if source.get("workload_sha256") and source["workload_sha256"] != workload.sha256:
        result.notes.append(f"{workload.path} is not the file the config was measured with (its sha256 differs; "
                            f"that was {source.get('workload')}): the figures may differ for that reason")
    hardware = detect()
    here, then = fingerprint(hardware), document.get("hardware") or {}
    if then and any(here.get(k) != then.get(k) for k in ("cpu_model", "cpu_cores", "gpus", "torch_version")):
        result.notes.append("this machine or its torch differs from the one the config was measured on: "
                            "expect different figures")
    train_samples = int(source.get("train_samples") or default_train_samples(facts["train_size"]))
    settings = TrialSettings(train_samples=train_samples if kind == "train" else 1, device=hardware.device,
                             workload=kind)
    executor = RayExecutor(hardware.device, ray_address).start()
    try:
        for i in range(repeats):
            started = time.monotonic()
            outcome = run_one(executor, i, TrialPayload.of(workload, config, settings), trial_timeout)
            result.runs.append(outcome)
            if on_run is not None:
                on_run(i, outcome, time.monotonic() - started)
    finally:
        executor.shutdown()
    if not any(r.ok for r in result.runs):
        first = result.runs[0]
        raise TrialFailed(f"every repeat failed; the first [{first.failure_class}]: {first.failure_message}")
    return result


def comparison_table(result: Remeasured) -> Any:
    """A rich Table: stored figure, re-measured median and range, difference, verdict."""
    from rich.table import Table

    formats = {"throughput": lambda v: f"{fmt_rate(v)}/s", "peak_memory_bytes": fmt_bytes,
               "accuracy": lambda v: f"{v:.4f}"}
    names = {"throughput": "throughput", "peak_memory_bytes": "peak memory", "accuracy": "accuracy"}
    n = sum(r.ok for r in result.runs)
    table = Table("figure", "stored", f"re-measured (median of {n})", "range", "difference", "verdict",
                  title="stored vs measured again on this machine", title_justify="left",
                  caption="range: lowest to highest repeat, widened by the runs' timing spread (throughput) "
                          f"or {100 * MEMORY_TOLERANCE:.0f}% (memory)", caption_justify="left")
    for key, _ in FIGURES:
        f = result.figure(key)
        fmt = formats[key]
        if "median" not in f:
            continue
        stored = "-" if f["stored"] is None else fmt(f["stored"])
        diff = f.get("difference")
        shown = "-" if diff is None else (f"{100 * diff:+.1f} pt" if key == "accuracy" else f"{100 * diff:+.1f}%")
        verdict = "" if "within" not in f else ("within the spread" if f["within"] else "outside the spread")
        table.add_row(names[key], stored, fmt(f["median"]), f"{fmt(f['low'])} – {fmt(f['high'])}", shown, verdict)
    return table

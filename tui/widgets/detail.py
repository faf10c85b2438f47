"""The detail pane: one trial's figures against the baseline, the knobs it changed from the
baseline's configuration, timing spread, telemetry, failure, the hardware it ran on, and
last, under their own heading, the knobs it left as the baseline has them."""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text
from textual.widgets import Static

from advisor.core.config import TrialConfig
from advisor.core.latency import CONSTRAINT as LATENCY_CONSTRAINT
from advisor.core.latency import Latency, fmt_ms
from advisor.core.objectives import METRIC_DROP
from advisor.core.stored import DISTURBED_BASELINE_NOTE, EARLY_STOP, METRIC_REUSED, REUSE_DIFFERENCE, TRAINING_SKIPPED
from advisor.core.units import fmt_bytes, fmt_energy, fmt_rate
from advisor.machine.hardware import describe_fingerprint
from advisor.tui.data import TrialRow


class TrialDetail(Static):
    """Shows the selected trial."""

    def show(self, row: TrialRow | None, study_attrs: dict[str, Any], baseline: TrialConfig | None = None) -> None:
        self.update(describe(row, study_attrs, baseline) if row is not None
                    else Text("no trial selected", style="dim"))


def describe(row: TrialRow, study_attrs: dict[str, Any], baseline: TrialConfig | None = None) -> Text:
    """The pane's text; knobs compared with ``baseline`` (the study's baseline trial's
    configuration; the defaults for the baseline itself or without one)."""
    text = Text()
    title = (f"trial {row.number}" + (" (baseline)" if row.baseline else "")
             + (" — on the front" if row.on_front else ""))
    text.append(title + "\n", style="bold")
    text.append(row.description + "\n", style="cyan")
    u = row.attrs
    if row.state == "complete":
        text.append(f"{fmt_rate(row.throughput)} samples/s, {fmt_bytes(row.memory)} peak, "
                    f"{row.metric.name} {row.metric.value_text(row.score)}\n")  # type: ignore[arg-type]
        if row.versus.summary(row.metric):
            text.append(row.versus.summary(row.metric) + " vs the baseline\n",
                        style="bold green" if row.feasible else "yellow")
        latency = row.record.latency  # an inference trial's per-request latency
        if latency is not None:
            text.append(latency_text(latency) + "\n")
        if not row.feasible:
            names = {METRIC_DROP: f"{row.metric.name} drop", "memory_cap": "memory cap",
                     LATENCY_CONSTRAINT: "p99 latency (ms)"}  # the stored keys
            broken = ", ".join(f"{names.get(k, k)} over by {v:.4g}" for k, v in row.constraints.items() if v > 0)
            text.append(f"infeasible: {broken}\n", style="yellow")
        if u.get(EARLY_STOP):
            stop = u[EARLY_STOP]
            text.append(f"training run stopped at {100 * stop['fraction']:.0f}% of the budget: {stop['reason']}\n",
                        style="yellow")
        if (source := row.record.metric_source(row.metric.name)):
            how = (f"first steps agree within {u.get(REUSE_DIFFERENCE, 0):.1e}" if u.get(METRIC_REUSED) is not None
                   else "judged as the baseline over its seeds")
            text.append(f"{source} (same training numerics: {how})\n", style="dim")
        if u.get("energy_per_sample_j") is not None:
            power = (u.get("telemetry") or {}).get("energy", {}).get("power_w")
            text.append(f"energy {fmt_energy(u['energy_per_sample_j'])}"
                        + (f" (the GPU drew {power:.0f} W over the timed steps)" if power else "") + "\n")
        med, iqr = u.get("step_time_median_s"), u.get("step_time_iqr_s")
        if med:
            spread = f", spread (IQR) {100 * iqr / med:.1f}%" if iqr is not None else ""
            timing = (u.get("telemetry") or {}).get("timing") or {}
            known = f", known to +-{100 * timing['halfwidth']:.1f}%" if timing.get("halfwidth") is not None else ""
            warm = f", {timing['warmup_blocks']} warm-up block(s) cut" if timing.get("warmup_blocks") else ""
            text.append(f"step {1000 * med:.2f} ms median over {u.get('timed_steps', '?')} steps{spread}{known}{warm}\n")
    elif row.state == "probed":
        thr, mem = row.versus.cells()[:2]
        text.append(f"probed: {fmt_rate(row.throughput)} samples/s ({thr}), {fmt_bytes(row.memory)} peak ({mem}) "
                    "vs the baseline\n")
    if row.state in ("complete", "probed"):  # a busy machine, a timing that did not settle (as every view says)
        for caveat in row.record.caveats:
            text.append(f"speed: {caveat.text}\n", style="yellow")
        if row.reference is not None:
            text.append(f"{DISTURBED_BASELINE_NOTE}: {fmt_rate(row.reference)} samples/s\n", style="yellow")
    if row.state == "probed":
        text.append(f"no training run needed: {u.get(TRAINING_SKIPPED)}\n", style="dim")
    elif row.state in ("failed", "skipped"):
        outcome = f"{row.failure} (skipped, not run)" if row.state == "skipped" else row.failure
        text.append(f"{outcome}: ", style="bold red")
        text.append(row.message[-600:] + "\n")
    elif row.state == "duplicate":
        text.append(f"duplicate of trial {u.get('duplicate_of')}\n", style="dim")
    elif row.state != "complete":
        text.append("running\n", style="italic")
    changed, rest = knobs(row, baseline)
    text.append(changed[0] + "\n", style="bold")
    for line in changed[1:]:
        text.append(f"  {line}\n", style="cyan")
    phases = u.get("phase_s") or {}
    if phases or u.get("wall_s"):
        times = ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
        text.append(f"time: {u.get('wall_s', 0):.1f} s wall" + (f" ({times})" if times else "") + "\n")
    if u.get("compile_s"):
        text.append(f"compile: {u['compile_s']:.1f} s\n")
    telemetry = u.get("telemetry") or {}
    if telemetry:
        text.append("telemetry\n", style="bold")
        for key, value in telemetry.items():
            text.append(f"  {key}: {_short(key, value)[:160]}\n")
    hw = study_attrs.get("hardware") or {}
    if hw:
        text.append(f"hardware: {describe_fingerprint(hw)}" + (f", host {u['host']}" if u.get("host") else "") + "\n",
                    style="dim")
    text.append(rest[0] + "\n", style="bold dim")
    text.append(f"  {rest[1]}\n", style="dim")
    return text


def knobs(row: TrialRow, baseline: TrialConfig | None) -> tuple[list[str], list[str]]:
    """(heading, 'knob: baseline's -> this one's' per changed knob) and (heading, the other
    knobs as 'k=v, ...'): against the baseline's configuration, or the defaults for the
    baseline itself (or when the study has none)."""
    against_defaults = row.baseline or baseline is None
    reference = (TrialConfig() if against_defaults else baseline).to_dict()  # type: ignore[union-attr]
    config = row.config.to_dict()
    moved = [k for k, v in config.items() if v != reference.get(k)]
    same = [k for k in config if k not in moved]
    if against_defaults:
        heading = "set apart from the defaults" if moved else "every knob at its default"
        lines = [f"{k}: {json.dumps(config[k])} (default {json.dumps(reference.get(k))})" for k in moved]
        other = f"the other {len(same)} knobs, at their defaults"
    else:
        heading = "changed from the baseline" if moved else "no knob changed from the baseline"
        lines = [f"{k}: {json.dumps(reference.get(k))} -> {json.dumps(config[k])}" for k in moved]
        other = f"the other {len(same)} knobs, as the baseline has them"
    return [heading, *lines], [other, ", ".join(f"{k}={json.dumps(config[k])}" for k in same)]


def latency_text(lat: Latency) -> str:
    """'latency p50 0.52 ms, p95 0.60 ms, p99 0.66 ms (200 calls at batch 64); batch 1 0.096 ms
    (p99 0.134 ms, 50 calls)'."""
    text = (f"latency p50 {fmt_ms(lat.p50_ms)}, p95 {fmt_ms(lat.p95_ms)}, p99 {fmt_ms(lat.p99_ms)} "
            f"({lat.calls} calls at batch {lat.batch_size}); batch 1 ")
    if lat.batch1_ms is None:
        return text + f"not measured ({lat.batch1_note or 'no calls'})"
    return text + f"{fmt_ms(lat.batch1_ms)} (p99 {fmt_ms(lat.batch1_p99_ms)}, {lat.batch1_calls} calls)"


def _short(key: str, value: Any) -> str:
    """A telemetry value in a few characters: sizes in MiB/GiB, floats to 4 digits, dicts as k=v."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_short(k, v)}" for k, v in value.items())
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)) and key.endswith("bytes"):
        return fmt_bytes(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(key, v) for v in value[:8]) + (", ..." if len(value) > 8 else "") + "]"
    return str(value)

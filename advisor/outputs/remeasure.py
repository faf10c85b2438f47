"""``advisor measure``: an exported config measured again on this machine, as a paired
ratio against the baseline run beside it (``advisor.study.confirmation.pairing``: rounds of the
baseline, the config, the baseline again), plus one full run for the metric; compared
with the figures stored when it was recommended."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.errors import ConfigError, TrialFailed
from advisor.core.events import Listener, Note, ignore
from advisor.core.export_format import edited_since_export, read_export
from advisor.core.intervals import ratio_end
from advisor.core.latency import KEY as LATENCY
from advisor.core.latency import Latency, fmt_ms
from advisor.core.metric import DEFAULT_METRIC, MetricSpec
from advisor.core.noise import SentinelJudge
from advisor.core.pairs import DEFAULT_MAX_PAIRS, DEFAULT_TARGET, Confirmation, Interval
from advisor.core.results import TrialPayload, TrialResult, TrialSettings, check_workload_kind, default_train_samples
from advisor.core.stop import Stop
from advisor.core.stored import SCORE_OUT
from advisor.core.units import fmt_bytes, fmt_rate
from advisor.machine.hardware import detect, fingerprint
from advisor.runner.cluster import cluster_hardware
from advisor.runner.executor import run_one
from advisor.runner.ray_executor import RayExecutor
from advisor.study.confirmation.confirm import ConfirmOptions, check_confirm_options
from advisor.study.confirmation.pairing import Candidate, Rounds
from advisor.techniques.registry import preloads
from advisor.techniques.rules import device_conflicts, refusal
from advisor.workload.contract import load_workload
from advisor.workload.downloads import trial_switches
from advisor.workload.preflight import preflight


@dataclass
class Remeasured:
    """The stored figures, today's paired ratios and full run, and the comparison."""

    config: TrialConfig
    baseline: TrialConfig
    document: dict[str, Any]
    confirmation: Confirmation = field(default_factory=lambda: Confirmation(0))
    full_run: TrialResult | None = None
    notes: list[str] = field(default_factory=list)
    metric: MetricSpec = field(default_factory=MetricSpec)  # the workload's metric (scores are compared)

    @property
    def stored(self) -> dict[str, Any]:
        measured = self.document.get("measured")
        return measured if isinstance(measured, dict) else {}

    def ratio(self, key: str) -> dict[str, Any]:
        """``throughput_ratio`` or ``memory_ratio``: today's interval, the stored ratio (and
        its interval when it was confirmed), and whether the stored ratio lies in today's
        interval."""
        now: Interval | None = self.confirmation.throughput if key == "throughput_ratio" else self.confirmation.memory
        vs = self.stored.get("vs_baseline") or {}
        span = vs.get("throughput_interval" if key == "throughput_ratio" else "memory_interval")
        out: dict[str, Any] = {"now": now.to_dict() if now else None, "stored": vs.get(key),
                               "stored_confirmed": bool(vs.get("confirmed")), "stored_interval": span}
        if now is not None and isinstance(vs.get(key), (int, float)):
            out["stored_within_now"] = now.low <= vs[key] <= now.high
            if span and span[1] is not None:
                out["intervals_overlap"] = now.low <= span[1] and span[0] <= now.high
        return out

    def metric_figures(self) -> dict[str, Any]:
        """The metric's score as exported and as the full run measured it now: the study's
        run at its seed (``seed_score``), which the full run repeats, where the export has it;
        else the exported score (a seed mean where the trial trained with more seeds: a
        review read -7.5 pt of one run against a three-seed mean)."""
        stored = self.stored.get("seed_score", self.stored.get(SCORE_OUT))
        now = self.full_run.score if self.full_run is not None and self.full_run.ok else None
        out: dict[str, Any] = {"stored": stored, "now": now, "same_seed": "seed_score" in self.stored}
        if isinstance(stored, (int, float)) and now is not None:
            out["difference"] = now - stored
        return out

    def latency_figures(self) -> dict[str, Any] | None:
        """An inference config's p99 latency at its batch size as exported and as the full run
        measured it now (one run each: no interval), with their ratio; None when neither
        has one (a training config, or --no-metric). A review's `advisor measure` of an
        inference export showed no latency at all."""
        stored = Latency.from_dict(self.stored.get("latency"))
        run = self.full_run
        now = Latency.from_dict(run.telemetry.get(LATENCY)) if run is not None and run.ok else None
        if stored is None and now is None:
            return None
        out: dict[str, Any] = {"stored": stored.to_dict() if stored else None, "now": now.to_dict() if now else None}
        if stored is not None and now is not None and stored.p99_ms > 0:
            out["p99_ratio"] = now.p99_ms / stored.p99_ms
        return out

    def too_noisy(self) -> str | None:
        """What to say when today's throughput interval is too wide to tell the config from
        the baseline (wider than +-50%, or with its ends either side of 1.0 by more than a
        quarter), or None."""
        now = self.confirmation.throughput
        if now is None or now.n < 2 or (now.halfwidth <= 0.5 and not (now.low < 0.8 and now.high > 1.25)):
            return None
        return (f"the throughput interval, {now.text()}, is too wide to tell the config from the baseline: the "
                "timings moved too much between these runs (another load on the machine, clocks, the runs the "
                "noise sentinel discarded). Measure again with more --pairs, or when the machine is quieter")

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "baseline": self.baseline.to_dict(),
                "source": self.document.get("source"), "notes": self.notes, "too_noisy": self.too_noisy(),
                "confirmation": self.confirmation.to_dict(),
                "full_run": self.full_run.to_dict() if self.full_run is not None else None,  # its "score", as documents say it
                "figures": {"throughput_ratio": self.ratio("throughput_ratio"),
                            "memory_ratio": self.ratio("memory_ratio"), SCORE_OUT: self.metric_figures()}
                | ({"latency": lat} if (lat := self.latency_figures()) is not None else {})}


def remeasure(workload_path: str, config_path: str, pairs: int = DEFAULT_MAX_PAIRS, target: float = DEFAULT_TARGET,
              ray_address: str | None = None, trial_timeout: float = 600.0, measure_metric: bool = True,
              on_pair: Callable[[Confirmation, float], None] | None = None, on_event: Listener = ignore) -> Remeasured:
    """Pair the exported config against its baseline (until ``target`` or ``pairs``),
    then (``measure_metric``) run it once in full for its metric.

    Raises:
        ConfigError / WorkloadError: bad config file or model.py (before anything runs).
        TrialFailed: a run of the baseline failed, or every run of the config did.
    """
    check_confirm_options(ConfirmOptions(max_pairs=pairs, target=target))
    config, document = read_export(config_path)
    stored_source = document.get("source")
    source: dict[str, Any] = stored_source if isinstance(stored_source, dict) else {}
    kind = check_workload_kind(source.get("workload_kind") or "train", f"{config_path}: source.workload_kind")
    workload = load_workload(workload_path)
    stored_base = document.get("baseline")
    if isinstance(stored_base, dict):
        baseline = TrialConfig.from_dict(stored_base, where="baseline", source=str(config_path))
        base_note = None
    else:
        baseline = TrialConfig.from_dict(workload.baseline, where="BASELINE", source=str(workload.path))
        base_note = (f"{config_path} names no baseline (written before exports recorded it): the baseline is "
                     f"{workload.path}'s BASELINE")
    for what, c in (("config", config), ("baseline", baseline)):
        reason = refusal(c, kind)
        if reason:
            raise ConfigError(f"{config_path}: this {what} cannot run as a {kind} workload: {reason}")
    facts = preflight(workload, kind)
    result = Remeasured(config, baseline, document, metric=workload.metric_spec)
    if base_note:
        result.notes.append(base_note)
    if (missing := edited_since_export(config, document)) is not None:
        lacks = f": it has no {', '.join(missing)}, so the default" if missing else ""
        result.notes.append(f"{config_path}: its config is not the one trial {source.get('trial')} measured (edited "
                            f"after the export{lacks}): today's figures stand alone, the stored ones are of another "
                            "configuration")
        result.document = {k: v for k, v in document.items() if k != "measured"}
    if source.get("workload_sha256") and source["workload_sha256"] != workload.sha256:
        result.notes.append(f"{workload.path} is not the file the config was measured with (its sha256 differs; "
                            f"that was {source.get('workload')}): the figures may differ for that reason")
    hardware = detect() if not ray_address else cluster_hardware(ray_address)  # where the runs will be
    here, then = fingerprint(hardware), document.get("hardware") or {}
    if then and any(here.get(k) != then.get(k) for k in ("cpu_model", "cpu_cores", "gpus", "torch_version")):
        result.notes.append("this machine or its torch differs from the one the config was measured on: "
                            "expect different figures")
    for what, c in (("config", config), ("baseline", baseline)):
        reason = device_conflicts(c, hardware.device)  # measured on another kind of machine
        if reason:
            raise ConfigError(f"{config_path}: this {what} cannot run on this machine: {reason}")
    train_samples = int(source.get("train_samples") or default_train_samples(facts["train_size"]))
    seed = source.get("seed")  # the study's: the full run repeats its run at that seed
    settings = TrialSettings(train_samples=train_samples if kind == "train" else 1, device=hardware.device,
                             workload=kind, seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else 0)
    for note in result.notes:
        on_event(Note(note))
    # its preflight filled this machine's caches: the runs here read them offline (advisor.workload.downloads)
    executor = RayExecutor(hardware.device, ray_address, env=trial_switches(ray_address),
                           preload=preloads(config.to_dict().items())).start()
    try:
        candidate = Candidate("the config", config, result.confirmation)
        Rounds(executor, workload, settings, SentinelJudge(), target, pairs, trial_timeout, Stop(), on_event,
               lambda c, wall: on_pair(c.confirmation, wall) if on_pair else None).run(baseline, [candidate])
        if measure_metric and result.confirmation.status != "failed":
            result.full_run = run_one(executor, 0, TrialPayload.of(workload, config, settings), trial_timeout)
    finally:
        executor.shutdown()
    if result.confirmation.status == "failed":
        raise TrialFailed(f"the config failed to run: {result.confirmation.note}")
    return result


def comparison_table(result: Remeasured) -> Any:
    """A rich Table: each figure as stored, as measured now (paired), and the verdict."""
    from rich.table import Table

    thr_now = result.confirmation.throughput
    n = thr_now.n if thr_now is not None else 0  # the pairs its figures count (disturbed ones left out)
    left = result.confirmation.left_out
    table = Table("figure", "stored", f"now ({n} pair{'s' if n != 1 else ''} against the baseline"
                  + (f"; {left} disturbed left out" if left else "") + ")", "verdict",
                  title="stored vs measured again on this machine", title_justify="left",
                  caption="ratios: the config against the baseline run around it, median (95% interval); "
                          "the metric: one full run of the config" + (
                              ", against the study's run at the same seed" if result.metric_figures()["same_seed"]
                              else ", against the exported score (a seed mean where the study trained more seeds)"),
                  caption_justify="left")
    for key, name in (("throughput_ratio", "throughput vs baseline"), ("memory_ratio", "peak memory vs baseline")):
        f = result.ratio(key)
        span = f["stored_interval"]
        stored = "-" if f["stored"] is None else f"{f['stored']:.2f}x" + (
            (f" ({ratio_end(span[0])}-{ratio_end(span[1])})" if span[1] is not None and math.isfinite(span[1])
             else " (unbounded)") if f["stored_confirmed"] and span else " unconfirmed")
        today = Interval.from_dict(f["now"]) if f["now"] else None
        now = today.text() if today is not None else "-"
        verdict = ""
        if today is not None and not math.isfinite(today.high):  # any stored ratio lies "within" it
            verdict = "today's interval is unbounded: no verdict"
        elif "stored_within_now" in f:
            verdict = "stored ratio within today's interval" if f["stored_within_now"] else (
                "intervals overlap" if f.get("intervals_overlap") else "stored ratio outside today's interval")
        table.add_row(name, stored, now, verdict)
    acc, metric = result.metric_figures(), result.metric
    if acc["now"] is not None:
        stored_acc = "-" if acc["stored"] is None else metric.value_text(acc["stored"])
        diff = metric.delta_text(acc["difference"]) if "difference" in acc else ""
        noise = (result.stored.get("vs_baseline") or {}).get("metric_noise_epsilon")
        if diff and isinstance(noise, (int, float)) and noise > 0:  # what a difference of seeds would be
            diff += f" (the study's seed-to-seed noise: {metric.noise_text(noise)})"
        table.add_row(metric.name, stored_acc, metric.value_text(acc["now"]), diff)
    if (lat := result.latency_figures()) is not None:
        then, now = Latency.from_dict(lat["stored"]), Latency.from_dict(lat["now"])
        table.add_row(f"p99 latency at batch {(now or then).batch_size}",  # type: ignore[union-attr]
                      fmt_ms(then.p99_ms) + then.mark if then else "-", fmt_ms(now.p99_ms) + now.mark if now else "-",
                      f"{lat['p99_ratio']:.2f}x the stored (one run each)" if "p99_ratio" in lat else "")
    return table


def describe_run(r: TrialResult, metric: MetricSpec = DEFAULT_METRIC) -> str:
    """One line for a full run."""
    latency = Latency.from_dict(r.telemetry.get(LATENCY))  # an inference run's
    return (f"{fmt_rate(r.throughput)} samples/s, {fmt_bytes(r.peak_memory_bytes)}, "
            f"{metric.name} {metric.value_text(r.score)}"  # type: ignore[arg-type]
            + (f", latency {latency.text()}{latency.mark}" if latency is not None else ""))

"""Two-stage evaluation in a running study: probed configurations wait here for the
decision on their training run (``advisor.core.two_stage`` has the rules).

The queue decides and never writes: ``advisor.study.run._ledger.Ledger`` stores what it decides.
The Tuner runs every configuration's probe first and hands the result to ``probed()``;
the ledger stores the probe's figures on the (still running) Optuna trial at once, so a
driver killed between the two parts leaves them, and the next run of the same command
adopts the trial and goes on with its training run. Whenever a slot is free the Tuner
asks ``settle()`` for what needs no run: a configuration dominated beyond noise by one
already known to be feasible (``ProbedOnly``: stored as probed, Optuna's PRUNED, with
``TRAINING_SKIPPED`` saying by which trial; never a probe kept although every run of it was
disturbed, or timed on a busy machine: its speed is no evidence), and one whose fingerprint
matches a trained
configuration's (``Reused``: its metric is reused). Throughputs are compared as ratios
to the baseline's reference as it stood at each probe (``StoredStudy.reference_at``), so a
machine that was faster when one probe ran than when the other did decides nothing. Then ``next_run()`` names the
configuration whose training run goes next: one no other waiting configuration dominates,
fastest first, unless one has been passed over ``PATIENCE`` times (it goes next); the baseline
always runs, and before anything else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.core.interference import busy
from advisor.core.objectives import Limits
from advisor.core.results import TrialPayload, TrialResult, TrialSettings
from advisor.core.stored import (
    CURVE,
    EARLY_STOP,
    INITIAL_LOSS,
    METRIC_REUSED,
    PROBE_WALL,
    PROBED_AT,
    StoredStudy,
    TrialRecord,
    stored_result,
)
from advisor.core.study_attrs import StudyAttrs
from advisor.core.two_stage import (
    REUSE_KNOBS,
    REUSE_TOLERANCE,
    Gate,
    ProbeMargins,
    dominates_beyond_noise,
    fingerprint_difference,
    gate_from,
)
from advisor.search.strategy import Proposal
from advisor.study.run._ledger import Ledger, ProbedOnly, Reused

PATIENCE = 3  # training runs chosen before a waiting configuration on the front of the queue gets its turn


@dataclass
class Waiting:
    """A probed configuration waiting for the decision on its training run (``running``:
    that run is under way)."""

    proposal: Proposal
    probe: TrialResult
    wall_s: float
    running: bool = False
    at: float = field(default_factory=time.time)  # when the probe finished
    passed_over: int = 0  # training runs chosen before it while it was on the front of what waits

    @property
    def figures(self) -> tuple[float, float]:
        return float(self.probe.throughput or 0.0), float(self.probe.peak_memory_bytes or 0)

    def relative(self, stored: StoredStudy) -> tuple[float, float]:
        """(throughput ratio to the baseline's reference at the probe, peak memory)."""
        return relative(stored, self.figures, self.at)


def relative(stored: StoredStudy, figures: tuple[float, float], when: float | None) -> tuple[float, float]:
    """A probe's (throughput, peak memory) with the throughput as a ratio to the baseline's
    reference at ``when`` (the median of its latest measurements by then)."""
    reference = stored.reference_at(when)
    return (figures[0] / reference if reference else figures[0]), figures[1]


def _dominated_text(by: int, better: tuple[float, float], mine: tuple[float, float], margins: ProbeMargins) -> str:
    return (f"dominated by trial {by} ({better[0] / mine[0]:.2f}x its throughput, {better[1] / mine[1]:.2f}x its "
            f"memory, each against the baseline as measured by then; noise +-{100 * margins.throughput:.0f}% / "
            f"+-{100 * margins.memory:.0f}%)")


def probe_result(record: TrialRecord) -> TrialResult:
    """A stored trial's result as the trial process returned it (its probe's, with the
    metric it has, if any), for a reader of events."""
    return stored_result(record.attrs)


class TrainingQueue:
    """Decides; never writes (``advisor.study.run._ledger.Ledger`` stores what it decides).

    Args:
        ledger: the study's ledger, read for the baseline, the stored trials and the noise.
        settings: the study's trial settings; limits: what makes a trial feasible.
    """

    def __init__(self, ledger: Ledger, settings: TrialSettings, limits: Limits) -> None:
        self.ledger, self.settings, self.limits = ledger, settings, limits
        self.waiting: dict[int, Waiting] = {}

    # ---- the parts come in ------------------------------------------------------------
    def adopt_unfinished(self, alive: Callable[[str | None], bool]) -> list[int]:
        """Trials a gone driver left running after their probe (``alive``: whether a
        driver still runs): adopted, waiting for their training run. Returns their numbers."""
        adopted = []
        for proposal, record in self.ledger.adopt_probed(alive):
            self.waiting[proposal.number] = Waiting(proposal, probe_result(record), float(record.get(PROBE_WALL, 0.0)),
                                                    at=float(record.get(PROBED_AT) or time.time()))
            adopted.append(proposal.number)
        return adopted

    def probed(self, proposal: Proposal, result: TrialResult, wall_s: float) -> Waiting:
        """A probe finished well: it waits for the decision on its training run."""
        waiting = self.waiting[proposal.number] = Waiting(proposal, result, wall_s)
        return waiting

    def started(self, w: Waiting) -> None:
        """``w``'s training run is under way (``next_run`` passes it over); every other one
        still waiting was passed over once more."""
        w.running = True
        for other in self.waiting.values():
            if not other.running:
                other.passed_over += 1

    def pop(self, number: int) -> Waiting:
        """Trial ``number`` leaves the queue (its training run is done, or cancelled)."""
        return self.waiting.pop(number)

    def merged(self, number: int, result: TrialResult) -> TrialResult:
        """The trial's two parts as one result (for a reader of events): the probe's
        figures and timing, the training run's metric and training."""
        probe = self.waiting[number].probe
        phases = dict(probe.phase_s) | {f"training_{k}": v for k, v in result.phase_s.items()}
        if not result.ok:
            return replace(result, phase_s=phases)
        return replace(probe, score=result.score, train_samples=result.train_samples,
                       final_loss=result.final_loss, phase_s=phases,
                       telemetry=probe.telemetry | {k: result.telemetry.get(k) for k in ("curve", "early_stop")})

    # ---- decisions --------------------------------------------------------------------
    def settle(self) -> list[ProbedOnly | Reused]:
        """The waiting configurations that need no training run (dominated beyond noise by a
        feasible one, or over the memory cap) or may reuse a metric (same training numerics),
        taken out of the queue: the ledger stores them as decided."""
        decided: list[ProbedOnly | Reused] = []
        stored = self.ledger.stored()
        feasible = [(r.number, relative(stored, r.probe, r.get(PROBED_AT) or r.finished_at))
                    for r in stored.records if r.state == "complete" and r.feasible and r.probe is not None]
        margins = stored.probe_margins  # the baseline's own measurements in this study
        for number, w in sorted(self.waiting.items()):
            if w.proposal.baseline or w.running:
                continue
            over = self._over_memory_cap(w)
            mine = w.relative(stored)
            # a probe kept although every run of it was disturbed, or timed on a busy machine, reads
            # too slow by an unknown amount: it is never ruled out on its speed (a review's 16x-too-slow
            # probe was)
            by = None if "kept" in w.probe.telemetry or busy(w.probe.telemetry) else next(
                ((n, f) for n, f in feasible if dominates_beyond_noise(f, mine, margins)), None)
            if over or by is not None:
                self.waiting.pop(number)
                decided.append(ProbedOnly(number, over or _dominated_text(*by, mine, margins)))  # type: ignore[misc]
                continue
            reuse = self._reusable(w, stored.records, REUSE_KNOBS | stored.neutral_knobs)
            if reuse is not None:
                self.waiting.pop(number)
                decided.append(Reused(number, w.probe, w.wall_s, *reuse))
        return decided

    def next_run(self, anyway: bool) -> Waiting | None:
        """The waiting configuration whose training run goes next: the baseline first; then
        one no other waiting configuration dominates beyond noise, fastest first, unless one
        was passed over ``PATIENCE`` times (``started``); that one only when ``anyway`` (the
        Tuner says when: enough are waiting to choose among, or no probe can start)."""
        pool = [w for w in self.waiting.values() if not w.running]
        base = next((w for w in pool if w.proposal.baseline), None)
        if base is not None or not anyway or not pool:
            return base
        stored = self.ledger.stored()
        margins = stored.probe_margins  # the baseline's own measurements in this study
        figures = {n: w.relative(stored) for n, w in self.waiting.items()}  # running ones too: verdict pending
        front = [w for w in pool if not any(dominates_beyond_noise(f, figures[w.proposal.number], margins)
                                            for f in figures.values())] or pool
        # fastest first, but one passed over PATIENCE times goes next: a slow configuration may hold
        # the best metric, which only its training run can show (replaying the digits MLP grid, bs=16,
        # the grid's best metric, waited behind every faster probe to the end of the study)
        overdue = [w for w in front if w.passed_over >= PATIENCE]
        if overdue:
            return max(overdue, key=lambda w: (w.passed_over, -w.at))
        return max(front, key=lambda w: figures[w.proposal.number][0])

    def payload(self, w: Waiting, workload: Any) -> TrialPayload:
        """The training run of a waiting configuration, with the gate (none for the
        baseline and its seeds: they make it)."""
        gate = None if w.proposal.baseline else self.gate()
        return TrialPayload.of(workload, w.proposal.config, replace(self.settings, part="training"),
                               gate.to_dict() if gate is not None else None)

    def gate(self) -> Gate | None:
        """The early-stop gate from the baseline's learning curve and its seeds' curves."""
        base = self.ledger.baseline_record
        if base is None:
            return None
        reference = self.ledger.reference_metric  # the seed mean, once measured
        allowed = self.limits.allowed(reference) if reference is not None else self.limits.max_metric_drop
        curves = StudyAttrs(self.ledger.study).metric_noise_curves()
        return gate_from(base.get(CURVE) or [], curves, allowed, base.get(INITIAL_LOSS))

    # ---- the steps --------------------------------------------------------------------
    def _over_memory_cap(self, w: Waiting) -> str | None:
        cap = self.limits.memory_cap
        if cap is not None and w.figures[1] > cap:
            return f"its peak memory ({w.figures[1] / 2**20:.1f} MiB) is over the memory cap ({cap / 2**20:.1f} MiB)"
        return None

    def _reusable(self, w: Waiting, records: list[TrialRecord],
                  knobs: frozenset[str]) -> tuple[TrialRecord, float] | None:
        """A trained trial (its metric measured) whose configuration differs from ``w``'s only in
        ``knobs`` (``REUSE_KNOBS`` and those the study found neutral on this model) and whose
        probe's fingerprint matches, with the difference."""
        mine = w.probe.telemetry.get("fingerprint")
        if mine is None:
            return None
        config = w.proposal.config.to_dict()
        for r in records:
            if r.state != "complete" or r.config is None or r.get(METRIC_REUSED) is not None or r.get(EARLY_STOP):
                continue
            other = r.config.to_dict()
            if any(config[k] != other.get(k) for k in config if k not in knobs):
                continue
            diff = fingerprint_difference(mine, (r.get("telemetry") or {}).get("fingerprint"))
            if diff is not None and diff <= REUSE_TOLERANCE:
                return r, diff
        return None

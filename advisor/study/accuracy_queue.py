"""Two-stage evaluation in a running study: probed configurations wait here for the
decision on their accuracy (``advisor.core.two_stage`` has the rules).

The Tuner runs every configuration's probe first and hands the result to ``probed()``;
the probe's figures are stored on the (still running) Optuna trial at once, so a driver
killed between the two parts leaves them, and the next run of the same command adopts the
trial and goes on with its accuracy part. Whenever a slot is free the Tuner asks
``settle()`` to finish what needs no run: a configuration dominated beyond noise by one
already known to be feasible is stored as probed (Optuna's PRUNED, with
``accuracy_skipped`` saying by which trial), and one whose fingerprint matches an
accuracy-measured configuration's reuses that accuracy. Throughputs are compared as ratios
to the baseline measured nearest in time to each probe (``StoredStudy.reference_at``), so a
machine that was faster when one probe ran than when the other did decides nothing. Then ``next_run()`` names the
configuration whose accuracy run goes next: one no other waiting configuration dominates,
fastest first; the baseline always runs, and before anything else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.core.events import Listener, Note
from advisor.core.objectives import Figures, Limits
from advisor.core.results import TrialPayload, TrialResult, TrialSettings
from advisor.core.stored import (
    ACCURACY_NOISE,
    ACCURACY_REUSED,
    ACCURACY_RUN,
    ACCURACY_SKIPPED,
    BASELINE_MEASUREMENTS,
    CURVE,
    DRIVER,
    EARLY_STOP,
    INITIAL_LOSS,
    PROBE_DONE,
    PROBE_WALL,
    PROBED_AT,
    WALL,
    StoredStudy,
    TrialRecord,
    read_study,
    read_trial,
    result_attrs,
)
from advisor.core.two_stage import (
    REUSE_KNOBS,
    REUSE_TOLERANCE,
    Gate,
    ProbeMargins,
    dominates_beyond_noise,
    fingerprint_difference,
    gate_from,
)
from advisor.search.strategy import Proposal, Strategy


@dataclass
class Waiting:
    """A probed configuration waiting for its accuracy decision (``running``: its accuracy
    run is under way)."""

    proposal: Proposal
    probe: TrialResult
    wall_s: float
    running: bool = False
    at: float = field(default_factory=time.time)  # when the probe finished

    @property
    def figures(self) -> tuple[float, float]:
        return float(self.probe.throughput or 0.0), float(self.probe.peak_memory_bytes or 0)

    def relative(self, stored: StoredStudy) -> tuple[float, float]:
        """(throughput ratio to the baseline measured nearest the probe, peak memory)."""
        return relative(stored, self.figures, self.at)


def relative(stored: StoredStudy, figures: tuple[float, float], when: float | None) -> tuple[float, float]:
    """A probe's (throughput, peak memory) with the throughput as a ratio to the baseline
    measured nearest in time to ``when``."""
    reference = stored.reference_at(when)
    return (figures[0] / reference if reference else figures[0]), figures[1]


def _dominated_text(by: int, better: tuple[float, float], mine: tuple[float, float], margins: ProbeMargins) -> str:
    return (f"dominated by trial {by} ({better[0] / mine[0]:.2f}x its throughput, {better[1] / mine[1]:.2f}x its "
            f"memory, each against the baseline measured nearest in time; noise +-{100 * margins.throughput:.0f}% / "
            f"+-{100 * margins.memory:.0f}%)")


def probe_result(record: TrialRecord) -> TrialResult:
    """A stored trial's result as the trial process returned it (its probe's, with the
    accuracy it has, if any), for a reader of events."""
    fields = {k: v for k, v in record.attrs.items() if k in TrialResult.__dataclass_fields__ and k != "ok"}
    return TrialResult(ok=True, **fields)


class AccuracyQueue:
    """Args:
        study: the Optuna study; strategy: its Strategy (which owns ask / tell).
        settings: the study's trial settings; limits: what makes a trial feasible.
        on_event: receives ``Note`` events.
    """

    def __init__(self, study: Any, strategy: Strategy, settings: TrialSettings, limits: Limits,
                 on_event: Listener) -> None:
        self.study, self.strategy, self.settings, self.limits, self.emit = study, strategy, settings, limits, on_event
        self.waiting: dict[int, Waiting] = {}

    # ---- the parts come in ------------------------------------------------------------
    def adopt_unfinished(self, alive: Callable[[str | None], bool]) -> list[int]:
        """Trials a gone driver left running after their probe (``alive``: whether a
        driver still runs): adopted, waiting for their accuracy part. Returns their numbers."""
        import optuna

        adopted = []
        for frozen in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            attrs = frozen.user_attrs
            if not attrs.get(PROBE_DONE) or alive(attrs.get(DRIVER)):
                continue
            proposal = self.strategy.adopt(frozen)
            probe = probe_result(read_trial(frozen))
            self.waiting[frozen.number] = Waiting(proposal, probe, float(attrs.get(PROBE_WALL, 0.0)),
                                                  at=float(attrs.get(PROBED_AT) or time.time()))
            adopted.append(frozen.number)
        return adopted

    def probed(self, proposal: Proposal, result: TrialResult, wall_s: float) -> None:
        """A probe finished well: store it on the running trial and wait for the decision."""
        trial, _ = self.strategy.running(proposal.number)
        for key, value in result_attrs(result, wall_s).items():
            trial.set_user_attr(key, value)
        waiting = Waiting(proposal, result, wall_s)
        trial.set_user_attr(PROBE_WALL, wall_s)
        trial.set_user_attr(PROBED_AT, waiting.at)
        trial.set_user_attr(PROBE_DONE, True)
        self.waiting[proposal.number] = waiting

    def merged(self, number: int, result: TrialResult) -> TrialResult:
        """The trial's two parts as one result (for a reader of events): the probe's
        figures and timing, the accuracy run's metric and training."""
        probe = self.waiting[number].probe
        phases = dict(probe.phase_s) | {f"accuracy_{k}": v for k, v in result.phase_s.items()}
        if not result.ok:
            return replace(result, phase_s=phases)
        return replace(probe, accuracy=result.accuracy, train_samples=result.train_samples,
                       final_loss=result.final_loss, phase_s=phases,
                       telemetry=probe.telemetry | {k: result.telemetry.get(k) for k in ("curve", "early_stop")})

    def finished(self, number: int, result: TrialResult, wall_s: float) -> TrialRecord:
        """Store an accuracy run's result with its probe's and tell Optuna."""
        w = self.waiting.pop(number)
        trial, proposal = self.strategy.running(number)
        run = {"wall_s": wall_s, "phase_s": result.phase_s, "peak_memory_bytes": result.peak_memory_bytes,
               "host": result.host, "pid": result.pid}
        trial.set_user_attr(ACCURACY_RUN, run)
        trial.set_user_attr(WALL, w.wall_s + wall_s)
        if not result.ok:
            trial.set_user_attr("failure_class", result.failure_class)
            trial.set_user_attr("failure_message", result.failure_message)
            return self._tell(number, trial, None)
        for key in ("accuracy", "train_samples", "final_loss"):
            trial.set_user_attr(key, getattr(result, key))
        curve, stop = result.telemetry.get("curve"), result.telemetry.get("early_stop")
        trial.set_user_attr(CURVE, curve)
        if result.telemetry.get("model"):  # the trained and finished model's facts replace the probe's
            trial.set_user_attr("telemetry", w.probe.telemetry | {"model": result.telemetry["model"]})
        trial.set_user_attr(INITIAL_LOSS, result.telemetry.get("initial_loss"))
        if stop:
            trial.set_user_attr(EARLY_STOP, stop)
        figures = Figures(*w.figures, float(result.accuracy))  # type: ignore[arg-type]
        return self._tell(number, trial, figures, early_stopped=bool(stop), baseline=proposal.baseline)

    def cancel(self, number: int, reason: str) -> TrialRecord:
        """The study stops before this configuration's accuracy part is done: stored as
        cancelled (its probe kept with it; not counted: it runs again on resume)."""
        self.waiting.pop(number)
        trial, _ = self.strategy.running(number)
        trial.set_user_attr("failure_class", "cancelled")
        trial.set_user_attr("failure_message", f"cancelled before its accuracy part: {reason}")
        return self._tell(number, trial, None)

    # ---- decisions --------------------------------------------------------------------
    def settle(self) -> list[TrialRecord]:
        """Finish every waiting configuration that needs no accuracy run (dominated beyond
        noise by a feasible one) or may reuse one (same training numerics)."""
        done = []
        stored = read_study(self.study)
        feasible = [(r.number, relative(stored, r.probe, r.get(PROBED_AT) or r.finished_at))
                    for r in stored.records if r.state == "complete" and r.feasible and r.probe is not None]
        margins = self.margins()
        for number, w in sorted(self.waiting.items()):
            if w.proposal.baseline or w.running:
                continue
            over = self._over_memory_cap(w)
            mine = w.relative(stored)
            by = next(((n, f) for n, f in feasible if dominates_beyond_noise(f, mine, margins)), None)
            if over or by is not None:
                done.append(self._skip(number, over or _dominated_text(*by, mine, margins)))  # type: ignore[misc]
                continue
            reuse = self._reusable(w, stored.records)
            if reuse is not None:
                done.append(self._reuse(number, *reuse))
        return done

    def next_run(self, anyway: bool) -> Waiting | None:
        """The waiting configuration whose accuracy run goes next: the baseline first; then
        one no other waiting configuration dominates beyond noise, fastest first; that one
        only when ``anyway`` (the Tuner says when: enough are waiting to choose among, or
        no probe can start)."""
        pool = [w for w in self.waiting.values() if not w.running]
        base = next((w for w in pool if w.proposal.baseline), None)
        if base is not None or not anyway or not pool:
            return base
        margins, stored = self.margins(), read_study(self.study)
        figures = {n: w.relative(stored) for n, w in self.waiting.items()}  # running ones too: verdict pending
        front = [w for w in pool if not any(dominates_beyond_noise(f, figures[w.proposal.number], margins)
                                            for f in figures.values())]
        return max(front or pool, key=lambda w: figures[w.proposal.number][0])

    def payload(self, w: Waiting, workload: Any) -> TrialPayload:
        """The accuracy run of a waiting configuration, with the gate (none for the
        baseline and its seeds: they make it)."""
        gate = None if w.proposal.baseline else self.gate()
        return TrialPayload.of(workload, w.proposal.config, replace(self.settings, stage="accuracy"),
                               gate.to_dict() if gate is not None else None)

    def gate(self) -> Gate | None:
        """The early-stop gate from the baseline's learning curve and its seeds' curves."""
        base = self.strategy.baseline_record
        if base is None:
            return None
        noise = self.study.user_attrs.get(ACCURACY_NOISE) or {}
        allowed = self.limits.allowed(base.figures.accuracy) if base.figures is not None else self.limits.max_accuracy_drop
        return gate_from(base.get(CURVE) or [], noise.get("curves") or [], allowed,
                         float(noise.get("epsilon") or 0.0), base.get(INITIAL_LOSS))

    def margins(self) -> ProbeMargins:
        """Probe noise from the baseline's own measurements in this study."""
        base = self.strategy.baseline_record
        measured = [(m.get("throughput"), m.get("peak_memory_bytes"))
                    for m in self.study.user_attrs.get(BASELINE_MEASUREMENTS) or []]
        if base is not None and base.probe is not None:
            measured.append(base.probe)
        return ProbeMargins.from_baseline([t for t, _ in measured if t], [m for _, m in measured if m])

    # ---- the steps --------------------------------------------------------------------
    def _over_memory_cap(self, w: Waiting) -> str | None:
        cap = self.limits.memory_cap
        if cap is not None and w.figures[1] > cap:
            return f"its peak memory ({w.figures[1] / 2**20:.1f} MiB) is over the memory cap ({cap / 2**20:.1f} MiB)"
        return None

    def _reusable(self, w: Waiting, records: list[TrialRecord]) -> tuple[TrialRecord, float] | None:
        """An accuracy-measured trial whose configuration differs from ``w``'s only in
        ``REUSE_KNOBS`` and whose probe's fingerprint matches, with the difference."""
        mine = w.probe.telemetry.get("fingerprint")
        if mine is None:
            return None
        config = w.proposal.config.to_dict()
        for r in records:
            if r.state != "complete" or r.config is None or r.get(ACCURACY_REUSED) is not None or r.get(EARLY_STOP):
                continue
            other = r.config.to_dict()
            if any(config[k] != other.get(k) for k in config if k not in REUSE_KNOBS):
                continue
            diff = fingerprint_difference(mine, (r.get("telemetry") or {}).get("fingerprint"))
            if diff is not None and diff <= REUSE_TOLERANCE:
                return r, diff
        return None

    def _skip(self, number: int, reason: str) -> TrialRecord:
        import optuna

        self.waiting.pop(number)
        trial, _ = self.strategy.running(number)
        trial.set_user_attr(ACCURACY_SKIPPED, reason)
        frozen = self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        return self.strategy.finished(number, frozen)

    def _reuse(self, number: int, source: TrialRecord, diff: float) -> TrialRecord:
        w = self.waiting.pop(number)
        trial, _ = self.strategy.running(number)
        trial.set_user_attr(ACCURACY_REUSED, source.number)
        trial.set_user_attr("accuracy_reuse_difference", diff)
        trial.set_user_attr("accuracy", source.figures.accuracy)  # type: ignore[union-attr]
        trial.set_user_attr(WALL, w.wall_s)
        self.emit(Note(f"trial {number}: accuracy reused from trial {source.number} (same training numerics: "
                       f"its first steps agree within {diff:.1e}, relative)"))
        figures = Figures(*w.figures, source.figures.accuracy)  # type: ignore[union-attr]
        return self._tell(number, trial, figures)

    def _tell(self, number: int, trial: Any, figures: Figures | None, early_stopped: bool = False,
              baseline: bool = False) -> TrialRecord:
        import optuna

        if figures is None:
            frozen = self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return self.strategy.finished(number, frozen)
        reference = figures.accuracy if baseline else self.strategy.reference_accuracy
        constraints = self.limits.constraints(figures, figures.accuracy if reference is None else reference)
        if early_stopped:  # infeasible by the gate's decision, whatever the figure where it stopped
            constraints["accuracy_drop"] = max(constraints["accuracy_drop"], 1e-9)
        for key, value in constraints.items():
            trial.set_constraint(key, value)
        return self.strategy.finished(number, self.study.tell(trial, list(figures)))


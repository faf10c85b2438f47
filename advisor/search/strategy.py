"""The search strategy: what the study runs next, decided from what is known. It never
runs a trial and never touches storage: ``advisor.study.run._ledger.Ledger`` asks Optuna, hands
each configuration to ``decide()``, stores what comes back and tells the strategy
(``learn``). The steps:

1. the baseline (the user's current setup) first, alone (the ledger enqueues it);
2. with the ``default`` sampler, the baseline with one knob changed (``one_knob``), then,
   once those are in and the baseline is measured again (``reference_due``; every ratio
   the search decides on is to the baseline's measurements nearest it in time,
   ``StoredStudy.decision_reference``), two combinations of the changes that paid off (``combine``), then,
   three proposals in four (``MODEL_EVERY``), the best candidate under a model of the
   knobs' effects fitted to every measurement so far (``effects``): all are returned by
   ``to_queue()`` for the ledger to queue ahead of the sampler;
3. the Optuna sampler's proposals (TPE by default; with ``default``, one in four);
4. ``decide()`` answers a configuration already measured (or running) with the earlier
   trial (``Duplicate``); one that cannot work (knob values that cannot be combined, more
   devices than the cluster has, or not on the device trials run on: the CUDA flash
   attention kernel in fp32), or would run out of memory (``known_oom``) or fail
   (``known_failures``) like earlier trials, is ``Skip``ped. Neither runs, and neither
   counts towards the study's number of trials.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from advisor.core.config import TrialConfig
from advisor.core.events import Listener, Note, ignore
from advisor.core.objectives import Figures, Limits
from advisor.core.stored import StoredStudy, TrialRecord
from advisor.core.two_stage import DEFAULT_MEMORY_MARGIN, DEFAULT_THROUGHPUT_MARGIN
from advisor.search import effects
from advisor.search.combine import COMBINATIONS, MARGIN, combination_configs
from advisor.search.known_failures import KnownFailures
from advisor.search.known_oom import KnownOom
from advisor.search.one_knob import neighbours, seed_configs, seed_count
from advisor.search.space import SearchSpace
from advisor.techniques.rules import refusal

MODEL_EVERY = 4  # after the combinations, the sampler proposes one in this many, the model of effects the others
DUPLICATES_IN_A_ROW = 50  # the sampler has nothing new to offer: stop
BUSY_IN_A_ROW = 3  # trials not measured because another process held the GPU: stop (resumable)


@dataclass(frozen=True)
class Proposal:
    """A configuration to run as trial ``number`` of the study."""

    number: int
    config: TrialConfig
    baseline: bool = False


@dataclass(frozen=True)
class Run:
    """``decide()``: run this configuration."""

    config: TrialConfig


@dataclass(frozen=True)
class Skip:
    """``decide()``: do not run it (recorded as skipped with ``reason`` and ``failure_class``)."""

    config: TrialConfig
    reason: str
    failure_class: str


@dataclass(frozen=True)
class Duplicate:
    """``decide()``: already measured, running or skipped as trial ``earlier``: answer from it."""

    config: TrialConfig
    earlier: TrialRecord | Proposal


Decision = Run | Skip | Duplicate


@dataclass(frozen=True)
class Queued:
    """``to_queue()``: the configurations the sampler hands out next, in order."""

    seeds: list[TrialConfig] = field(default_factory=list)
    combinations: list[TrialConfig] = field(default_factory=list)
    model: list[TrialConfig] = field(default_factory=list)  # from the model of the knobs' effects
    combined: bool = False  # the combination step is done for the study (whatever it queued)


class Strategy:
    """Decides what a study runs next from what it has learnt.

    Args:
        space: the search space, filtered for this machine.
        baseline: the user's current setup (trial 0).
        workload: "train" or "inference".
        sampler: "default" (seeds, combinations, then TPE) or a plain sampler's name.
        budget: the study's total number of trials (sizes the seed and combination steps).
        limits: what makes a trial feasible.
        max_devices: the most devices one trial can get (GPU slots), or None.
        device: the device type trials run on ("cuda" / "cpu"): combinations it cannot run
            are skipped (``advisor.techniques.rules.device_conflicts``); None: not checked.
        combined: the study's combination step was done by an earlier run.
        remeasures: the driver measures the baseline again when ``reference_due`` asks
            (``advisor tune``'s ``BaselineWatch``): the combination step waits for it once.
        on_event: receives a ``Note`` when a failure rule is learnt.
    """

    def __init__(self, space: SearchSpace, baseline: TrialConfig, *, workload: str, sampler: str, budget: int,
                 limits: Limits, max_devices: int | None = None, device: str | None = None,
                 combined: bool = False, remeasures: bool = False, on_event: Listener = ignore) -> None:
        self.space, self.baseline = space, baseline
        self.workload, self.budget, self.limits = workload, budget, limits
        self.max_devices, self.device, self.emit = max_devices, device, on_event
        # every configuration measured, skipped or running, by key: a repeat is a duplicate
        self._seen: dict[str, TrialRecord | Proposal] = {}
        self._known_oom, self._known_failures = KnownOom(), KnownFailures(baseline)
        self._space_size = space.size()
        self._seeds_due = sampler == "default"
        self._combine_due = sampler == "default" and not combined
        self._model_due = sampler == "default"
        self._turn, self._model_said = 0, False
        # the combination step waits, once, for the baseline to be measured again after the seeds
        # (the driver's ``BaselineWatch`` does it while ``reference_due``)
        self._reference_asked, self.reference_due = not remeasures, False
        self._learned = 0  # trials learnt
        self._model_idle_at: int | None = None  # how many were learnt when the model last had nothing to propose
        self._neighbours: dict[str, list[TrialConfig]] = {}  # a configuration's one-knob changes, by key
        self._duplicates_in_a_row = 0
        self._busy_in_a_row = 0
        self.gave_up: str | None = None  # why the strategy stopped proposing for good
        # it gave up for want of new configurations (not because nothing can run): what runs and what
        # waits for its training run still finishes
        self.out_of_proposals = False

    # ---- what to run next -----------------------------------------------------------------
    def to_queue(self, *, own_in_flight: bool, waiting: Callable[[], bool], baseline: TrialRecord | None,
                 stored: Callable[[], StoredStudy]) -> Queued | None:
        """What the ledger queues before it asks the sampler: the one-knob seeds (first
        call), then, once no queued trial waits and the seeds are in, the combinations.
        None: nothing can be proposed until this driver's trials in flight are stored, or
        (``reference_due``) until the driver has measured the baseline again after the seeds.

        Args:
            own_in_flight: this driver has trials proposed and not yet stored.
            waiting: whether queued trials still wait to be handed out.
            baseline: the stored baseline; stored: the study as stored now.
        """
        if self._seeds_due:
            self._seeds_due = False
            seeds = seed_configs(self.space, self.baseline, seed_count(self.budget), self.workload, self.device)
            return Queued(seeds=[c for c in seeds if c.key() not in self._seen])  # nothing else changes
        if not (self._combine_due or self._model_due):
            return Queued()
        if self._combine_due:
            if waiting():
                return Queued()
            if own_in_flight:
                return None  # every seed's result first
            if not self._reference_asked and baseline is not None and baseline.figures is not None:
                # then the baseline measured again, once: the seeds' ratios rest on trial 0's one
                # probe until then (trust.py's study B read every seed ~15% low against a fast one,
                # so bf16's 1.02x was no move, while the same command's other run found 1.18x)
                self._reference_asked = True
                if not stored().measured_after_trials:
                    self.reference_due = True
                    return None
            self.reference_due = False
            self._combine_due = False
            chosen = self._combinations(baseline, stored()) if baseline is not None and baseline.figures else []
            if chosen:
                self.emit(Note(f"next: {len(chosen)} combination(s) of the one-knob changes that paid off"))
            return Queued(combinations=chosen, combined=True)
        if not self._model_due or baseline is None or baseline.figures is None:
            return Queued()
        self._turn += 1
        if self._turn % MODEL_EVERY == 0 or self._model_idle_at == self._learned:
            return Queued()  # the sampler's turn (what the model cannot see), or nothing new since the model had none
        if waiting():  # configurations queued before (another driver's, or a resumed study's) go first
            return Queued()
        config = self._from_model(baseline, stored())
        self._model_idle_at = self._learned if config is None else None
        if config is not None and not self._model_said:
            self._model_said = True
            self.emit(Note(f"next: proposals from a model of the knobs' effects ({MODEL_EVERY - 1} in "
                           f"{MODEL_EVERY}; the sampler the rest)"))
        return Queued(model=[config] if config is not None else [])

    def decide(self, config: TrialConfig) -> Decision:
        """Whether the sampler's ``config`` runs, is skipped, or repeats an earlier trial."""
        earlier = self._seen.get(config.key())
        if earlier is not None:
            self._duplicates_in_a_row += 1
            if self._duplicates_in_a_row >= DUPLICATES_IN_A_ROW:
                self.gave_up = (f"the sampler proposed only already-measured configurations {DUPLICATES_IN_A_ROW} "
                                "times in a row")
                self.out_of_proposals = True
            return Duplicate(config, earlier)
        self._duplicates_in_a_row = 0
        reason, failure_class = self._why_not(config)
        if reason:
            return Skip(config, reason, failure_class)
        return Run(config)

    # ---- what is learnt ---------------------------------------------------------------------
    def handed_out(self, proposal: Proposal) -> None:
        """``proposal`` runs now (proposed here, or adopted from a gone driver)."""
        self._seen[proposal.config.key()] = proposal

    def running_elsewhere(self, record: TrialRecord) -> None:
        """Another driver runs ``record``: its configuration counts as seen."""
        if record.config is not None:
            self._seen.setdefault(record.config.key(), record)

    def learn(self, record: TrialRecord, key: str | None, quiet: bool = False) -> None:
        """A trial is stored (here or by another driver; ``key``: its configuration's):
        what it measured, skipped or failed (``quiet``: without a note of a learnt rule)."""
        if key is not None and (record.counted or record.state == "skipped"):
            self._seen[key] = record
        elif key is not None and getattr(self._seen.get(key), "number", None) == record.number:
            self._seen.pop(key)  # cut short, or lost with its node: the configuration may run again
        self._learned += 1
        self._known_oom.learn([record])
        if (learned := self._known_failures.add(record)) is not None and not quiet:
            self.emit(Note(learned))
        self._busy_in_a_row = self._busy_in_a_row + 1 if record.failure_class == "device_busy" else 0
        if self._busy_in_a_row >= BUSY_IN_A_ROW and self.gave_up is None:  # each waited 30 s, measured nothing
            held = (record.failure_message or "").split(": not measured")[0]
            self.gave_up = (f"{BUSY_IN_A_ROW} trials in a row found the GPU held by another process ({held}); "
                            "nothing was measured meanwhile. Run the same command again once it is free: the study "
                            "resumes")

    def without_reference(self) -> None:
        """The driver has no re-measurement of the baseline to give now (``reference_due``):
        the combination step goes on with the measurements there are."""
        self.reference_due = False

    @property
    def seeds_done(self) -> bool:
        """The one-knob seeds are measured (their combinations queued), or there were none."""
        return not self._seeds_due and not self._combine_due

    @property
    def space_exhausted(self) -> bool:
        """Every configuration of the space has been measured, skipped or is running."""
        return len(self._seen) >= self._space_size

    @property
    def space_size(self) -> int:
        return self._space_size

    # ---- the steps -------------------------------------------------------------------
    def _combinations(self, base: TrialRecord, stored: StoredStudy) -> list[TrialConfig]:
        """The combinations of one-knob changes that paid off, each trial's throughput
        rescaled to the baseline's measurements nearest to it (``_measured``; the combination step
        divides by trial 0's); probed-only trials count with their probe's figures."""
        assert base.figures is not None
        measured = [(c, f) for c, f, _ in self._measured(base, stored)]
        return combination_configs(self.baseline, base.figures, measured, self.limits,
                                   COMBINATIONS, self._allowed, self._margins(stored))

    def _from_model(self, base: TrialRecord, stored: StoredStudy) -> TrialConfig | None:
        """The model of the knobs' effects' next proposal (``advisor.search.effects``), or None."""
        assert base.figures is not None
        running = [p.config for p in self._seen.values() if isinstance(p, Proposal) and not p.baseline]
        running += [r.config for r in self._seen.values()
                    if isinstance(r, TrialRecord) and r.state == "running" and r.config is not None]
        margins = self._margins(stored)
        noise = (margins[0] / (2 * math.sqrt(2)), margins[1] / (2 * math.sqrt(2)))  # one measurement's log sd
        rng = random.Random(f"effects {len(self._seen)}")  # the same study state, the same proposal
        return effects.propose(self.space, self.baseline, base.figures, self._measured(base, stored), running,
                               self.limits, noise, self._allowed, rng, self._neighbours_of)

    def _neighbours_of(self, config: TrialConfig) -> list[TrialConfig]:
        key = config.key()
        if key not in self._neighbours:
            self._neighbours[key] = neighbours(self.space, config, self.workload, self.device)
        return self._neighbours[key]

    def _measured(self, base: TrialRecord, stored: StoredStudy) -> list[tuple[TrialConfig, Figures, bool]]:
        """Every counted trial but the baseline, with its figures, its throughput rescaled to
        the baseline's measurements nearest to it in time, later ones included
        (``StoredStudy.decision_reference``; to trial 0's), and whether its metric was
        measured; probed-only trials count with their probe's figures."""
        assert base.figures is not None
        first, held = base.figures.throughput, base.figures.score
        out = []
        for r in stored.records:
            if not r.counted or r.config is None or r.baseline:
                continue
            if r.state == "failed":  # its training run failed after the probe: not a result to learn from
                continue
            reference = stored.decision_reference(r) or first
            if r.figures is not None:
                out.append((r.config, r.figures._replace(throughput=r.figures.throughput * first / reference), True))
            elif r.probe is not None:
                # probed only (dominated, so it needed no training run): its speed and memory are
                # measured and its metric taken as held, so it still combines (another seed that
                # beat it, or a loaded machine, must not decide whether combinations follow); a
                # combination's own training run measures the metric
                out.append((r.config, Figures(r.probe[0] * first / reference, r.probe[1], held), False))
        return out

    @staticmethod
    def _margins(stored: StoredStudy) -> tuple[float, float]:
        """How much a change must move throughput and memory (relative) to count: the
        study's probe noise once measured. A machine that drifted between the baseline's
        measurements inflates that spread, so it is never taken above the margins assumed
        before any measurement."""
        noise = stored.probe_margins
        return ((min(noise.throughput, DEFAULT_THROUGHPUT_MARGIN), min(noise.memory, DEFAULT_MEMORY_MARGIN))
                if noise.measured else (MARGIN, MARGIN))

    def _allowed(self, config: TrialConfig) -> bool:
        return config.key() not in self._seen and self._why_not(config)[0] is None

    def _why_not(self, config: TrialConfig) -> tuple[str | None, str]:
        """Why ``config`` is not run (and the failure class it is recorded with), or None."""
        reason = refusal(config, self.workload, self.device)
        if reason:
            return reason, "unsupported"
        if self.max_devices is not None and config.devices > self.max_devices:
            return f"devices={config.devices} is more than this cluster's {self.max_devices} GPU slots", "unsupported"
        oom = self._known_oom.reason(config)
        if oom:
            return oom, "oom"
        return self._known_failures.reason(config) or (None, "")
